"""The ``/metrics`` + ``/healthz`` HTTP endpoint of the plugin's metrics."""

from __future__ import annotations

import logging
from collections.abc import Callable

from prometheus_client import CONTENT_TYPE_LATEST

from nri_plrm.observability.metrics import Metrics
from nri_plrm.util.http_server import IDLE_TIMEOUT, MAX_CONNECTIONS, BoundedHTTPServer, Reply
from nri_plrm.util.steps import beside_loop

_log = logging.getLogger("nri_plrm.metrics_server")


def parse_address(address: str) -> tuple[str, int]:
    """``host:port`` (``[::1]:9740`` for IPv6) as a (host, port) pair."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"metrics.address {address!r}: must be host:port")
    return host.strip("[]"), int(port)


class MetricsServer:
    """Serves ``/metrics`` and ``/healthz`` from background threads (see
    :class:`~nri_plrm.util.http_server.BoundedHTTPServer` for the connection and thread bounds).

    ``/healthz`` answers 200 ``ok`` only when ``health()`` says so, else 503 with the reason.
    """

    def __init__(
        self,
        metrics: Metrics,
        address: str,
        health: Callable[[], tuple[bool, str]] | None = None,
        *,
        max_connections: int = MAX_CONNECTIONS,
        idle_timeout: float = IDLE_TIMEOUT,
    ) -> None:
        self.metrics = metrics
        self.health = health or metrics.health
        host, port = parse_address(address)
        routes = {"/metrics": self._metrics, "/healthz": self._healthz}
        self.http = BoundedHTTPServer(
            host,
            port,
            routes,
            max_connections=max_connections,
            idle_timeout=idle_timeout,
            name="metrics-http",
        )

    @property
    def port(self) -> int:
        """The bound port (useful with port 0)."""
        return self.http.address[1]

    def start(self) -> None:
        """Start serving in background threads."""
        self.http.start()
        _log.info("metrics listening on %s:%d", self.http.address[0], self.port)

    def stop(self) -> None:
        """Stop serving and close the socket."""
        self.http.stop()

    def _metrics(self) -> Reply:
        return 200, beside_loop(self.metrics.exposition_steps()), CONTENT_TYPE_LATEST

    def _healthz(self) -> Reply:
        ok, why = self.health()
        return (200 if ok else 503), (why + "\n").encode(), "text/plain; charset=utf-8"
