"""CPU and memory hotplug: kernel uevents parsed into typed events for an asyncio callback.

The kernel broadcasts a uevent on the ``NETLINK_KOBJECT_UEVENT`` socket (kernel group 1) for
every device change. A payload is ``ACTION@DEVPATH`` then ``KEY=VALUE`` properties, all
NUL-terminated. :func:`parse_uevent` decodes it (pure, fuzzed); :func:`hotplug_event` keeps
``SUBSYSTEM=cpu`` (``/devices/system/cpu/cpuN``) and ``SUBSYSTEM=memory``
(``/devices/system/memory/memoryN``) with ACTION ``online``, ``offline``, ``add`` or
``remove``. :class:`HotplugWatcher` receives them through pyroute2's ``AsyncUeventSocket``.

Opening the socket can fail (no ``CAP_NET_ADMIN`` is needed, but seccomp profiles or a kernel
without netlink uevents refuse it); :func:`start_hotplug_watcher` then logs why and returns
None so the caller runs without hotplug. Uevents are only broadcast to the initial network
namespace: run the plugin with ``hostNetwork`` (as a DaemonSet) or as a host service. When the
socket reports an error (e.g. ``ENOBUFS`` after a burst overflowed its buffer) events may be
lost; the callback then gets a :attr:`HotplugAction.LOST` event and should rediscover.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import re
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)

MAX_UEVENT_BYTES = 65536
"""Largest payload accepted (the kernel's uevent buffer is 2 KiB of properties)."""

_DEVPATHS = {
    "cpu": re.compile(r"^/devices/system/cpu/cpu([0-9]{1,6})$"),
    "memory": re.compile(r"^/devices/system/memory/memory([0-9]{1,9})$"),
}
_KEY = re.compile(r"^[A-Za-z0-9_.-]+$")
_KERNEL_GROUP = 1

MAX_CONSECUTIVE_ERRORS = 5
"""Socket errors in a row after which the watcher stops."""


class UeventError(ValueError):
    """A uevent payload that breaks the kernel's format."""


class HotplugUnavailableError(RuntimeError):
    """The uevent socket could not be opened or bound."""


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
    """A decoded kernel uevent."""

    action: str
    devpath: str
    properties: Mapping[str, str] = field(default_factory=dict)

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


def _text(raw: bytes, what: str) -> str:
    try:
        text = raw.decode("ascii")
    except UnicodeDecodeError as exc:
        raise UeventError(f"uevent {what} {raw[:64]!r}: not ASCII text") from exc
    if not text.isprintable():
        raise UeventError(f"uevent {what} {text[:64]!r}: contains control characters")
    return text


def parse_uevent(data: bytes) -> Uevent:
    """Decode one kernel uevent payload.

    Raises UeventError naming the offending part when the payload is not
    ``ACTION@DEVPATH\\0KEY=VALUE\\0...`` or when ``ACTION``/``DEVPATH`` properties contradict
    the header. udev's ``libudev`` messages are rejected (only kernel events are expected).
    """
    if len(data) > MAX_UEVENT_BYTES:
        raise UeventError(f"uevent of {len(data)} bytes: larger than {MAX_UEVENT_BYTES}")
    if data.startswith(b"libudev\x00"):
        raise UeventError("uevent from udev (libudev header): only kernel uevents are read")
    parts = data.split(b"\x00")
    if parts and parts[-1] == b"":
        parts.pop()
    if not parts:
        raise UeventError("uevent: empty payload")
    header = _text(parts[0], "header")
    action, sep, devpath = header.partition("@")
    if not sep or not action or not devpath.startswith("/"):
        raise UeventError(f"uevent header {header[:64]!r}: expected ACTION@/devpath")
    properties: dict[str, str] = {}
    for raw in parts[1:]:
        item = _text(raw, "property")
        key, sep, value = item.partition("=")
        if not sep or not _KEY.match(key):
            raise UeventError(f"uevent property {item[:64]!r}: expected KEY=VALUE")
        if key in properties:
            raise UeventError(f"uevent property {key!r}: given twice")
        properties[key] = value
    for key, expected in (("ACTION", action), ("DEVPATH", devpath)):
        if properties.get(key, expected) != expected:
            raise UeventError(
                f"uevent {key}={properties[key]!r} contradicts the header {header[:64]!r}"
            )
    return Uevent(action, devpath, properties)


def hotplug_event(
    uevent: Uevent, actions: frozenset[HotplugAction] = HOTPLUG_ACTIONS
) -> HotplugEvent | None:
    """The hotplug event a uevent means, or None when it is about something else."""
    subsystem = uevent.subsystem
    if subsystem not in _DEVPATHS:
        return None
    match = _DEVPATHS[subsystem].match(uevent.devpath)
    try:
        action = HotplugAction(uevent.action)
    except ValueError:
        return None
    if match is None or action not in actions or action is HotplugAction.LOST:
        return None
    seqnum_text = uevent.properties.get("SEQNUM")
    seqnum = None
    if seqnum_text is not None:
        if not (seqnum_text.isascii() and seqnum_text.isdigit()) or len(seqnum_text) > 20:
            raise UeventError(f"uevent SEQNUM={seqnum_text!r}: not a sequence number")
        seqnum = int(seqnum_text)
    return HotplugEvent(
        HotplugSubsystem(subsystem), action, int(match.group(1)), uevent.devpath, seqnum
    )


HotplugCallback = Callable[[HotplugEvent], Awaitable[None]]


def _payload_marshal() -> Any:
    from pyroute2.netlink.nlsocket import Marshal
    from pyroute2.netlink.uevent import ueventmsg

    class PayloadMarshal(Marshal):  # type: ignore[misc]
        """Hands the raw datagram on; :func:`parse_uevent` does the decoding."""

        def is_enough(self, msg: Any) -> bool:
            return False

        def parse(
            self,
            data: bytes,
            seq: int | None = None,
            callback: Any = None,
            skip_alien_seq: bool = False,
        ) -> Iterator[Any]:
            if not data:
                return
            msg = ueventmsg()
            msg["header"]["sequence_number"] = 0
            msg["header"]["payload"] = bytes(data)
            yield msg

    return PayloadMarshal()


def _open_socket() -> Any:
    from pyroute2.netlink.uevent import AsyncUeventSocket

    class KernelUeventSocket(AsyncUeventSocket):  # type: ignore[misc]
        """pyroute2's uevent socket; every datagram goes to one queue (uevents carry no
        netlink header, and pyroute2 0.9 fails on datagrams shorter than one)."""

        def enqueue(self, data: bytes, addr: Any) -> Any:
            return self.msg_queue.put_nowait(0, data)

    sock = KernelUeventSocket()
    sock.set_marshal(_payload_marshal())
    return sock


class HotplugWatcher:
    """Delivers CPU/memory hotplug events from the kernel to an async callback.

    ``open()`` binds the socket (HotplugUnavailableError when that is impossible); ``run()``
    receives until ``close()``. Callback exceptions are logged and do not stop the watcher.
    ``socket_factory`` returns an unbound pyroute2-style async uevent socket (tests use it).
    """

    def __init__(
        self,
        callback: HotplugCallback,
        *,
        actions: frozenset[HotplugAction] = HOTPLUG_ACTIONS,
        socket_factory: Callable[[], Any] = _open_socket,
    ) -> None:
        self._callback = callback
        self._actions = actions
        self._socket_factory = socket_factory
        self._socket: Any = None
        self._closed = False
        self.task: asyncio.Task[None] | None = None
        self.retry_seconds = 1.0
        self.received = 0
        self.malformed = 0

    async def open(self) -> None:
        """Open and bind the kernel uevent socket."""
        if self._socket is not None:
            return
        sock: Any = None
        try:
            sock = self._socket_factory()
            await sock.bind(groups=_KERNEL_GROUP)
        except Exception as exc:
            if sock is not None:
                sock.close()
            raise HotplugUnavailableError(
                f"kernel uevent netlink socket (NETLINK_KOBJECT_UEVENT, group {_KERNEL_GROUP}) "
                f"cannot be opened: {exc}"
            ) from exc
        self._socket = sock

    async def run(self) -> None:
        """Receive and deliver events until :meth:`close`.

        A socket error delivers a LOST event and retries after a second; after
        ``MAX_CONSECUTIVE_ERRORS`` errors in a row the watcher gives up (logged) and returns.
        """
        await self.open()
        errors = 0
        while not self._closed:
            try:
                async for msg in self._socket.get():
                    errors = 0
                    await self._handle(msg["header"].get("payload", b""))
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if self._closed:
                    break
                errors += 1
                log.warning("hotplug: uevent socket error (%s); events may be lost", exc)
                await self._deliver(HotplugEvent(None, HotplugAction.LOST, None))
                if errors >= MAX_CONSECUTIVE_ERRORS:
                    log.error(
                        "hotplug: %d uevent socket errors in a row; no longer watching hotplug",
                        errors,
                    )
                    self.close()
                    break
                await asyncio.sleep(self.retry_seconds)

    async def _handle(self, payload: bytes) -> None:
        if self._closed:
            return
        self.received += 1
        try:
            event = hotplug_event(parse_uevent(payload), self._actions)
        except UeventError as exc:
            self.malformed += 1
            log.warning("hotplug: ignoring a malformed uevent: %s", exc)
            return
        if event is not None:
            await self._deliver(event)

    async def _deliver(self, event: HotplugEvent) -> None:
        try:
            await self._callback(event)
        except Exception:
            log.exception("hotplug: callback failed on %s", event)

    def close(self) -> None:
        """Stop receiving and release the socket (idempotent); ``run()`` then returns."""
        self._closed = True
        if self._socket is not None:
            self._socket.close()
            self._socket = None

    async def aclose(self, timeout: float = 5.0) -> None:
        """Close and wait for the receiving task to end (cancelled after ``timeout``)."""
        self.close()
        if self.task is None or self.task.done():
            return
        done, _ = await asyncio.wait({self.task}, timeout=timeout)
        if not done:
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)


async def start_hotplug_watcher(
    callback: HotplugCallback,
    *,
    actions: frozenset[HotplugAction] = HOTPLUG_ACTIONS,
    socket_factory: Callable[[], Any] = _open_socket,
) -> HotplugWatcher | None:
    """Open a watcher and run it as a task; None (logged) when hotplug cannot be watched."""
    watcher = HotplugWatcher(callback, actions=actions, socket_factory=socket_factory)
    try:
        await watcher.open()
    except HotplugUnavailableError as exc:
        log.warning("hotplug: %s; running without CPU/memory hotplug detection", exc)
        return None
    watcher.task = asyncio.create_task(watcher.run(), name="nri-plrm-hotplug")
    return watcher
