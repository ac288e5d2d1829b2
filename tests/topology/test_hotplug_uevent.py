"""The sans-IO uevent parser: real kernel datagrams replayed, hand-made edge cases, fuzzing."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from uevent_recordings import (
    OWN_DIR,
    datagrams,
    kernel_payload,
    missing_shared_reason,
    shared_dir,
)

from nri_plrm.daemon.hotplug.uevent import (
    HOTPLUG_ACTIONS,
    HotplugAction,
    HotplugEvent,
    HotplugSubsystem,
    Uevent,
    UeventError,
    hotplug_event,
    parse_uevent,
)


def cpu1_events(path: Path) -> list[tuple[HotplugSubsystem | None, HotplugAction, int | None]]:
    out = []
    for data in datagrams(path):
        event = hotplug_event(parse_uevent(data))
        if event is not None:
            out.append((event.subsystem, event.action, event.index))
    return out


CPU1_CYCLE = [
    (HotplugSubsystem.CPU, HotplugAction.OFFLINE, 1),
    (HotplugSubsystem.CPU, HotplugAction.ONLINE, 1),
]


def test_shared_recording_gives_cpu1_offline_then_online() -> None:
    root = shared_dir()
    if root is None:
        pytest.skip(missing_shared_reason())
    assert cpu1_events(root / "cpu1-offline-online.jsonl") == CPU1_CYCLE


@pytest.mark.parametrize("name", sorted(p.name for p in OWN_DIR.glob("*.jsonl")))
def test_own_recordings_give_cpu1_offline_then_online(name: str) -> None:
    assert cpu1_events(OWN_DIR / name) == CPU1_CYCLE


def test_recorded_modalias_keeps_its_trailing_newline() -> None:
    (offline, *_) = [
        d
        for d in datagrams(OWN_DIR / "cpu1-offline-online.jsonl")
        if b"@/devices/system/cpu/cpu1\x00" in d
    ]
    uevent = parse_uevent(offline)
    assert uevent.properties["MODALIAS"].startswith("cpu:type:")
    assert uevent.properties["MODALIAS"].endswith("\n")
    assert uevent.skipped == ()


def test_parse_cpu_offline() -> None:
    uevent = parse_uevent(kernel_payload("offline", "/devices/system/cpu/cpu3", "cpu", 4242))
    assert uevent.action == "offline" and uevent.subsystem == "cpu"
    assert hotplug_event(uevent) == HotplugEvent(
        HotplugSubsystem.CPU, HotplugAction.OFFLINE, 3, "/devices/system/cpu/cpu3", 4242
    )


@pytest.mark.parametrize("action", ["online", "offline", "add", "remove"])
def test_memory_block_events(action: str) -> None:
    event = hotplug_event(
        parse_uevent(kernel_payload(action, "/devices/system/memory/memory32", "memory"))
    )
    assert event is not None
    assert (event.subsystem, event.action, event.index) == (HotplugSubsystem.MEMORY, action, 32)


@pytest.mark.parametrize(
    ("action", "devpath", "subsystem"),
    [
        ("change", "/devices/system/cpu/cpu3", "cpu"),
        ("bind", "/devices/system/cpu/cpu3", "cpu"),
        ("add", "/devices/system/cpu/cpufreq/policy0", "cpu"),
        ("add", "/devices/virtual/cpuid/cpu1", "cpuid"),
        ("add", "/devices/virtual/net/veth1", "net"),
        ("online", "/devices/system/node/node1", "node"),
        ("lost", "/devices/system/cpu/cpu3", "cpu"),
    ],
)
def test_other_uevents_are_not_hotplug(action: str, devpath: str, subsystem: str) -> None:
    assert hotplug_event(parse_uevent(kernel_payload(action, devpath, subsystem))) is None


def test_action_filter() -> None:
    uevent = parse_uevent(kernel_payload("add", "/devices/system/cpu/cpu1", "cpu"))
    assert hotplug_event(uevent, frozenset({HotplugAction.ONLINE})) is None
    assert hotplug_event(uevent, HOTPLUG_ACTIONS) is not None


def test_minimal_header_only_payload() -> None:
    uevent = parse_uevent(b"remove@/devices/system/memory/memory9")
    assert uevent == Uevent("remove", "/devices/system/memory/memory9", {})
    assert hotplug_event(uevent) is None


CPU1 = b"online@/devices/system/cpu/cpu1\x00SUBSYSTEM=cpu\x00"


@pytest.mark.parametrize(
    ("odd", "skipped"),
    [
        (b"MODALIAS=cpu:type:x86\n\x00", ()),
        (b"K=\x07\t\x1b\x00", ()),
        (b"K=\xff\xfe\x00", ()),
        (b"NOEQUALS\x00", ("'NOEQUALS': not KEY=VALUE",)),
        (b"=cpu\x00", ("'=cpu': not KEY=VALUE",)),
        (b"B@D KEY=1\x00", ("'B@D KEY=1': not KEY=VALUE",)),
        (b"A=1\x00A=2\x00", ("A: given twice",)),
        (b"SEQNUM=x1\x00", ()),
        (b"SEQNUM=-1\x00", ()),
        (b"\x00\x00", ("'': not KEY=VALUE",) * 2),
    ],
)
def test_one_odd_property_never_drops_a_cpu_event(odd: bytes, skipped: tuple[str, ...]) -> None:
    uevent = parse_uevent(CPU1 + odd)
    assert uevent.skipped == skipped
    event = hotplug_event(uevent)
    assert event is not None
    assert (event.subsystem, event.action, event.index) == (
        HotplugSubsystem.CPU,
        HotplugAction.ONLINE,
        1,
    )
    assert event.seqnum is None


def test_values_are_kept_byte_for_byte() -> None:
    uevent = parse_uevent(CPU1 + b"K=a=b\n\x00E=\x00U=\xff\x00")
    assert uevent.properties["K"] == "a=b\n"
    assert uevent.properties["E"] == ""
    assert uevent.properties["U"] == "\\xff"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "empty datagram"),
        (b"\x00", "expected ACTION@/devpath"),
        (b"online/devices/system/cpu/cpu1\x00", "expected ACTION@/devpath"),
        (b"online@devices\x00", "expected ACTION@/devpath"),
        (b"on\nline@/devices/system/cpu/cpu1\x00", "expected ACTION@/devpath"),
        (b"online@/d\x00ACTION=offline\x00", "ACTION='offline' contradicts the header"),
        (b"online@/d\x00DEVPATH=/e\x00", "DEVPATH='/e' contradicts the header"),
        (b"online@/d\x00SUBSYSTEM=cpu\x00SUBSYSTEM=memory\x00", "SUBSYSTEM given twice"),
        (b"libudev\x00\xfe\xed\xca\xfe", "from udev"),
        (b"x" * 70000, "larger than 65536"),
    ],
)
def test_unreadable_datagrams(data: bytes, message: str) -> None:
    with pytest.raises(UeventError, match=message):
        parse_uevent(data)


uevent_like = st.lists(
    st.sampled_from(
        [
            b"online@/devices/system/cpu/cpu1",
            b"offline@/devices/system/memory/memory4",
            b"ACTION=online",
            b"SUBSYSTEM=cpu",
            b"SUBSYSTEM=memory",
            b"DEVPATH=/devices/system/cpu/cpu1",
            b"MODALIAS=cpu:type:x86,ven0002\n",
            b"SEQNUM=12",
            b"SEQNUM=-1",
            b"=",
            b"",
            b"libudev",
        ]
    )
    | st.binary(max_size=12),
    max_size=6,
).map(b"\x00".join)


@settings(max_examples=500, deadline=None)
@given(st.one_of(st.binary(max_size=200), uevent_like))
def test_parser_fuzz_only_raises_uevent_error(data: bytes) -> None:
    try:
        event = hotplug_event(parse_uevent(data))
    except UeventError:
        return
    if event is not None:
        assert event.index is not None and event.index >= 0
        assert event.action in HOTPLUG_ACTIONS


odd_property = st.binary(max_size=40).filter(lambda b: b"\x00" not in b)
defining = ("ACTION=", "DEVPATH=", "SUBSYSTEM=")


@settings(max_examples=500, deadline=None)
@given(
    st.sampled_from(["online", "offline"]),
    st.integers(0, 4095),
    st.lists(odd_property, max_size=4),
    st.integers(0, 4),
)
def test_fuzz_odd_properties_never_drop_a_cpu_event(
    action: str, cpu: int, odd: list[bytes], at: int
) -> None:
    """Whatever extra properties ride along (except ones contradicting the event), the CPU
    event comes out unchanged."""
    odd = [p for p in odd if not p.decode("utf-8", "replace").startswith(defining)]
    items = kernel_payload(action, f"/devices/system/cpu/cpu{cpu}", "cpu").split(b"\x00")[:-1]
    items[1 + min(at, len(items) - 1) : 1 + min(at, len(items) - 1)] = odd
    event = hotplug_event(parse_uevent(b"".join(i + b"\x00" for i in items)))
    assert event is not None
    assert (event.subsystem, event.action, event.index) == (
        HotplugSubsystem.CPU,
        HotplugAction(action),
        cpu,
    )
