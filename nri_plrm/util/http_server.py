"""A small HTTP/1.0 GET server with bounded threads, connections and idle time.

One selector thread accepts connections and reads request heads without blocking; a request
whose head is complete goes to a fixed pool of worker threads, which build the reply and write
it (with a send timeout). So:

- threads are bounded (``1 + workers``) whatever the number of connections;
- open connections are bounded (``max_connections``): when full, the connection that has been
  waiting longest for its request is closed to make room, so a flood of idle connections cannot
  lock out a probe that sends its request at once;
- a connection that has not sent a complete request head within ``idle_timeout`` is closed, and
  a head over ``MAX_HEAD_BYTES`` is answered 431 and closed.

Every reply closes its connection (HTTP/1.0, as Prometheus and the kubelet's probes expect).
"""

from __future__ import annotations

import contextlib
import logging
import selectors
import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from http import HTTPStatus

MAX_CONNECTIONS = 64
"""Open connections at most (waiting for their request or being answered)."""
IDLE_TIMEOUT = 10.0
"""Seconds a connection may take to send its request head (Prometheus and probes send at once)."""
WORKERS = 4
"""Threads that build and write replies."""
SEND_TIMEOUT = 10.0
"""Seconds a reply's write may block on a client that does not read."""
MAX_HEAD_BYTES = 16 << 10
"""Largest request head (request line and headers) accepted."""

Reply = tuple[int, bytes, str]
"""(status, body, content type)."""
Route = Callable[[], Reply]

_log = logging.getLogger("nri_plrm.http_server")


@dataclass
class _Pending:
    sock: socket.socket
    since: float
    head: bytearray = field(default_factory=bytearray)


def _listen(host: str, port: int) -> socket.socket:
    """A non-blocking listening socket; for IPv6 the system's dual-stack default is kept (as
    ``http.server`` does), so ``[::]:PORT`` also answers the kubelet's IPv4 probes."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    sock.setblocking(False)
    return sock


class BoundedHTTPServer:
    """Serves GET ``routes`` (path -> reply builder) on ``(host, port)`` from background threads.

    ``start()`` serves, ``stop()`` stops and closes every connection. ``connections()`` is the
    number currently open.
    """

    def __init__(
        self,
        host: str,
        port: int,
        routes: dict[str, Route],
        *,
        max_connections: int = MAX_CONNECTIONS,
        idle_timeout: float = IDLE_TIMEOUT,
        workers: int = WORKERS,
        name: str = "http",
    ) -> None:
        self._listener = _listen(host, port)
        self.routes = routes
        self.max_connections = max_connections
        self.idle_timeout = idle_timeout
        self.name = name
        self._workers = workers
        self._pool: ThreadPoolExecutor | None = None
        self._selector = selectors.DefaultSelector()
        self._pending: dict[socket.socket, _Pending] = {}
        self._busy = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._thread: threading.Thread | None = None

    @property
    def address(self) -> tuple[str, int]:
        """The bound (host, port)."""
        host, port = self._listener.getsockname()[:2]
        return str(host), int(port)

    def connections(self) -> int:
        """Connections currently open (waiting for a request head or being answered)."""
        with self._lock:
            return len(self._pending) + self._busy

    def start(self) -> None:
        """Start the selector thread and the worker pool."""
        self._pool = ThreadPoolExecutor(self._workers, thread_name_prefix=f"{self.name}-worker")
        self._selector.register(self._listener, selectors.EVENT_READ)
        self._selector.register(self._wake_r, selectors.EVENT_READ)
        self._thread = threading.Thread(target=self._serve, name=self.name, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop serving; close the listener and every open connection."""
        self._stop.set()
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        for pending in list(self._pending.values()):
            self._drop(pending)
        self._selector.close()
        self._listener.close()
        self._wake_r.close()
        self._wake_w.close()

    # selector thread

    def _serve(self) -> None:
        while not self._stop.is_set():
            timeout = self._expire_idle()
            for key, _ in self._selector.select(timeout):
                sock = key.fileobj
                if sock is self._listener:
                    self._accept()
                elif sock is self._wake_r:
                    with contextlib.suppress(OSError):
                        self._wake_r.recv(64)
                elif key.data.sock in self._pending:  # else evicted by an accept this round
                    self._read(key.data)

    def _expire_idle(self) -> float:
        """Close connections idle past the timeout; seconds until the next one expires."""
        now = time.monotonic()
        wait = self.idle_timeout
        for pending in list(self._pending.values()):
            left = pending.since + self.idle_timeout - now
            if left <= 0:
                self._drop(pending)
            else:
                wait = min(wait, left)
        return wait

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # EMFILE and friends: keep serving what is open
                _log.warning("%s: accept failed: %s", self.name, exc)
                return
            sock.setblocking(False)
            if self.connections() >= self.max_connections and not self._evict_oldest():
                sock.close()
                continue
            pending = _Pending(sock, time.monotonic())
            with self._lock:
                self._pending[sock] = pending
            self._selector.register(sock, selectors.EVENT_READ, pending)

    def _evict_oldest(self) -> bool:
        if not self._pending:
            return False
        self._drop(min(self._pending.values(), key=lambda p: p.since))
        return True

    def _drop(self, pending: _Pending) -> None:
        with self._lock:
            self._pending.pop(pending.sock, None)
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(pending.sock)
        pending.sock.close()

    def _read(self, pending: _Pending) -> None:
        try:
            data = pending.sock.recv(4096)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._drop(pending)
            return
        pending.head += data
        end = pending.head.find(b"\r\n\r\n")
        if end < 0 and len(pending.head) <= MAX_HEAD_BYTES:
            return
        with self._lock:
            self._pending.pop(pending.sock, None)
            self._busy += 1
        self._selector.unregister(pending.sock)
        assert self._pool is not None
        head = bytes(pending.head[:end]) if 0 <= end <= MAX_HEAD_BYTES else None
        self._pool.submit(self._answer, pending.sock, head)

    # worker threads

    def _answer(self, sock: socket.socket, head: bytes | None) -> None:
        try:
            status, body, content_type = self._reply(head)
            reason = HTTPStatus(status).phrase
            header = (
                f"HTTP/1.0 {status} {reason}\r\nContent-Type: {content_type}\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
            ).encode()
            sock.settimeout(SEND_TIMEOUT)
            sock.sendall(header + body)
        except OSError as exc:
            _log.debug("%s: reply not delivered: %s", self.name, exc)
        except Exception:
            _log.exception("%s: building the reply failed", self.name)
        finally:
            sock.close()
            with self._lock:
                self._busy -= 1

    def _reply(self, head: bytes | None) -> Reply:
        if head is None:
            return 431, b"request head too large\n", "text/plain"
        parts = head.split(b"\r\n", 1)[0].split()
        if len(parts) != 3 or not parts[2].startswith(b"HTTP/"):
            return 400, b"bad request line\n", "text/plain"
        method, target = parts[0], parts[1].decode("latin-1")
        if method != b"GET":
            return 405, b"only GET is served\n", "text/plain"
        route = self.routes.get(target.split("?", 1)[0])
        if route is None:
            paths = " or ".join(sorted(self.routes))
            return 404, f"not found: try {paths}\n".encode(), "text/plain"
        return route()
