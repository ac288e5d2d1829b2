"""Whether the daemon is alive: the signal behind ``/healthz`` and the systemd watchdog.

Two facts are measured, both readable from any thread:

- the **event loop heartbeat**: :meth:`Liveness.run` (a task on the loop) stamps
  ``time.monotonic()`` every ``HEARTBEAT_INTERVAL``; a stamp older than ``LOOP_STALL_AFTER``
  means the loop has not turned (a blocking call, a frozen filesystem, a runaway handler);
- the **oldest NRI request in flight** (from the stub): older than the runtime's request timeout
  means containerd has already given up on it and dropped the plugin.

``/healthz`` adds registration (connected, configured and synchronized). The systemd watchdog is
fed from the loop, and only while the loop and the requests are live: a stuck loop or a stuck
request stops ``WATCHDOG=1``. Registration does not gate the watchdog: restarting the plugin
while containerd is down would not bring containerd back.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Protocol

from nri_plrm.daemon.sdnotify import Notifier

HEARTBEAT_INTERVAL = 0.1
"""Seconds between heartbeat stamps on the event loop."""
LOOP_STALL_AFTER = 1.0
"""A heartbeat older than this (seconds) means the event loop is stuck."""


class RequestTracker(Protocol):
    """What liveness needs from the NRI stub."""

    request_timeout: float

    def oldest_request(self) -> tuple[str, float] | None: ...


class Liveness:
    """The daemon's liveness and health, computed on demand from any thread.

    ``registration`` answers (registered, why-not); ``requests`` is the NRI stub, whose
    ``request_timeout`` (containerd's ``plugin_request_timeout``, from Configure) is the budget.
    ``clock`` is ``time.monotonic`` except in tests.
    """

    def __init__(
        self,
        requests: RequestTracker,
        registration: Callable[[], tuple[bool, str]],
        *,
        stall_after: float = LOOP_STALL_AFTER,
        interval: float = HEARTBEAT_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.requests = requests
        self.registration = registration
        self.stall_after = stall_after
        self.interval = interval
        self.clock = clock
        self.heartbeat = clock()

    def beat(self) -> None:
        """Stamp the heartbeat (called on the event loop)."""
        self.heartbeat = self.clock()

    def alive(self) -> tuple[bool, str]:
        """(alive, why): the loop turned within ``stall_after`` and no request is over budget."""
        now = self.clock()
        silent = now - self.heartbeat
        if silent > self.stall_after:
            return False, f"event loop stuck: no heartbeat for {silent:.1f} s"
        oldest = self.requests.oldest_request()
        budget = self.requests.request_timeout
        if oldest is not None and now - oldest[1] > budget:
            method, started = oldest
            return False, (
                f"NRI {method} in flight for {now - started:.1f} s, over the runtime's "
                f"{budget:g} s request timeout"
            )
        return True, "ok"

    def health(self) -> tuple[bool, str]:
        """(healthy, why) for ``/healthz``: alive and registered with the runtime."""
        ok, why = self.alive()
        if not ok:
            return ok, why
        return self.registration()

    async def run(self, notifier: Notifier | None = None) -> None:
        """Stamp the heartbeat until cancelled; feed ``notifier``'s watchdog while alive.

        Runs on the event loop it watches, so a stuck loop stops both the stamps and the
        watchdog; a request over budget stops the watchdog too.
        """
        interval = notifier.watchdog_interval if notifier is not None else None
        every = self.interval if interval is None else min(self.interval, interval / 2)
        fed = -float("inf")
        while True:
            self.beat()
            due = interval is not None and self.clock() - fed >= interval / 2
            if notifier is not None and due and self.alive()[0]:
                notifier.watchdog()
                fed = self.clock()
            await asyncio.sleep(every)
