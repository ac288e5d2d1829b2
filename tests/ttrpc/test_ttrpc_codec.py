"""Unit tests of the sans-IO mux/ttrpc codec against the spec's byte vectors and rules."""

from __future__ import annotations

import struct

import pytest
from nrisim.gowire import read_go_messages, response_parts

from nri_plrm.proto import nri_api_pb2 as api
from nri_plrm.ttrpc.codec import (
    MAX_MESSAGE_LEN,
    TYPE_REQUEST,
    TYPE_RESPONSE,
    Message,
    MuxDecoder,
    ProtocolError,
    encode_message,
)
from nri_plrm.ttrpc.messages import (
    Code,
    TtrpcError,
    decode_request,
    decode_response,
    encode_error,
    encode_ok,
    encode_request,
)

# nri-protocol.md section 6.1: RegisterPlugin{"mypy", "10"} with a 5 s deadline, 82 bytes.
REGISTER_MYPY = bytes.fromhex(
    "00000002 0000004a 00000040 00000001 0100 0a1c6e72692e706b672e6170692e"
    "7631616c706861312e52756e74696d65 120e5265676973746572506c7567696e"
    "1a0a0a046d797079120231302080e497d012".replace(" ", "")
)


def frames_of(trunk: bytes) -> list[tuple[int, bytes]]:
    out = []
    pos = 0
    while pos < len(trunk):
        conn, n = struct.unpack_from(">II", trunk, pos)
        out.append((conn, trunk[pos + 8 : pos + 8 + n]))
        pos += 8 + n
    return out


def test_register_request_matches_spec_bytes() -> None:
    payload = api.RegisterPluginRequest(plugin_name="mypy", plugin_idx="10").SerializeToString()
    body = encode_request("nri.pkg.api.v1alpha1.Runtime", "RegisterPlugin", payload, 5_000_000_000)
    assert encode_message(2, 1, TYPE_REQUEST, body) == REGISTER_MYPY
    assert len(REGISTER_MYPY) == 82


def test_empty_success_reply_is_zero_byte_message() -> None:
    # Section 6.2: conn 2, len 10, then ttrpc len 0, stream 1, Response, flags 0.
    assert encode_message(2, 1, TYPE_RESPONSE, encode_ok(b"")) == bytes.fromhex(
        "000000020000000a00000000000000010200"
    )


def test_configure_reply_matches_spec_bytes() -> None:
    # Section 6.5: ConfigureResponse{events=0x40D} on conn 1 stream 1.
    payload = api.ConfigureResponse(events=0x40D).SerializeToString()
    assert encode_message(1, 1, TYPE_RESPONSE, encode_ok(payload)) == bytes.fromhex(
        "000000010000000f000000050000000102001203108d08"
    )


def test_error_reply_matches_spec_bytes() -> None:
    # Section 6.3: Response{status{code 3, "invalid plugin index"}}.
    assert encode_error(3, "invalid plugin index") == bytes.fromhex(
        "0a1808031214696e76616c696420706c7567696e20696e646578"
    )
    with pytest.raises(TtrpcError) as err:
        decode_response(encode_error(3, "invalid plugin index"))
    assert err.value.code == Code.INVALID_ARGUMENT
    assert err.value.message == "invalid plugin index"


def test_status_code_zero_is_success() -> None:
    body = bytes.fromhex("0a00") + bytes.fromhex("1203108d08")
    assert decode_response(body) == bytes.fromhex("108d08")


