"""``nri-plrm scheduler-extender``: the HTTP server around :class:`Extender`, the list and watch
of the nodes' NodeResourceTopology objects that feeds it (:class:`NodeFeed`), ``/metrics`` and
``/healthz``.

One asyncio loop runs everything (decisions are pure CPU work between two reads, so the node
states never change under a decision). HTTP/1.1 with keep-alive, as the scheduler's client
sends it: ``POST <prefix>/filter``, ``<prefix>/prioritize`` and ``<prefix>/bind`` (the verb is
the last path segment, so any ``urlPrefix`` works), ``GET /metrics`` and ``/healthz``. A
request body is read up to :data:`MAX_BODY` bytes; a connection idle for :data:`IDLE_TIMEOUT`
seconds is closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from typing import Any
from urllib.parse import quote

import httpx2
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

from nri_plrm.observability.metrics_server import parse_address
from nri_plrm.podsource.kube import describe_failure
from nri_plrm.scheduler.extender import Extender, ExtenderRequestError
from nri_plrm.scheduler.nodefeed import NodeFeed
from nri_plrm.scheduler.settings import ExtenderSettings

MAX_BODY = 64 << 20
"""Largest request body: an ``ExtenderArgs`` with a NodeList of 5,000 nodes fits."""
MAX_HEAD = 16 << 10
"""Largest request head."""
IDLE_TIMEOUT = 120.0
"""Seconds a kept-alive connection may stay silent."""
STALE_AFTER = 60.0
"""``/healthz`` fails once lists and watches have failed for this many seconds."""

log = logging.getLogger("nri_plrm.scheduler")


class ExtenderMetrics:
    """``nri_plrm_extender_*``: requests, verdicts, latency, nodes known."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "nri_plrm_extender_requests",
            "Extender requests by verb and result (ok, error)",
            ["verb", "result"],
            registry=self.registry,
        )
        self.verdicts = Counter(
            "nri_plrm_extender_verdicts",
            "Filter verdicts per node: admit, refuse, unresolvable",
            ["verdict"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "nri_plrm_extender_request_seconds",
            "Time to answer a request, by verb",
            ["verb"],
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
            registry=self.registry,
        )
        self.nodes = Gauge(
            "nri_plrm_extender_nodes",
            "Nodes with a NodeResourceTopology object, by state (usable, unusable)",
            ["state"],
            registry=self.registry,
        )
        self.assumed = Gauge(
            "nri_plrm_extender_assumed_pods",
            "Pods bound by the extender that their node's object does not show yet",
            registry=self.registry,
        )
        self.lists = Counter(
            "nri_plrm_extender_node_lists",
            "Lists of the NodeResourceTopology objects by result (ok, failed)",
            ["result"],
            registry=self.registry,
        )


class ExtenderServer:
    """The extender's HTTP server and its node list (see the module docstring)."""

    def __init__(
        self,
        settings: ExtenderSettings,
        http: httpx2.AsyncClient | None,
        extender: Extender,
    ) -> None:
        self.settings = settings
        self.http = http
        """The API client (base URL and credentials) that lists the objects and binds pods;
        None: nothing is listed and ``bind`` answers an error (tests)."""
        self.extender = extender
        self.metrics = ExtenderMetrics()
        extender.on_verdict = lambda v: self.metrics.verdicts.labels(v).inc()
        self._server: asyncio.Server | None = None
        self._lister: asyncio.Task[None] | None = None
        self.feed = (
            NodeFeed(
                http,
                extender,
                settings.resync,
                on_change=self._counted,
                on_list=lambda ok: self.metrics.lists.labels("ok" if ok else "failed").inc(),
            )
            if http is not None
            else None
        )

    @property
    def port(self) -> int:
        """The bound port (useful with port 0)."""
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    async def start(self) -> None:
        """Listen and start listing the nodes' objects."""
        host, port = parse_address(self.settings.address)
        self._server = await asyncio.start_server(self._serve, host or None, port)
        if self.feed is not None:
            self._lister = asyncio.get_running_loop().create_task(self.feed.run())
        log.info("scheduler extender listening on %s", self.settings.address)

    async def stop(self) -> None:
        """Stop listening and listing."""
        if self._lister is not None:
            self._lister.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._lister
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 1.0)

    # -- the nodes' objects ---------------------------------------------------------------------

    def _counted(self) -> None:
        usable = sum(1 for n in self.extender.node_names() if not self.extender.node_error(n))
        self.metrics.nodes.labels("usable").set(usable)
        self.metrics.nodes.labels("unusable").set(len(self.extender.node_names()) - usable)
        self.metrics.assumed.set(len(self.extender.assumed))

    def health(self) -> tuple[bool, str]:
        """Healthy once the objects were listed, and while lists and watches work (or have
        failed for less than :data:`STALE_AFTER` seconds)."""
        if self.feed is None:
            return True, "ok"
        if self.feed.synced_at is None:
            return False, "NodeResourceTopology objects not listed yet"
        since = self.feed.failing_since
        if since is not None:
            age = time.monotonic() - since
            if age > STALE_AFTER:
                return False, f"NodeResourceTopology objects unreadable for {age:.0f} s"
        return True, "ok"

    # -- HTTP -----------------------------------------------------------------------------------

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                try:
                    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), IDLE_TIMEOUT)
                except (asyncio.IncompleteReadError, asyncio.TimeoutError, ConnectionError):
                    return
                except asyncio.LimitOverrunError:
                    await self._send(writer, 431, b"request head too large\n", "text/plain")
                    return
                if len(head) > MAX_HEAD:
                    await self._send(writer, 431, b"request head too large\n", "text/plain")
                    return
                lines = head.decode("latin-1").split("\r\n")
                parts = lines[0].split(" ")
                if len(parts) != 3:
                    await self._send(writer, 400, b"bad request line\n", "text/plain")
                    return
                method, target, version = parts
                headers = {}
                for line in lines[1:]:
                    key, sep, value = line.partition(":")
                    if sep:
                        headers[key.strip().lower()] = value.strip()
                if "transfer-encoding" in headers:
                    await self._send(writer, 411, b"send a Content-Length\n", "text/plain")
                    return
                length = headers.get("content-length", "0")
                if not length.isdigit() or int(length) > MAX_BODY:
                    await self._send(writer, 413, b"body too large or unsized\n", "text/plain")
                    return
                body = await reader.readexactly(int(length)) if int(length) else b""
                status, reply, ctype = await self._handle(method, target.split("?", 1)[0], body)
                close = version == "HTTP/1.0" or headers.get("connection", "").lower() == "close"
                await self._send(writer, status, reply, ctype, close=close)
                if close:
                    return
        except (asyncio.IncompleteReadError, ConnectionError):
            return
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    @staticmethod
    async def _send(
        writer: asyncio.StreamWriter, status: int, body: bytes, ctype: str, *, close: bool = True
    ) -> None:
        head = (
            f"HTTP/1.1 {status} {'OK' if status == 200 else 'Error'}\r\n"
            f"Content-Type: {ctype}\r\nContent-Length: {len(body)}\r\n"
            f"Connection: {'close' if close else 'keep-alive'}\r\n\r\n"
        )
        writer.write(head.encode("latin-1") + body)
        await writer.drain()

    async def _handle(self, method: str, path: str, body: bytes) -> tuple[int, bytes, str]:
        verb = path.rstrip("/").rsplit("/", 1)[-1]
        if method == "GET" and path == "/metrics":
            return 200, generate_latest(self.metrics.registry), CONTENT_TYPE_LATEST
        if method == "GET" and path == "/healthz":
            ok, why = self.health()
            return (200 if ok else 503), (why + "\n").encode(), "text/plain; charset=utf-8"
        if method != "POST" or verb not in ("filter", "prioritize", "bind"):
            return 404, f"{method} {path}: not an extender verb\n".encode(), "text/plain"
        started = time.perf_counter()
        try:
            args = json.loads(body)
            answer = await self._verb(verb, args)
            result = "ok"
        except (ValueError, ExtenderRequestError) as exc:
            self.metrics.requests.labels(verb, "error").inc()
            log.warning("%s request refused: %s", verb, exc)
            return 400, f"{verb}: {exc}\n".encode(), "text/plain"
        if isinstance(answer, dict) and answer.get("Error"):
            result = "error"
        self.metrics.requests.labels(verb, result).inc()
        self.metrics.latency.labels(verb).observe(time.perf_counter() - started)
        return 200, json.dumps(answer).encode(), "application/json"

    async def _verb(self, verb: str, args: Any) -> Any:
        if verb == "filter":
            return self.extender.filter(args)
        if verb == "prioritize":
            return self.extender.prioritize(args)
        namespace, name, uid, node = self.extender.binding(args)
        if self.http is None:
            return {"Error": "bind: the extender runs without an API client"}
        error = await bind_pod(self.http, namespace, name, uid, node)
        if error:
            log.warning("%s", error)
        else:
            self.extender.bound(uid, node)
            self.metrics.assumed.set(len(self.extender.assumed))
        return {"Error": error}


async def bind_pod(http: httpx2.AsyncClient, namespace: str, name: str, uid: str, node: str) -> str:
    """Bind the pod as the scheduler's default binder does (``POST pods/<name>/binding``, the
    pod's uid as precondition; the API server answers a Status); "" or the error."""
    body = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": name, "namespace": namespace, "uid": uid},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }
    path = f"/api/v1/namespaces/{quote(namespace)}/pods/{quote(name)}/binding"
    try:
        response = await http.post(path, json=body)
    except Exception as exc:  # the connection's failures
        return f"binding {namespace}/{name} to {node}: {describe_failure(exc)}"
    if response.status_code >= 300:
        try:
            message = str(response.json().get("message", ""))
        except ValueError:
            message = response.text[:200]
        return f"binding {namespace}/{name} to {node}: HTTP {response.status_code}: {message}"
    return ""
