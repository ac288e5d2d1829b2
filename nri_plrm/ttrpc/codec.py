"""Sans-IO codec for the NRI connection multiplexer and the ttrpc message framing.

Bytes go in (:meth:`MuxDecoder.feed`), complete ttrpc messages come out; :func:`encode_message`
turns one ttrpc message into the mux frames to write. Nothing here does I/O.

Layout (big-endian): a mux frame is ``conn_id u32, length u32, payload``; the payloads of one
conn id form a byte stream of ttrpc messages ``length u32, stream_id u32, type u8, flags u8,
data``. Frame boundaries need not match message boundaries.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from typing import NamedTuple

MUX_HEADER = struct.Struct(">II")
TTRPC_HEADER = struct.Struct(">IIBB")
MUX_HEADER_LEN = MUX_HEADER.size
TTRPC_HEADER_LEN = TTRPC_HEADER.size

#: Largest ttrpc message body (ttrpc ``messageLengthMax``).
MAX_MESSAGE_LEN = 4 << 20
#: Largest mux frame payload the Go writer ever produces (header + largest body).
MAX_FRAME_LEN = TTRPC_HEADER_LEN + MAX_MESSAGE_LEN
#: Messages up to this many bytes (header included) go out as one frame; longer ones as two.
SPLIT_LEN = 4096

PLUGIN_SERVICE_CONN = 1
RUNTIME_SERVICE_CONN = 2

TYPE_REQUEST = 0x01
TYPE_RESPONSE = 0x02
TYPE_DATA = 0x03


class ProtocolError(Exception):
    """The peer broke the mux or ttrpc framing rules; the trunk carrying it must be closed."""

    def __init__(self, message: str, conn_id: int | None = None) -> None:
        super().__init__(message)
        self.conn_id = conn_id


class Message(NamedTuple):
    """One complete ttrpc message received on a mux connection."""

    conn_id: int
    stream_id: int
    type: int
    flags: int
    data: bytes


def encode_message(conn_id: int, stream_id: int, mtype: int, data: bytes, flags: int = 0) -> bytes:
    """Encode one ttrpc message as the mux frames containerd's reader accepts.

    A message of at most :data:`SPLIT_LEN` bytes (10-byte header included) becomes one frame; a
    longer one becomes two frames, its first 4096 bytes and then the rest (what Go's
    ``bufio.Writer`` produces). Bodies over :data:`MAX_MESSAGE_LEN` raise :class:`ProtocolError`.
    """
    n = len(data)
    if n > MAX_MESSAGE_LEN:
        raise ProtocolError(
            f"ttrpc message on conn {conn_id} stream {stream_id}: body of {n} bytes exceeds "
            f"the {MAX_MESSAGE_LEN}-byte limit",
            conn_id,
        )
    total = TTRPC_HEADER_LEN + n
    head = TTRPC_HEADER.pack(n, stream_id, mtype, flags)
    if total <= SPLIT_LEN:
        return MUX_HEADER.pack(conn_id, total) + head + data
    first = SPLIT_LEN - TTRPC_HEADER_LEN
    return b"".join(
        (
            MUX_HEADER.pack(conn_id, SPLIT_LEN),
            head,
            data[:first],
            MUX_HEADER.pack(conn_id, total - SPLIT_LEN),
            data[first:],
        )
    )


class _Stream:
    """Byte-stream reassembly of ttrpc messages for one mux connection."""

    __slots__ = ("buf", "conn_id")

    def __init__(self, conn_id: int) -> None:
        self.conn_id = conn_id
        self.buf = bytearray()

    def push(self, payload: bytes, out: list[Message]) -> None:
        buf = self.buf
        if not buf:
            # Fast path: the frame holds exactly one or more whole messages.
            pos = self._parse(payload, out)
            if pos < len(payload):
                buf += memoryview(payload)[pos:]
            return
        buf += payload
        pos = self._parse(buf, out)
        if pos:
            del buf[:pos]

    def _parse(self, data: bytes | bytearray, out: list[Message]) -> int:
        pos = 0
        end = len(data)
        conn_id = self.conn_id
        while end - pos >= TTRPC_HEADER_LEN:
            length, stream_id, mtype, flags = TTRPC_HEADER.unpack_from(data, pos)
            if length > MAX_MESSAGE_LEN:
                raise ProtocolError(
                    f"ttrpc message on conn {conn_id} stream {stream_id} declares a body of "
                    f"{length} bytes, over the {MAX_MESSAGE_LEN}-byte limit",
                    conn_id,
                )
            stop = pos + TTRPC_HEADER_LEN + length
            if stop > end:
                break
            out.append(
                Message(
                    conn_id, stream_id, mtype, flags, bytes(data[pos + TTRPC_HEADER_LEN : stop])
                )
            )
            pos = stop
        return pos

    @property
    def pending(self) -> int:
        return len(self.buf)


class MuxDecoder:
    """Incremental decoder of the trunk byte stream into ttrpc messages.

    Frames for conn ids outside ``conn_ids`` are dropped, as the Go multiplexer does for
    connections it has not opened. Memory stays bounded: a declared frame or message length over
    the limit raises :class:`ProtocolError` before any buffer grows to that size.
    """

    def __init__(self, conn_ids: Iterable[int] = (PLUGIN_SERVICE_CONN, RUNTIME_SERVICE_CONN)):
        self._buf = bytearray()
        self._streams = {c: _Stream(c) for c in conn_ids}
        self.dropped_frames = 0

    def feed(self, data: bytes) -> list[Message]:
        """Consume ``data`` from the trunk; return every ttrpc message it completed, in order."""
        out: list[Message] = []
        buf = self._buf
        if buf:
            buf += data
            pos = self._frames(buf, out)
            if pos:
                del buf[:pos]
        else:
            pos = self._frames(data, out)
            if pos < len(data):
                buf += memoryview(data)[pos:]
        return out

    def _frames(self, data: bytes | bytearray, out: list[Message]) -> int:
        pos = 0
        end = len(data)
        streams = self._streams
        while end - pos >= MUX_HEADER_LEN:
            conn_id, length = MUX_HEADER.unpack_from(data, pos)
            if length > MAX_FRAME_LEN:
                raise ProtocolError(
                    f"mux frame on conn {conn_id} declares {length} payload bytes, over the "
                    f"{MAX_FRAME_LEN}-byte limit",
                    conn_id,
                )
            stop = pos + MUX_HEADER_LEN + length
            if stop > end:
                break
            stream = streams.get(conn_id)
            if stream is None:
                self.dropped_frames += 1
            elif length:
                stream.push(bytes(data[pos + MUX_HEADER_LEN : stop]), out)
            pos = stop
        return pos

    @property
    def buffered(self) -> int:
        """Bytes held awaiting completion (trunk plus every connection's partial message)."""
        return len(self._buf) + sum(s.pending for s in self._streams.values())
