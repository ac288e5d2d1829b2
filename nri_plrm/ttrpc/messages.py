"""ttrpc envelope messages: Request/Response encoding, decoding and status codes."""

from __future__ import annotations

import enum
from collections.abc import Iterable

from google.protobuf.message import DecodeError

from nri_plrm.proto import ttrpc_wire_pb2 as wire
from nri_plrm.ttrpc.codec import ProtocolError

Request = wire.Request
Response = wire.Response


class Code(enum.IntEnum):
    """gRPC / google.rpc status codes as used by ttrpc."""

    OK = 0
    CANCELLED = 1
    UNKNOWN = 2
    INVALID_ARGUMENT = 3
    DEADLINE_EXCEEDED = 4
    NOT_FOUND = 5
    ALREADY_EXISTS = 6
    PERMISSION_DENIED = 7
    RESOURCE_EXHAUSTED = 8
    FAILED_PRECONDITION = 9
    ABORTED = 10
    OUT_OF_RANGE = 11
    UNIMPLEMENTED = 12
    INTERNAL = 13
    UNAVAILABLE = 14
    DATA_LOSS = 15
    UNAUTHENTICATED = 16


class TtrpcError(Exception):
    """A ttrpc call ended with a non-OK status (raised by clients, or by handlers to send one)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"ttrpc status {_code_name(code)}: {message}")
        self.code = code
        self.message = message


def _code_name(code: int) -> str:
    try:
        return Code(code).name
    except ValueError:
        return str(code)


def encode_request(
    service: str,
    method: str,
    payload: bytes,
    timeout_nano: int = 0,
    metadata: Iterable[tuple[str, str]] = (),
) -> bytes:
    """Serialize a unary ttrpc Request (``timeout_nano`` 0 omits the deadline)."""
    req = Request(service=service, method=method, payload=payload, timeout_nano=timeout_nano)
    for key, value in metadata:
        req.metadata.add(key=key, value=value)
    return req.SerializeToString()


def decode_request(data: bytes) -> wire.Request:
    """Parse a ttrpc Request body; malformed protobuf raises :class:`ProtocolError`."""
    req = Request()
    try:
        req.ParseFromString(data)
    except DecodeError as exc:
        raise ProtocolError(f"ttrpc Request of {len(data)} bytes does not parse: {exc}") from exc
    return req


def encode_ok(payload: bytes) -> bytes:
    """A success Response: the payload only, no status field (0 bytes for an empty reply)."""
    n = len(payload)
    if not n:
        return b""
    # Field 2 (payload), wire type 2: tag 0x12, varint length, bytes.
    head = bytearray(b"\x12")
    while n > 0x7F:
        head.append((n & 0x7F) | 0x80)
        n >>= 7
    head.append(n)
    return bytes(head) + payload


def encode_error(code: int, message: str) -> bytes:
    """An error Response: a status with ``code`` and ``message`` and no payload."""
    resp = Response()
    resp.status.code = code
    resp.status.message = message
    return resp.SerializeToString()


def decode_response(data: bytes) -> bytes:
    """Return the payload of a Response body; a non-OK status raises :class:`TtrpcError`.

    Malformed protobuf raises :class:`ProtocolError`. A Response without status is a success.
    """
    resp = Response()
    try:
        resp.ParseFromString(data)
    except DecodeError as exc:
        raise ProtocolError(f"ttrpc Response of {len(data)} bytes does not parse: {exc}") from exc
    if resp.HasField("status") and resp.status.code != Code.OK:
        raise TtrpcError(resp.status.code, resp.status.message)
    return resp.payload