@pytest.mark.parametrize("size", [0, 1, 4086, 4087, 5000, 100_000, MAX_MESSAGE_LEN])
def test_split_rule(size: int) -> None:
    data = bytes(range(256)) * (size // 256) + bytes(size % 256)
    trunk = encode_message(1, 7, TYPE_RESPONSE, data)
    frames = frames_of(trunk)
    if size + 10 <= 4096:
        assert [len(f) for _, f in frames] == [size + 10]
    else:
        assert [len(f) for _, f in frames] == [4096, size + 10 - 4096]
    assert all(conn == 1 for conn, _ in frames)
    # The Go reader model accepts it, and our decoder returns it intact.
    go = read_go_messages(trunk)
    assert [(m.stream_id, m.type, m.data) for m in go] == [(7, TYPE_RESPONSE, data)]
    assert MuxDecoder().feed(trunk) == [Message(1, 7, TYPE_RESPONSE, 0, data)]


def test_single_large_frame_is_what_go_rejects() -> None:
    # Our model of the Go reader must reject what the spec measured as ENOMEM.
    body = bytes(5000)
    bad = struct.pack(">II", 1, 5010) + struct.pack(">IIBB", 5000, 1, 2, 0) + body
    with pytest.raises(Exception, match="ENOMEM"):
        read_go_messages(bad)


def test_oversized_send_refused() -> None:
    with pytest.raises(ProtocolError, match="exceeds"):
        encode_message(1, 1, TYPE_REQUEST, bytes(MAX_MESSAGE_LEN + 1))


def test_several_messages_in_one_frame_and_one_message_over_many_frames() -> None:
    a = struct.pack(">IIBB", 3, 1, 1, 0) + b"abc"
    b = struct.pack(">IIBB", 0, 3, 1, 0)
    c = struct.pack(">IIBB", 5, 5, 1, 0) + b"hello"
    stream = a + b + c
    packed = struct.pack(">II", 1, len(a + b)) + a + b
    dec = MuxDecoder()
    out = dec.feed(packed)
    assert [(m.stream_id, m.data) for m in out] == [(1, b"abc"), (3, b"")]
    # c arrives one byte per frame, and the trunk itself one byte at a time.
    trunk = b"".join(struct.pack(">II", 1, 1) + c[i : i + 1] for i in range(len(c)))
    got: list[Message] = []
    for i in range(len(trunk)):
        got += dec.feed(trunk[i : i + 1])
    assert got == [Message(1, 5, 1, 0, b"hello")]
    assert dec.buffered == 0
    assert stream.endswith(c)


def test_unknown_connection_frames_are_dropped() -> None:
    msg = encode_message(1, 1, TYPE_REQUEST, b"x")
    other = encode_message(7, 1, TYPE_REQUEST, b"ignored")
    dec = MuxDecoder()
    assert dec.feed(other + msg) == [Message(1, 1, TYPE_REQUEST, 0, b"x")]
    assert dec.dropped_frames == 1


def test_declared_frame_length_over_limit_raises_before_buffering() -> None:
    dec = MuxDecoder()
    with pytest.raises(ProtocolError, match="mux frame on conn 1 declares 4294967295"):
        dec.feed(struct.pack(">II", 1, 0xFFFFFFFF))
    assert dec.buffered == 0


def test_declared_message_length_over_limit_raises() -> None:
    dec = MuxDecoder()
    head = struct.pack(">IIBB", MAX_MESSAGE_LEN + 1, 1, 1, 0)
    with pytest.raises(ProtocolError, match="over the 4194304-byte limit") as err:
        dec.feed(struct.pack(">II", 2, len(head)) + head)
    assert err.value.conn_id == 2


def test_request_round_trip_with_metadata() -> None:
    body = encode_request("svc", "M", b"\x01\x02", 7, [("traceparent", "x")])
    req = decode_request(body)
    assert (req.service, req.method, req.payload, req.timeout_nano) == ("svc", "M", b"\x01\x02", 7)
    assert [(kv.key, kv.value) for kv in req.metadata] == [("traceparent", "x")]


def test_malformed_envelopes_raise_protocol_error() -> None:
    with pytest.raises(ProtocolError, match="Request of 2 bytes"):
        decode_request(b"\x0a\x05")
    with pytest.raises(ProtocolError, match="Response of 1 bytes"):
        decode_response(b"\x12")


def test_error_reply_has_no_payload_field() -> None:
    status, payload = response_parts(encode_error(Code.UNIMPLEMENTED, "method Nope"))
    assert status == {1: [12], 2: ["method Nope"]}
    assert payload == b""
