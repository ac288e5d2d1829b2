"""An independent, byte-level model of how containerd (Go) reads what a plugin sends.

Nothing here uses our codec or the protobuf runtime's parser:

- :class:`GoConnReader` models the NRI mux connection read by ttrpc's ``bufio.Reader`` (4096-byte
  buffer): a mux frame is handed over whole, and a frame larger than the destination slice fails
  with ENOMEM (spec nri-protocol.md section 1.4).
- :func:`read_go_messages` splits a plugin-to-runtime trunk into ttrpc messages with that model.
- :func:`decode_fields` parses protobuf wire format by field number, strictly (truncation, bad
  wire types, field 0 and invalid UTF-8 in string fields are errors, as in protobuf-go), guided
  by a message descriptor so that tests can assert on field numbers.
"""

from __future__ import annotations

import struct
from collections import deque
from dataclasses import dataclass
from typing import Any

from google.protobuf.descriptor import FieldDescriptor

BUFIO_SIZE = 4096
MAX_MESSAGE_LEN = 4 << 20


class GoDecodeError(Exception):
    """What the Go side would report as an error for these bytes."""


@dataclass(frozen=True)
class GoMessage:
    """A ttrpc message as the Go channel receiver produced it."""

    conn: int
    stream_id: int
    type: int
    flags: int
    data: bytes


class GoConnReader:
    """One mux connection as seen through Go's ``bufio.NewReader(conn)``."""

    def __init__(self, conn: int) -> None:
        self.conn = conn
        self.frames: deque[bytes] = deque()
        self._buf = b""

    def _read(self, want: int) -> bytes:
        if self._buf:
            out, self._buf = self._buf[:want], self._buf[want:]
            return out
        if not self.frames:
            raise EOFError
        frame = self.frames.popleft()
        if want >= BUFIO_SIZE:
            if len(frame) > want:
                raise GoDecodeError(
                    f"conn {self.conn}: frame of {len(frame)} bytes into a {want}-byte read: ENOMEM"
                )
            return frame
        if len(frame) > BUFIO_SIZE:
            raise GoDecodeError(
                f"conn {self.conn}: frame of {len(frame)} bytes into bufio's 4096-byte buffer: "
                "ENOMEM"
            )
        self._buf = frame
        return self._read(want)

    def read_full(self, n: int) -> bytes:
        """``io.ReadFull`` of ``n`` bytes; EOFError when the frames run out."""
        out = b""
        while len(out) < n:
            out += self._read(n - len(out))
        return out

    def messages(self) -> list[GoMessage]:
        """Read ttrpc messages until the frames are exhausted at a message boundary."""
        out = []
        while self.frames or self._buf:
            head = self.read_full(10)
            length, sid, mtype, flags = struct.unpack(">IIBB", head)
            if length > MAX_MESSAGE_LEN:
                raise GoDecodeError(f"conn {self.conn}: message of {length} bytes over 4 MiB")
            out.append(GoMessage(self.conn, sid, mtype, flags, self.read_full(length)))
        return out


def read_go_messages(trunk: bytes) -> list[GoMessage]:
    """Split a trunk into mux frames, then read each connection the way Go does."""
    readers: dict[int, GoConnReader] = {}
    pos = 0
    while pos < len(trunk):
        if len(trunk) - pos < 8:
            raise GoDecodeError(f"trunk ends inside a mux header at offset {pos}")
        conn, length = struct.unpack_from(">II", trunk, pos)
        if conn == 0:
            raise GoDecodeError(f"mux frame at offset {pos} uses reserved conn id 0")
        if length == 0:
            raise GoDecodeError(f"zero-length mux frame at offset {pos}")
        frame = trunk[pos + 8 : pos + 8 + length]
        if len(frame) != length:
            raise GoDecodeError(f"mux frame at offset {pos} truncated")
        readers.setdefault(conn, GoConnReader(conn)).frames.append(frame)
        pos += 8 + length
    out: list[GoMessage] = []
    for reader in readers.values():
        try:
            out += reader.messages()
        except EOFError:
            raise GoDecodeError(f"conn {reader.conn}: stream ends inside a message") from None
    return out


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = 0
    for shift in range(0, 70, 7):
        if pos >= len(data):
            raise GoDecodeError("truncated varint")
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result & ((1 << 64) - 1), pos
    raise GoDecodeError("varint longer than 10 bytes")


