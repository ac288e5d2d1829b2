"""Kernel uevents, sans-IO: one ``NETLINK_KOBJECT_UEVENT`` datagram in, a hotplug event out.

The kernel sends ``ACTION@DEVPATH`` then ``KEY=VALUE`` properties, each NUL-terminated. A value
is whatever the kernel put between ``=`` and the NUL: the ``cpu`` subsystem's ``MODALIAS`` ends
with a newline, so values are kept byte for byte (decoded as UTF-8, undecodable bytes escaped).
Only what cannot be read is refused (:class:`UeventError`): no ``ACTION@/devpath`` header, a
libudev message, an oversized datagram, or ``ACTION``/``DEVPATH``/``SUBSYSTEM`` properties that
contradict the header or each other. Any other odd property (no ``=``, a strange key, a repeated
key, an unreadable ``SEQNUM``) is set aside in :attr:`Uevent.skipped` and never drops the event.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

MAX_UEVENT_BYTES = 65536
"""Largest datagram accepted (the kernel's uevent buffer holds 2 KiB of properties)."""

_DEVPATHS = {
    "cpu": re.compile(r"/devices/system/cpu/cpu([0-9]{1,6})"),
    "memory": re.compile(r"/devices/system/memory/memory([0-9]{1,9})"),
}
_KEY = re.compile(r"[A-Za-z0-9_.-]+")
_SEQNUM = re.compile(r"[0-9]{1,20}")
_DEFINING = ("ACTION", "DEVPATH", "SUBSYSTEM")
"""Properties an event is read from: a contradiction in them makes the datagram unreadable."""


class UeventError(ValueError):
    """A datagram that cannot be read as a kernel uevent."""


class HotplugSubsystem(str, enum.Enum):
    """Which device class changed."""

    CPU = "cpu"
    MEMORY = "memory"


class HotplugAction(str, enum.Enum):
    """What happened; LOST means events may have been dropped (rediscover)."""

    ONLINE = "online"
    OFFLINE = "offline"
    ADD = "add"
    REMOVE = "remove"
    LOST = "lost"


HOTPLUG_ACTIONS = frozenset(
    {HotplugAction.ONLINE, HotplugAction.OFFLINE, HotplugAction.ADD, HotplugAction.REMOVE}
)
"""The actions reported by default."""


@dataclass(frozen=True)
class Uevent:
    """A decoded kernel uevent; ``skipped`` names the properties that could not be kept."""

    action: str
    devpath: str
    properties: Mapping[str, str] = field(default_factory=dict)
    skipped: tuple[str, ...] = ()

    @property
    def subsystem(self) -> str | None:
        """The ``SUBSYSTEM`` property, if any."""
        return self.properties.get("SUBSYSTEM")


@dataclass(frozen=True)
class HotplugEvent:
    """A CPU or memory block changed (``index`` = CPU number or memory block number)."""

    subsystem: HotplugSubsystem | None
    action: HotplugAction
    index: int | None
    devpath: str = ""
    seqnum: int | None = None


def _decode(raw: bytes) -> str:
    return raw.decode("utf-8", "backslashreplace")


def parse_uevent(data: bytes) -> Uevent:
    """Decode one kernel uevent datagram (raises UeventError naming what is unreadable)."""
    if len(data) > MAX_UEVENT_BYTES:
        raise UeventError(f"uevent of {len(data)} bytes: larger than {MAX_UEVENT_BYTES}")
    if data.startswith(b"libudev\x00"):
        raise UeventError("uevent from udev (libudev header): only kernel uevents are read")
    parts = data.split(b"\x00")
    if parts[-1] == b"":
        parts.pop()
    if not parts:
        raise UeventError("uevent: empty datagram")
    header = _decode(parts[0])
    action, sep, devpath = header.partition("@")
    if not sep or not action.isprintable() or not action or not devpath.startswith("/"):
        raise UeventError(f"uevent header {header[:64]!r}: expected ACTION@/devpath")
    properties: dict[str, str] = {}
    skipped: list[str] = []
    for raw in parts[1:]:
        item = _decode(raw)
        key, sep, value = item.partition("=")
        if not sep or not _KEY.fullmatch(key):
            skipped.append(f"{item[:64]!r}: not KEY=VALUE")
        elif key in properties and key not in _DEFINING:
            skipped.append(f"{key}: given twice")
        elif properties.setdefault(key, value) != value:
            raise UeventError(f"uevent {key} given twice: {properties[key]!r} and {value!r}")
    for key, expected in (("ACTION", action), ("DEVPATH", devpath)):
        if properties.get(key, expected) != expected:
            raise UeventError(
                f"uevent {key}={properties[key][:64]!r} contradicts the header {header[:64]!r}"
            )
    return Uevent(action, devpath, properties, tuple(skipped))


def hotplug_event(
    uevent: Uevent, actions: frozenset[HotplugAction] = HOTPLUG_ACTIONS
) -> HotplugEvent | None:
    """The CPU or memory hotplug event a uevent means, or None when it is about something else.

    A ``SEQNUM`` that is not a sequence number is left out (``seqnum`` None), not fatal.
    """
    subsystem = uevent.subsystem
    if subsystem not in _DEVPATHS:
        return None
    match = _DEVPATHS[subsystem].fullmatch(uevent.devpath)
    try:
        action = HotplugAction(uevent.action)
    except ValueError:
        return None
    if match is None or action not in actions or action is HotplugAction.LOST:
        return None
    seqnum = uevent.properties.get("SEQNUM", "")
    return HotplugEvent(
        HotplugSubsystem(subsystem),
        action,
        int(match.group(1)),
        uevent.devpath,
        int(seqnum) if _SEQNUM.fullmatch(seqnum) else None,
    )
