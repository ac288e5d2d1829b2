"""Fuzz the test-side wire decoder against the real protobuf encoder."""

from __future__ import annotations

import contextlib

import pbwire
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nri_plrm.proto import podresources_api_pb2 as pb

names = st.text(max_size=20)
ids = st.lists(st.integers(min_value=0, max_value=2**40), max_size=20)


@st.composite
def pods(draw: st.DrawFn) -> pb.PodResources:
    containers = [
        pb.ContainerResources(name=draw(names), cpu_ids=draw(ids))
        for _ in range(draw(st.integers(0, 4)))
    ]
    memory = [
        pb.ContainerMemory(
            memory_type=draw(names),
            size=draw(st.integers(0, 2**63)),
            topology=pb.TopologyInfo(nodes=[pb.NUMANode(ID=n) for n in draw(ids)]),
        )
        for _ in range(draw(st.integers(0, 3)))
    ]
    return pb.PodResources(
        name=draw(names),
        namespace=draw(names),
        containers=containers,
        cpu_ids=draw(ids),
        memory=memory,
    )


@settings(max_examples=200, deadline=None)
@given(pods())
def test_decoder_agrees_with_protobuf(pod: pb.PodResources) -> None:
    msg = pbwire.fields(pod.SerializeToString())
    assert pbwire.string(msg, 1) == pod.name
    assert pbwire.string(msg, 2) == pod.namespace
    assert pbwire.ints(msg, 4) == list(pod.cpu_ids)
    containers = pbwire.messages(msg, 3)
    assert [pbwire.string(c, 1) for c in containers] == [c.name for c in pod.containers]
    assert [pbwire.ints(c, 3) for c in containers] == [list(c.cpu_ids) for c in pod.containers]
    memory = pbwire.messages(msg, 5)
    assert [pbwire.ints(m, 2) or [0] for m in memory] == [[m.size] for m in pod.memory]


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_decoder_never_crashes_on_garbage(data: bytes) -> None:
    with contextlib.suppress(pbwire.WireError):
        pbwire.fields(data)


@given(st.integers(min_value=0, max_value=2**64 - 1))
def test_varint_round_trip(value: int) -> None:
    raw = pbwire.encode_varint(value)
    assert pbwire.varint(raw, 0) == (value, len(raw))


def test_truncated_field_is_an_error() -> None:
    with pytest.raises(pbwire.WireError, match="runs past the end"):
        pbwire.fields(b"\x0a\x05ab")
