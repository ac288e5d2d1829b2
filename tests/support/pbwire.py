"""A tiny protobuf wire-format decoder for tests that must not trust our generated code.

``fields(data)`` maps field numbers to the list of raw values in order: ints for varint and
fixed fields, bytes for length-delimited ones. ``packed(data)`` decodes a packed repeated
varint field. Malformed input raises :class:`WireError`.
"""

from __future__ import annotations

VARINT, I64, LEN, I32 = 0, 1, 2, 5


class WireError(ValueError):
    """Bytes that are not a valid protobuf encoding."""


def varint(data: bytes, pos: int) -> tuple[int, int]:
    """Decode one varint at ``pos``; returns (value, next position)."""
    value = 0
    shift = 0
    while True:
        if pos >= len(data):
            raise WireError(f"truncated varint at byte {pos}")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
        if shift >= 70:
            raise WireError(f"varint longer than 10 bytes ending at byte {pos}")


def fields(data: bytes) -> dict[int, list[int | bytes]]:
    """Every field of a message, by number, values in wire order."""
    out: dict[int, list[int | bytes]] = {}
    pos = 0
    while pos < len(data):
        key, pos = varint(data, pos)
        number, wire_type = key >> 3, key & 7
        if number == 0:
            raise WireError(f"field number 0 at byte {pos}")
        value: int | bytes
        if wire_type == VARINT:
            value, pos = varint(data, pos)
        elif wire_type == LEN:
            size, pos = varint(data, pos)
            if pos + size > len(data):
                raise WireError(f"field {number}: length {size} runs past the end")
            value, pos = data[pos : pos + size], pos + size
        elif wire_type in (I64, I32):
            width = 8 if wire_type == I64 else 4
            if pos + width > len(data):
                raise WireError(f"field {number}: truncated fixed{width * 8}")
            value, pos = int.from_bytes(data[pos : pos + width], "little"), pos + width
        else:
            raise WireError(f"field {number}: unsupported wire type {wire_type}")
        out.setdefault(number, []).append(value)
    return out


def packed(data: bytes) -> list[int]:
    """A packed repeated varint field."""
    values: list[int] = []
    pos = 0
    while pos < len(data):
        value, pos = varint(data, pos)
        values.append(value)
    return values


def ints(msg: dict[int, list[int | bytes]], number: int) -> list[int]:
    """A repeated integer field, packed or not."""
    out: list[int] = []
    for raw in msg.get(number, []):
        out.extend(packed(raw) if isinstance(raw, bytes) else [raw])
    return out


def string(msg: dict[int, list[int | bytes]], number: int) -> str:
    """A string field ('' when absent)."""
    raw = msg.get(number, [b""])[-1]
    if not isinstance(raw, bytes):
        raise WireError(f"field {number}: expected a length-delimited string, got varint {raw}")
    return raw.decode("utf-8")


def messages(msg: dict[int, list[int | bytes]], number: int) -> list[dict[int, list[int | bytes]]]:
    """A repeated (or single) embedded message field, each decoded."""
    out = []
    for raw in msg.get(number, []):
        if not isinstance(raw, bytes):
            raise WireError(f"field {number}: expected an embedded message, got varint {raw}")
        out.append(fields(raw))
    return out


def encode_varint(value: int) -> bytes:
    """A varint's bytes."""
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def encode_string(number: int, text: str) -> bytes:
    """One length-delimited string field."""
    raw = text.encode("utf-8")
    return encode_varint(number << 3 | LEN) + encode_varint(len(raw)) + raw
