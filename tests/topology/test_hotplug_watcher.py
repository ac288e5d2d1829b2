"""The hotplug watcher on a real netlink uevent socket (the parser: test_hotplug_uevent.py)."""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
from collections.abc import AsyncIterator

import pytest
from uevent_recordings import kernel_payload

from nri_plrm.daemon.hotplug.uevent import HotplugAction, HotplugEvent, HotplugSubsystem
from nri_plrm.daemon.hotplug.watcher import (
    MAX_CONSECUTIVE_ERRORS,
    HotplugUnavailableError,
    HotplugWatcher,
    start_hotplug_watcher,
)

NETLINK_KOBJECT_UEVENT = 15


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
    assert "ignoring an unreadable uevent" in caplog.text


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