def raw_fields(data: bytes) -> list[tuple[int, int, Any]]:
    """``(field number, wire type, value)`` of every field, in wire order."""
    out: list[tuple[int, int, Any]] = []
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        num, wt = key >> 3, key & 7
        if num == 0:
            raise GoDecodeError("field number 0")
        val: Any
        if wt == 0:
            val, pos = _varint(data, pos)
        elif wt == 1:
            if pos + 8 > len(data):
                raise GoDecodeError(f"field {num}: truncated fixed64")
            val, pos = data[pos : pos + 8], pos + 8
        elif wt == 2:
            n, pos = _varint(data, pos)
            if pos + n > len(data):
                raise GoDecodeError(f"field {num}: length {n} past the end")
            val, pos = data[pos : pos + n], pos + n
        elif wt == 5:
            if pos + 4 > len(data):
                raise GoDecodeError(f"field {num}: truncated fixed32")
            val, pos = data[pos : pos + 4], pos + 4
        else:
            raise GoDecodeError(f"field {num}: unsupported wire type {wt}")
        out.append((num, wt, val))
    return out


_VARINT_TYPES = {
    FieldDescriptor.TYPE_INT32,
    FieldDescriptor.TYPE_INT64,
    FieldDescriptor.TYPE_UINT32,
    FieldDescriptor.TYPE_UINT64,
    FieldDescriptor.TYPE_BOOL,
    FieldDescriptor.TYPE_ENUM,
}


def _signed(value: int, bits: int) -> int:
    value &= (1 << bits) - 1
    return value - (1 << bits) if value >> (bits - 1) else value


def decode_fields(data: bytes, desc: Any) -> dict[int, list[Any]]:
    """Decode ``data`` by field number, checking wire types against ``desc``.

    Values: ints for varint fields (int32/int64 sign-corrected), ``str`` for strings (UTF-8
    checked), ``bytes`` for bytes, and a nested ``dict`` for message fields (map entries too).
    Unknown field numbers are kept raw, as Go keeps them as unknown fields.
    """
    out: dict[int, list[Any]] = {}
    for num, wt, val in raw_fields(data):
        fd = desc.fields_by_number.get(num)
        if fd is None:
            out.setdefault(num, []).append(val)
            continue
        if fd.type in _VARINT_TYPES:
            if wt == 2 and fd.is_repeated:
                pos, items = 0, []
                while pos < len(val):
                    item, pos = _varint(val, pos)
                    items.append(item)
                out.setdefault(num, []).extend(items)
                continue
            if wt != 0:
                raise GoDecodeError(f"{desc.name}.{fd.name}: wire type {wt}, want varint")
            if fd.type == FieldDescriptor.TYPE_INT32 or fd.type == FieldDescriptor.TYPE_ENUM:
                val = _signed(val, 32)
            elif fd.type == FieldDescriptor.TYPE_INT64:
                val = _signed(val, 64)
            elif fd.type == FieldDescriptor.TYPE_BOOL:
                val = bool(val)
            out.setdefault(num, []).append(val)
        elif fd.type == FieldDescriptor.TYPE_STRING:
            if wt != 2:
                raise GoDecodeError(f"{desc.name}.{fd.name}: wire type {wt}, want bytes")
            try:
                out.setdefault(num, []).append(val.decode("utf-8"))
            except UnicodeDecodeError:
                raise GoDecodeError(f"{desc.name}.{fd.name}: invalid UTF-8") from None
        elif fd.type == FieldDescriptor.TYPE_BYTES:
            if wt != 2:
                raise GoDecodeError(f"{desc.name}.{fd.name}: wire type {wt}, want bytes")
            out.setdefault(num, []).append(val)
        elif fd.type == FieldDescriptor.TYPE_MESSAGE:
            if wt != 2:
                raise GoDecodeError(f"{desc.name}.{fd.name}: wire type {wt}, want bytes")
            out.setdefault(num, []).append(decode_fields(val, fd.message_type))
        else:
            raise GoDecodeError(f"{desc.name}.{fd.name}: field type {fd.type} not modelled")
    return out


def response_parts(data: bytes) -> tuple[dict[int, list[Any]] | None, bytes]:
    """Split a ttrpc Response body into (status fields or None, payload), as Go's client does."""
    status: dict[int, list[Any]] | None = None
    payload = b""
    for num, wt, val in raw_fields(data):
        if wt != 2:
            raise GoDecodeError(f"Response field {num}: wire type {wt}, want bytes")
        if num == 1:
            status = {}
            for snum, swt, sval in raw_fields(val):
                if snum == 1 and swt == 0:
                    status.setdefault(1, []).append(_signed(sval, 32))
                elif snum == 2 and swt == 2:
                    status.setdefault(2, []).append(sval.decode("utf-8"))
                else:
                    status.setdefault(snum, []).append(sval)
        elif num == 2:
            payload = val
    return status, payload
