"""Hypothesis fuzzing of the codec, the envelopes and the channel's receive path."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import struct
import tracemalloc
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nrisim import REPLY_TYPES, capture_folders, requests
from nrisim.capture import capture_available, capture_dir, missing_capture_reason
from nrisim.gowire import read_go_messages

from nri_plrm.nri.stub import Stub
from nri_plrm.proto import ttrpc_wire_pb2 as wire
from nri_plrm.ttrpc.codec import (
    MAX_FRAME_LEN,
    MAX_MESSAGE_LEN,
    MUX_HEADER_LEN,
    Message,
    MuxDecoder,
    ProtocolError,
    encode_message,
)
from nri_plrm.ttrpc.messages import Code, TtrpcError, decode_request, decode_response
from nri_plrm.ttrpc.transport import Channel

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
HAVE_CAPTURE = capture_available()
needs_capture = pytest.mark.skipif(not HAVE_CAPTURE, reason=missing_capture_reason())
TRUNKS = (
    [
        (capture_dir() / f / f"trunk-{d}.bin").read_bytes()
        for f in capture_folders()
        for d in ("rx", "tx")
    ]
    if HAVE_CAPTURE
    else []
)
PAYLOADS = (
    [r.envelope.payload for f in ("golden", "run3-statechange-fallback") for r in requests(f)]
    if HAVE_CAPTURE
    else []
)
# Bound on what the decoder may hold: one incomplete frame plus one partial message per conn.
MEMORY_BOUND = MUX_HEADER_LEN + MAX_FRAME_LEN + 2 * (MAX_FRAME_LEN + MAX_MESSAGE_LEN)


def feed_all(dec: MuxDecoder, data: bytes, cuts: list[int]) -> list[Message]:
    out: list[Message] = []
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    for a, b in itertools.pairwise(points):
        out += dec.feed(data[a:b])
        assert dec.buffered <= MEMORY_BOUND
    return out


def check_envelopes(msgs: list[Message]) -> None:
    for m in msgs:
        try:
            if m.type == 1:
                decode_request(m.data)
            else:
                decode_response(m.data)
        except (ProtocolError, TtrpcError):
            pass


@FUZZ
@given(st.binary(max_size=4096), st.lists(st.integers(min_value=0), max_size=8))
def test_random_bytes_only_raise_protocol_error(data: bytes, cuts: list[int]) -> None:
    dec = MuxDecoder()
    with contextlib.suppress(ProtocolError):
        check_envelopes(feed_all(dec, data, cuts))


@st.composite
def mutated_trunk(draw: Any) -> bytes:
    trunk = bytearray(draw(st.sampled_from(TRUNKS)))
    for _ in range(draw(st.integers(min_value=1, max_value=6))):
        op = draw(st.sampled_from(["flip", "insert", "delete", "truncate", "set"]))
        pos = draw(st.integers(min_value=0, max_value=max(len(trunk) - 1, 0)))
        if op == "flip" and trunk:
            trunk[pos] ^= 1 << draw(st.integers(min_value=0, max_value=7))
        elif op == "insert":
            trunk[pos:pos] = draw(st.binary(min_size=1, max_size=16))
        elif op == "delete":
            del trunk[pos : pos + draw(st.integers(min_value=1, max_value=16))]
        elif op == "truncate":
            del trunk[pos:]
        elif op == "set" and len(trunk) >= pos + 4:
            trunk[pos : pos + 4] = struct.pack(">I", draw(st.integers(0, 0xFFFFFFFF)))
    return bytes(trunk)


@needs_capture
@FUZZ
@given(mutated_trunk(), st.lists(st.integers(min_value=0), max_size=6))
def test_mutated_capture_only_raises_protocol_error(data: bytes, cuts: list[int]) -> None:
    dec = MuxDecoder()
    with contextlib.suppress(ProtocolError):
        check_envelopes(feed_all(dec, data, cuts))


def test_declared_4gib_lengths_do_not_allocate() -> None:
    tracemalloc.start()
    try:
        for header in (
            struct.pack(">II", 1, 0xFFFFFFFF),
            struct.pack(">II", 2, 10) + struct.pack(">IIBB", 0xFFFFFFFF, 1, 1, 0),
        ):
            dec = MuxDecoder()
            try:
                dec.feed(header)
            except ProtocolError:
                pass
            else:
                raise AssertionError("a 4 GiB declared length was accepted")
        # A frame that is legal but incomplete is not pre-allocated either.
        dec = MuxDecoder()
        assert dec.feed(struct.pack(">II", 1, MAX_FRAME_LEN) + b"x" * 100) == []
        assert dec.buffered == MUX_HEADER_LEN + 100
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20


messages_st = st.lists(
    st.tuples(
        st.sampled_from([1, 2]),
        st.integers(min_value=1, max_value=2**32 - 1),
        st.sampled_from([1, 2, 3]),
        st.binary(max_size=64).flatmap(
            lambda head: st.integers(min_value=0, max_value=9000).map(lambda n: head + bytes(n))
        ),
    ),
    min_size=1,
    max_size=6,
)


@FUZZ
@given(messages_st, st.lists(st.integers(min_value=0), max_size=10))
def test_encode_decode_round_trip_any_chunking(
    msgs: list[tuple[int, int, int, bytes]], cuts: list[int]
) -> None:
    trunk = b"".join(encode_message(c, s, t, d) for c, s, t, d in msgs)
    got = feed_all(MuxDecoder(), trunk, cuts)
    assert got == [Message(c, s, t, 0, d) for c, s, t, d in msgs]
    go = read_go_messages(trunk)  # containerd's reader accepts every frame we cut
    for conn in (1, 2):
        assert [(m.stream_id, m.type, m.data) for m in go if m.conn == conn] == [
            (s, t, d) for c, s, t, d in msgs if c == conn
        ]


@FUZZ
@given(st.binary(max_size=512))
def test_envelope_decoders_only_raise_their_errors(data: bytes) -> None:
    with contextlib.suppress(ProtocolError):
        decode_request(data)
    with contextlib.suppress(ProtocolError, TtrpcError):
        decode_response(data)


class _Sink(asyncio.Transport):
    """In-memory transport capturing writes; close() reports the loss like a socket would."""

    def __init__(self, proto: Channel) -> None:
        super().__init__()
        self.proto = proto
        self.written = bytearray()
        self.closing = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.written += data

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        if not self.closing:
            self.closing = True
            asyncio.get_running_loop().call_soon(self.proto.connection_lost, None)

    def abort(self) -> None:
        self.close()


async def _ok(req: Any) -> bytes:
    return b""


@FUZZ
@given(st.one_of(st.binary(max_size=2048), *([mutated_trunk()] if TRUNKS else [])))
def test_channel_survives_garbage(data: bytes) -> None:
    async def main() -> None:
        ch = Channel(
            server_conn=1,
            client_conn=2,
            handlers={"nri.pkg.api.v1alpha1.Plugin": {"Configure": _ok}},
        )
        sink = _Sink(ch)
        ch.connection_made(sink)
        ch.data_received(data)
        for _ in range(3):
            await asyncio.sleep(0)
        if isinstance(ch.close_reason, ProtocolError):
            assert sink.closing and not ch.is_open
        ch.close()
        await ch.wait_closed()

    asyncio.run(main())


class _AllEvents:
    def create_container(self, pod: Any, ctr: Any) -> None:
        return None

    def update_pod_sandbox(self, pod: Any, overhead: Any, res: Any) -> None:
        return None

    def validate_container_adjustment(self, req: Any) -> str | None:
        return None

    def run_pod_sandbox(self, pod: Any) -> None:
        return None

    def remove_container(self, pod: Any, ctr: Any) -> None:
        return None


@FUZZ
@given(
    st.sampled_from(sorted(REPLY_TYPES.keys() - {"RegisterPlugin", "UpdateContainers"})),
    st.one_of(st.binary(max_size=256), *([st.sampled_from(PAYLOADS)] if PAYLOADS else [])),
)
def test_stub_methods_answer_any_payload_with_reply_or_status(method: str, payload: bytes) -> None:
    async def main() -> None:
        stub = Stub(_AllEvents(), name="fuzz", index="10", environ={})
        handler = stub._methods[method]  # the table the Plugin service dispatches to
        req = wire.Request(service="nri.pkg.api.v1alpha1.Plugin", method=method, payload=payload)
        try:
            reply = await handler(req)
        except TtrpcError as exc:
            assert exc.code in (Code.INVALID_ARGUMENT, Code.UNKNOWN)
        else:
            REPLY_TYPES[method].FromString(reply)

    asyncio.run(main())
