"""Asyncio transport: one unix-socket trunk carrying a ttrpc server and a ttrpc client.

A :class:`Channel` serves requests arriving on ``server_conn`` (each in its own task, so slow
handlers never block others and replies may leave out of order, on the request's stream id) and
issues calls on ``client_conn`` (odd stream ids 1, 3, 5, ..., a pending table, per-call timeout).
A framing error closes this trunk only; end of stream fails pending calls with
:class:`ChannelClosed` and resolves :meth:`Channel.wait_closed`.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from nri_plrm.ttrpc.codec import (
    TYPE_REQUEST,
    TYPE_RESPONSE,
    Message,
    MuxDecoder,
    ProtocolError,
    encode_message,
)
from nri_plrm.ttrpc.messages import (
    Code,
    Request,
    TtrpcError,
    decode_request,
    decode_response,
    encode_error,
    encode_ok,
    encode_request,
)

log = logging.getLogger(__name__)

#: A server-side method: gets the decoded Request, returns the reply payload bytes.
Handler = Callable[[Request], Awaitable[bytes]]


class ChannelClosed(ConnectionError):
    """The trunk closed (end of stream, reset or local close) before the call completed."""


#: Size of the preallocated receive buffer (reads go straight into it, no per-read allocation).
READ_BUFFER_SIZE = 256 * 1024


class Channel(asyncio.BufferedProtocol):
    """The asyncio protocol for one trunk; create it with :func:`connect_unix` or friends."""

    def __init__(
        self,
        *,
        server_conn: int,
        client_conn: int,
        handlers: Mapping[str, Mapping[str, Handler]],
        name: str = "ttrpc",
    ) -> None:
        self.server_conn = server_conn
        self.client_conn = client_conn
        self.name = name
        self._handlers = handlers
        self._decoder = MuxDecoder((server_conn, client_conn))
        self._transport: asyncio.Transport | None = None
        self._pending: dict[int, asyncio.Future[bytes]] = {}
        self._next_stream = 1
        self._last_server_stream = 0
        self._tasks: set[asyncio.Task[None]] = set()
        self._loop = asyncio.get_running_loop()
        self._closed: asyncio.Future[BaseException | None] = self._loop.create_future()
        self.close_reason: BaseException | None = None
        self._rbuf = memoryview(bytearray(READ_BUFFER_SIZE))

    # asyncio.BufferedProtocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._rbuf

    def buffer_updated(self, nbytes: int) -> None:
        self.data_received(bytes(self._rbuf[:nbytes]))

    def data_received(self, data: bytes) -> None:
        """Process bytes read from the trunk (dispatch requests, resolve calls)."""
        if self.close_reason is not None:
            return
        try:
            messages = self._decoder.feed(data)
        except ProtocolError as exc:
            log.error("%s: closing the connection: %s", self.name, exc)
            self.close_reason = exc
            self.close()
            return
        for msg in messages:
            if msg.conn_id == self.server_conn:
                if msg.type == TYPE_REQUEST:
                    self._on_request(msg)
                else:
                    log.debug("%s: ignoring message type %d on server conn", self.name, msg.type)
            elif msg.type == TYPE_RESPONSE:
                self._on_response(msg)
            else:
                log.debug("%s: ignoring message type %d on client conn", self.name, msg.type)

    def eof_received(self) -> bool | None:
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None
        reason = self.close_reason or exc
        err = ChannelClosed(f"{self.name}: connection closed" + (f": {reason}" if reason else ""))
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(err)
        self._pending.clear()
        if not self._closed.done():
            self._closed.set_result(reason)

    # public API

    @property
    def is_open(self) -> bool:
        """True until the trunk closes or starts closing."""
        t = self._transport
        return t is not None and not t.is_closing() and not self._closed.done()

    def close(self) -> None:
        """Close the trunk (idempotent); pending calls fail with :class:`ChannelClosed`."""
        if self._transport is not None:
            self._transport.close()

    def abort(self) -> None:
        """Close the trunk immediately, discarding unsent data."""
        if self._transport is not None:
            self._transport.abort()

    async def wait_closed(self) -> BaseException | None:
        """Wait until the trunk is closed; returns the error that closed it, if any."""
        return await asyncio.shield(self._closed)

    async def call(
        self,
        service: str,
        method: str,
        payload: bytes,
        timeout: float | None = None,
        metadata: tuple[tuple[str, str], ...] = (),
    ) -> bytes:
        """Unary call on the client connection; returns the reply payload.

        Raises :class:`TtrpcError` for an error status, :class:`TimeoutError` after ``timeout``
        seconds (the stream is then forgotten; a late reply is dropped), :class:`ChannelClosed`
        when the trunk closes first.
        """
        transport = self._transport
        if transport is None or self._closed.done():
            raise ChannelClosed(f"{self.name}: call {service}/{method} on a closed connection")
        sid = self._next_stream
        self._next_stream += 2
        timeout_nano = int(timeout * 1e9) if timeout else 0
        body = encode_request(service, method, payload, timeout_nano, metadata)
        frames = encode_message(self.client_conn, sid, TYPE_REQUEST, body)
        fut: asyncio.Future[bytes] = self._loop.create_future()
        self._pending[sid] = fut
        transport.write(frames)
        timer = None if timeout is None else self._loop.call_later(timeout, _expire, fut)
        try:
            data = await fut
        finally:
            self._pending.pop(sid, None)
            if timer is not None:
                timer.cancel()
        return decode_response(data)

    # server side

    def _on_request(self, msg: Message) -> None:
        sid = msg.stream_id
        if sid % 2 == 0:
            self._reply_error(
                sid, Code.INVALID_ARGUMENT, "StreamID must be odd for client initiated streams"
            )
            return
        if sid <= self._last_server_stream:
            self._reply_error(
                sid, Code.INVALID_ARGUMENT, "StreamID cannot be re-used and must increment"
            )
            return
        self._last_server_stream = sid
        try:
            req = decode_request(msg.data)
        except ProtocolError:
            self._reply_error(sid, Code.INVALID_ARGUMENT, "unmarshal request error")
            return
        methods = self._handlers.get(req.service)
        if methods is None:
            self._reply_error(sid, Code.UNIMPLEMENTED, f"service {req.service}")
            return
        handler = methods.get(req.method)
        if handler is None:
            self._reply_error(sid, Code.UNIMPLEMENTED, f"method {req.method}")
            return
        task = self._loop.create_task(self._serve(sid, handler, req))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _serve(self, sid: int, handler: Handler, req: Request) -> None:
        try:
            payload = await handler(req)
        except TtrpcError as exc:
            self._write(sid, encode_error(exc.code, exc.message))
        except asyncio.CancelledError:
            self._write(sid, encode_error(Code.CANCELLED, f"{req.method} cancelled"))
            raise
        except Exception as exc:
            log.exception("%s: handler for %s/%s failed", self.name, req.service, req.method)
            self._write(sid, encode_error(Code.UNKNOWN, f"{req.method}: {exc}"))
        else:
            try:
                body = encode_ok(payload)
                self._write(sid, body)
            except ProtocolError as exc:
                log.error("%s: reply to %s not sent: %s", self.name, req.method, exc)
                self._write(sid, encode_error(Code.RESOURCE_EXHAUSTED, str(exc)))

    def _reply_error(self, sid: int, code: int, message: str) -> None:
        self._write(sid, encode_error(code, message))

    def _write(self, sid: int, body: bytes) -> None:
        transport = self._transport
        if transport is None or transport.is_closing():
            log.debug("%s: dropping reply on stream %d: connection closed", self.name, sid)
            return
        transport.write(encode_message(self.server_conn, sid, TYPE_RESPONSE, body))

    def _on_response(self, msg: Message) -> None:
        fut = self._pending.get(msg.stream_id)
        if fut is None or fut.done():
            log.debug("%s: response on inactive stream %d dropped", self.name, msg.stream_id)
            return
        fut.set_result(msg.data)

    @property
    def in_flight(self) -> int:
        """Server requests currently being handled."""
        return len(self._tasks)


def _expire(fut: asyncio.Future[bytes]) -> None:
    if not fut.done():
        fut.set_exception(asyncio.TimeoutError())


async def connect_unix(path: str, **kwargs: Any) -> Channel:
    """Connect to a unix socket at ``path`` and return the running :class:`Channel`."""
    loop = asyncio.get_running_loop()
    _, proto = await loop.create_unix_connection(lambda: Channel(**kwargs), path)
    return proto


async def connect_socket(sock: socket.socket, **kwargs: Any) -> Channel:
    """Wrap an already connected stream socket (e.g. the fd of ``NRI_PLUGIN_SOCKET``)."""
    loop = asyncio.get_running_loop()
    sock.setblocking(False)
    _, proto = await loop.create_unix_connection(lambda: Channel(**kwargs), sock=sock)
    return proto
