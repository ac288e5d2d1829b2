"""The metrics server under a flood of idle connections (issue 12, finding 9).

Before the fix every connection got its own thread with no timeout: 800 idle connections made
810 threads and slowed accepts to about 6 per second. Now threads and open connections are
bounded, idle connections are closed after the timeout, and probes keep being answered.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
import urllib.request
from collections.abc import Iterator

import pytest

from nri_plrm.observability.metrics import Metrics
from nri_plrm.observability.metrics_server import MetricsServer
from nri_plrm.util.http_server import WORKERS

IDLE = 400
"""Idle connections opened (far over the server's 64)."""
IDLE_TIMEOUT = 1.0


@pytest.fixture
def server() -> Iterator[MetricsServer]:
    s = MetricsServer(Metrics(), "127.0.0.1:0", lambda: (True, "ok"), idle_timeout=IDLE_TIMEOUT)
    s.start()
    yield s
    s.stop()


def idle_connections(port: int, n: int) -> list[socket.socket]:
    out = []
    for _ in range(n):
        sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        out.append(sock)
    return out


def closed_by_server(sock: socket.socket, wait: float) -> bool:
    """True when the server closed ``sock`` (EOF or reset) within ``wait`` seconds."""
    sock.settimeout(wait)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def get(port: int, path: str) -> tuple[int, bytes]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as reply:
        return reply.status, reply.read()


def test_idle_flood_keeps_threads_bounded_and_probes_answered(server: MetricsServer) -> None:
    before = threading.active_count()
    socks = idle_connections(server.port, IDLE)
    try:
        assert get(server.port, "/healthz") == (200, b"ok\n")
        status, body = get(server.port, "/metrics")
        assert status == 200 and b"nri_plrm_build_info" in body
        # the selector thread and the worker pool, whatever the number of connections
        assert threading.active_count() - before <= 1 + WORKERS
        assert server.http.connections() <= server.http.max_connections
    finally:
        for sock in socks:
            sock.close()


def test_idle_connections_are_closed_after_the_timeout(server: MetricsServer) -> None:
    opened = time.monotonic()
    socks = idle_connections(server.port, 20)
    try:
        time.sleep(0.3)
        early = [s for s in socks if closed_by_server(s, 0.01)]
        # a loaded machine may reach this line after the timeout: only then may some be closed
        assert not early or time.monotonic() - opened >= IDLE_TIMEOUT, "closed before the timeout"
        assert all(closed_by_server(s, 3.0) for s in socks), "idle connection left open"
        assert server.http.connections() == 0
        assert get(server.port, "/healthz")[0] == 200
    finally:
        for sock in socks:
            sock.close()


def test_slow_request_head_is_closed_and_oversized_head_refused(server: MetricsServer) -> None:
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as slow:
        slow.sendall(b"GET /healthz HTTP/1.1\r\n")  # and never the blank line
        assert closed_by_server(slow, 3.0)
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as big:
        with contextlib.suppress(ConnectionResetError, BrokenPipeError):
            big.sendall(b"GET /healthz HTTP/1.1\r\nX: " + b"a" * (64 << 10))
        reply = big.recv(100)
        assert reply.startswith(b"HTTP/1.0 431 "), reply


def test_methods_and_paths(server: MetricsServer) -> None:
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        sock.sendall(b"POST /healthz HTTP/1.1\r\nContent-Length: 0\r\n\r\n")
        assert sock.recv(100).startswith(b"HTTP/1.0 405 ")
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        sock.sendall(b"nonsense\r\n\r\n")
        assert sock.recv(100).startswith(b"HTTP/1.0 400 ")


@pytest.mark.skipif(not socket.has_ipv6, reason="no IPv6 on this machine")
def test_ipv6_any_address_also_answers_ipv4() -> None:
    """``[::]:PORT`` keeps the system's dual-stack default: the kubelet probes the pod's IPv4."""
    try:
        s = MetricsServer(Metrics(), "[::]:0", lambda: (True, "ok"))
    except OSError as exc:
        pytest.skip(f"cannot bind [::]: {exc}")
    s.start()
    try:
        with open("/proc/sys/net/ipv6/bindv6only") as f:
            if f.read().strip() != "0":
                pytest.skip("net.ipv6.bindv6only=1: the system default is IPv6 only")
        assert get(s.port, "/healthz") == (200, b"ok\n")
    finally:
        s.stop()
