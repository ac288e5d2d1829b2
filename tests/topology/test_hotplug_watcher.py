"""Hotplug uevents: the pure parser (with fuzzing) and the watcher on a real netlink socket."""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
from collections.abc import AsyncIterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nri_plrm.topology.hotplug.watcher import (
    HOTPLUG_ACTIONS,
    MAX_CONSECUTIVE_ERRORS,
    HotplugAction,
    HotplugEvent,
    HotplugSubsystem,
    HotplugUnavailableError,
    HotplugWatcher,
    Uevent,
    UeventError,
    hotplug_event,
    parse_uevent,
    start_hotplug_watcher,
)

NETLINK_KOBJECT_UEVENT = 15


def kernel_payload(action: str, devpath: str, subsystem: str, seqnum: int = 7) -> bytes:
    items = [
        f"{action}@{devpath}",
        f"ACTION={action}",
        f"DEVPATH={devpath}",
        f"SUBSYSTEM={subsystem}",
        f"SEQNUM={seqnum}",
    ]
    return b"".join(item.encode() + b"\x00" for item in items)


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


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "empty payload"),
        (b"\x00", "expected ACTION@/devpath"),
        (b"online/devices/system/cpu/cpu1\x00", "expected ACTION@/devpath"),
        (b"online@devices\x00", "expected ACTION@/devpath"),
        (b"online@/d\x00SUBSYSTEM\x00", "'SUBSYSTEM': expected KEY=VALUE"),
        (b"online@/d\x00=cpu\x00", "expected KEY=VALUE"),
        (b"online@/d\x00A=1\x00A=2\x00", "'A': given twice"),
        (b"online@/d\x00ACTION=offline\x00", "ACTION='offline' contradicts the header"),
        (b"online@/d\x00DEVPATH=/e\x00", "DEVPATH='/e' contradicts the header"),
        (b"online@/d\xff\x00", "not ASCII text"),
        (b"online@/d\x00K=\x07\x00", "contains control characters"),
        (b"libudev\x00\xfe\xed\xca\xfe", "from udev"),
        (b"x" * 70000, "larger than 65536"),
    ],
)
def test_malformed_payloads(data: bytes, message: str) -> None:
    with pytest.raises(UeventError, match=message):
        parse_uevent(data)


def test_bad_seqnum() -> None:
    uevent = parse_uevent(b"online@/devices/system/cpu/cpu1\x00SUBSYSTEM=cpu\x00SEQNUM=x1\x00")
    with pytest.raises(UeventError, match="SEQNUM='x1'"):
        hotplug_event(uevent)


uevent_like = st.lists(
    st.sampled_from(
        [
            b"online@/devices/system/cpu/cpu1",
            b"offline@/devices/system/memory/memory4",
            b"ACTION=online",
            b"SUBSYSTEM=cpu",
            b"SUBSYSTEM=memory",
            b"DEVPATH=/devices/system/cpu/cpu1",
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


def inject(payloads: list[bytes]) -> None:
    """Multicast datagrams to the kernel uevent group, as the kernel would (needs root)."""
    with socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, NETLINK_KOBJECT_UEVENT) as sender:
        sender.bind((0, 0))
        for payload in payloads:
            sender.sendto(payload, (0, 1))


def can_inject() -> bool:
    try:
        inject([])
        with socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, NETLINK_KOBJECT_UEVENT) as s:
            s.bind((0, 0))
            s.sendto(b"change@/devices/nri-plrm-test\x00", (0, 1))
    except OSError:
        return False
    return True


async def wait_for(predicate: object, timeout: float = 5.0) -> None:
    assert callable(predicate)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError("condition not reached before the deadline")
        await asyncio.sleep(0.01)


@pytest.mark.skipif(not can_inject(), reason="cannot open or send on netlink uevent sockets")
def test_watcher_receives_events_through_the_real_socket(caplog: pytest.LogCaptureFixture) -> None:
    async def scenario() -> None:
        events: list[HotplugEvent] = []

        async def callback(event: HotplugEvent) -> None:
            events.append(event)
            if event.index == 9:
                raise RuntimeError("callback broke")

        watcher = await start_hotplug_watcher(callback)
        assert watcher is not None and watcher.task is not None
        inject(
            [
                kernel_payload("offline", "/devices/system/cpu/cpu7", "cpu"),
                b"short\xff",
                kernel_payload("change", "/devices/system/cpu/cpu7", "cpu"),
                kernel_payload("online", "/devices/system/cpu/cpu9", "cpu"),
                kernel_payload("remove", "/devices/system/memory/memory12", "memory"),
            ]
        )
        await wait_for(lambda: len(events) == 3)
        await wait_for(lambda: watcher.malformed == 1)
        assert [(e.subsystem, e.action, e.index) for e in events] == [
            (HotplugSubsystem.CPU, HotplugAction.OFFLINE, 7),
            (HotplugSubsystem.CPU, HotplugAction.ONLINE, 9),
            (HotplugSubsystem.MEMORY, HotplugAction.REMOVE, 12),
        ]
        await watcher.aclose()
        assert watcher.task.done() and not watcher.task.cancelled()

    with caplog.at_level(logging.WARNING):
        asyncio.run(scenario())
    assert "callback failed" in caplog.text
    assert "ignoring a malformed uevent" in caplog.text


class RefusingSocket:
    """A socket whose bind fails the way a seccomp-restricted sandbox refuses netlink."""

    def __init__(self) -> None:
        self.closed = False

    async def bind(self, groups: int) -> None:
        raise PermissionError(errno.EPERM, "Operation not permitted")

    def close(self) -> None:
        self.closed = True


def test_unavailable_socket_runs_without_hotplug(caplog: pytest.LogCaptureFixture) -> None:
    refusing = RefusingSocket()

    async def callback(event: HotplugEvent) -> None:
        raise AssertionError("no event expected")

    async def scenario() -> None:
        assert await start_hotplug_watcher(callback, socket_factory=lambda: refusing) is None
        watcher = HotplugWatcher(callback, socket_factory=RefusingSocket)
        with pytest.raises(HotplugUnavailableError, match=r"NETLINK_KOBJECT_UEVENT.*not permitted"):
            await watcher.open()

    with caplog.at_level(logging.WARNING):
        asyncio.run(scenario())
    assert refusing.closed
    assert "running without CPU/memory hotplug detection" in caplog.text


class FailingSocket:
    """A bound socket whose every receive fails with ENOBUFS (a uevent burst overflowed it)."""

    def __init__(self) -> None:
        self.closed = False

    async def bind(self, groups: int) -> None:
        assert groups == 1

    async def get(self) -> AsyncIterator[dict[str, dict[str, bytes]]]:
        raise OSError(errno.ENOBUFS, "No buffer space available")
        yield {"header": {"payload": b""}}

    def close(self) -> None:
        self.closed = True


def test_socket_errors_report_lost_events_then_give_up(caplog: pytest.LogCaptureFixture) -> None:
    failing = FailingSocket()
    events: list[HotplugEvent] = []

    async def callback(event: HotplugEvent) -> None:
        events.append(event)

    async def scenario() -> None:
        watcher = HotplugWatcher(callback, socket_factory=lambda: failing)
        watcher.retry_seconds = 0
        await watcher.run()

    with caplog.at_level(logging.WARNING):
        asyncio.run(scenario())
    assert events == [HotplugEvent(None, HotplugAction.LOST, None)] * MAX_CONSECUTIVE_ERRORS
    assert failing.closed
    assert "No buffer space available" in caplog.text
    assert "no longer watching hotplug" in caplog.text
