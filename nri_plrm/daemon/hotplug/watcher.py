"""CPU and memory hotplug: the kernel's uevent socket, delivering typed events to a callback.

The kernel broadcasts a uevent on the ``NETLINK_KOBJECT_UEVENT`` socket (kernel group 1) for
every device change. :class:`HotplugWatcher` receives the datagrams through pyroute2's
``AsyncUeventSocket`` and decodes them with the sans-IO parser in
:mod:`nri_plrm.daemon.hotplug.uevent`; it delivers ``SUBSYSTEM=cpu`` and ``SUBSYSTEM=memory``
events with ACTION ``online``, ``offline``, ``add`` or ``remove``.

Opening the socket can fail (no ``CAP_NET_ADMIN`` is needed, but seccomp profiles or a kernel
without netlink uevents refuse it); :func:`start_hotplug_watcher` then logs why and returns
None so the caller runs without hotplug. Uevents are only broadcast to the initial network
namespace: run the plugin with ``hostNetwork`` (as a DaemonSet) or as a host service. When the
socket reports an error (e.g. ``ENOBUFS`` after a burst overflowed its buffer) events may be
lost; the callback then gets a :attr:`HotplugAction.LOST` event and should rediscover.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

from nri_plrm.daemon.hotplug.uevent import (
    HOTPLUG_ACTIONS,
    HotplugAction,
    HotplugEvent,
    UeventError,
    hotplug_event,
    parse_uevent,
)

log = logging.getLogger("nri_plrm.topology.hotplug.watcher")

_KERNEL_GROUP = 1

MAX_CONSECUTIVE_ERRORS = 5
"""Socket errors in a row after which the watcher stops."""


class HotplugUnavailableError(RuntimeError):
    """The uevent socket could not be opened or bound."""


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
    ``on_unreadable`` is called for each datagram the parser refuses (metrics).
    ``socket_factory`` returns an unbound pyroute2-style async uevent socket (tests use it).
    """

    def __init__(
        self,
        callback: HotplugCallback,
        *,
        actions: frozenset[HotplugAction] = HOTPLUG_ACTIONS,
        on_unreadable: Callable[[], None] | None = None,
        socket_factory: Callable[[], Any] = _open_socket,
    ) -> None:
        self._callback = callback
        self._on_unreadable = on_unreadable
        self._actions = actions
        self._socket_factory = socket_factory
        self._socket: Any = None
        self._closed = False
        self.task: asyncio.Task[None] | None = None
        self.retry_seconds = 1.0
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
        try:
            uevent = parse_uevent(payload)
        except UeventError as exc:
            self.malformed += 1
            log.warning("hotplug: ignoring an unreadable uevent: %s", exc)
            if self._on_unreadable is not None:
                self._on_unreadable()
            return
        event = hotplug_event(uevent, self._actions)
        if event is None:
            return
        if uevent.skipped:
            log.info("hotplug: %s: properties set aside: %s", event, "; ".join(uevent.skipped))
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
    on_unreadable: Callable[[], None] | None = None,
    socket_factory: Callable[[], Any] = _open_socket,
) -> HotplugWatcher | None:
    """Open a watcher and run it as a task; None (logged) when hotplug cannot be watched."""
    watcher = HotplugWatcher(
        callback, actions=actions, on_unreadable=on_unreadable, socket_factory=socket_factory
    )
    try:
        await watcher.open()
    except HotplugUnavailableError as exc:
        log.warning("hotplug: %s; running without CPU/memory hotplug detection", exc)
        return None
    watcher.task = asyncio.create_task(watcher.run(), name="nri-plrm-hotplug")
    return watcher
