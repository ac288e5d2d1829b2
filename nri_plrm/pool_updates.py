"""Updates of other containers' resources to the runtime: which to send, when, and what was
sent.

containerd applies every ``ContainerUpdate`` as a CRI ``UpdateContainerResources`` (a runc
update: milliseconds each), and it applies a plugin's ``UpdateContainers`` under the same lock
that every NRI event holds. When pods come and go, the node shared pool moves back and forth
between the same sets of CPUs: a removal grows it, the next admission shrinks it again, and
every best-effort container on the node would be updated twice for nothing. So:

- a pool that grew is sent once no decision was made for ``GROWTH_DELAY``, and at the latest
  ``GROWTH_WAIT_MAX`` after the growth (:class:`UpdateFlusher`): during a pod-start storm every
  admission may take the freed CPUs back. Other changes are sent right after the reply (a
  shrinking pool always goes in the reply of the event that shrank it, before the container
  that takes the CPUs starts);
- an assignment sent in an adjustment or an update (and not reported failed) is remembered for
  ``REMEMBER_SECONDS`` (:class:`SentUpdates`); an update that would send the same assignment
  within that time is left out. The memory is short on purpose: containerd logs and ignores a
  failed update of another container in an event's reply, so what the plugin remembers may be
  wrong, and it must not stay wrong for long. It is emptied whenever the runtime's state is in
  doubt (a new connection, a Synchronize, a hotplug repair) and forgets a container whose
  update carried more than its assignment;
- after an ``UpdateContainers``, the runtime holds what was sent last: a container whose
  assignment changed while that request was out is queued again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from nri_plrm.engine.spec import ContainerAssignment
from nri_plrm.ledger import NodeLedger
from nri_plrm.ledger.tables import ContainerKey
from nri_plrm.proto import nri_api_pb2 as api
from nri_plrm.translate.pod_to_cri import assignment_updates

UpdateSender = Callable[[list[api.ContainerUpdate]], Awaitable[Any]]
"""Sends an unsolicited ``UpdateContainers`` (the stub's ``update_containers``)."""


REMEMBER_SECONDS = 60.0
"""How long an assignment sent to a container is trusted to be what the runtime applied."""

Target = tuple[str, ContainerAssignment]
"""A container id and the assignment to send it."""


class SentUpdates:
    """The assignment last sent to each container, and when (``clock``: seconds)."""

    def __init__(
        self,
        remember: float = REMEMBER_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.remember = remember
        self.clock = clock
        self._sent: dict[str, tuple[ContainerAssignment, float]] = {}

    def new(self, targets: Iterable[Target]) -> list[Target]:
        """The targets whose assignment is not the one sent to the container lately."""
        oldest = self.clock() - self.remember
        sent = self._sent
        out = []
        for target in targets:
            known = sent.get(target[0])
            if known is None or known[1] < oldest or known[0] != target[1]:
                out.append(target)
        return out

    def record(self, targets: Iterable[Target]) -> None:
        """These assignments were sent (an adjustment, a reply's updates, a delivered
        ``UpdateContainers``)."""
        now = self.clock()
        for cid, assignment in targets:
            self._sent[cid] = (assignment, now)

    def forget(self, cids: Iterable[str]) -> None:
        """What these containers were sent is unknown (a failed update, one that carried more
        than the assignment, a removed container)."""
        for cid in cids:
            self._sent.pop(cid, None)

    def clear(self) -> None:
        """Forget everything (a new connection, a Synchronize, a hotplug repair)."""
        self._sent.clear()

    def __len__(self) -> int:
        return len(self._sent)


GROWTH_DELAY = 0.05
"""Seconds without a decision that a pool that grew (a container or pod removed) waits before
its containers are updated: when the next admission takes the same CPUs back meanwhile,
nothing is sent."""

GROWTH_WAIT_MAX = 1.0
"""Seconds a grown pool waits at most, however busy the node (the kubelet itself moves shared
pool containers every 10 s)."""


class UpdateFlusher:
    """Sends the current assignment of queued containers with ``UpdateContainers``, once the
    handler that queued them has replied (for a pool that grew: once decisions paused for
    ``GROWTH_DELAY``, ``GROWTH_WAIT_MAX`` at most), leaving out what the runtime was sent
    already (``sent``)."""

    def __init__(self, ledger: NodeLedger, logger: logging.Logger, sent: SentUpdates) -> None:
        self.ledger = ledger
        self.log = logger
        self.sent = sent
        self.sender: UpdateSender | None = None
        self._queued: set[ContainerKey] = set()
        self._task: asyncio.Task[None] | None = None
        self._urgent = False
        self._wake: asyncio.Future[None] | None = None

    def queue(self, keys: Iterable[ContainerKey], *, grown: bool = False) -> None:
        """Send these containers' assignments soon: after the reply, or once decisions paused
        when their pool only grew (no-op without a sender or a loop)."""
        if self.sender is None:
            return
        self._queued.update(keys)
        if not self._queued:
            return
        if not grown:
            self._hurry()
        if self._task is None or self._task.done():
            with contextlib.suppress(RuntimeError):
                self._task = asyncio.get_running_loop().create_task(self._flush())

    def _hurry(self) -> None:
        self._urgent = True
        if self._wake is not None and not self._wake.done():
            self._wake.set_result(None)

    def clear(self) -> None:
        """Drop the queue (a Synchronize answers for every container)."""
        self._queued.clear()

    def cancel(self) -> None:
        """Drop the queue and stop sending (connection lost)."""
        self._queued.clear()
        if self._task is not None:
            self._task.cancel()
            self._task = None

    async def drain(self) -> None:
        """Wait until queued updates have been sent (tests, shutdown)."""
        while self._task is not None and not self._task.done():
            self._hurry()
            await asyncio.shield(self._task)

    async def _flush(self) -> None:
        while self._queued and self.sender is not None:
            await self._pause()
            self._urgent = False
            await asyncio.sleep(0)
            keys, self._queued = self._queued, set()
            targets = self.sent.new(targets_for(self.ledger, self.ledger.assignments(sorted(keys))))
            if targets:
                await self._send(targets)

    async def _pause(self) -> None:
        """Wait until no decision was made for ``GROWTH_DELAY`` (``GROWTH_WAIT_MAX`` at most),
        or until something that cannot wait is queued."""
        loop = asyncio.get_running_loop()
        latest = loop.time() + GROWTH_WAIT_MAX
        while not self._urgent and loop.time() < latest:
            seen = self.ledger.decisions
            self._wake = loop.create_future()
            await asyncio.wait({self._wake}, timeout=min(GROWTH_DELAY, latest - loop.time()))
            self._wake = None
            if self.ledger.decisions == seen:
                return

    async def _send(self, targets: list[Target]) -> None:
        """Send ``targets``; what the runtime now has is what was sent last, so a container
        whose assignment changed while the request was out is queued again."""
        assert self.sender is not None
        try:
            failed = await self.sender(assignment_updates(targets))
        except Exception as exc:  # the runtime reports failures without details
            self.sent.forget(cid for cid, _ in targets)
            self.log.warning("pool update of %d containers failed: %s", len(targets), exc)
            return
        self.sent.record(targets)
        if failed:
            self.sent.forget(u.container_id for u in failed)
            self.log.warning("pool update failed for %d containers", len(failed))
        ids = self.ledger.tables.ids
        moved = [
            key
            for cid, assignment in targets
            if (key := ids.get(cid)) is not None and self.ledger.assignment(key) != assignment
        ]
        if moved:
            self.queue(moved)


def targets_for(
    ledger: NodeLedger, changes: Mapping[ContainerKey, ContainerAssignment], exclude: str = ""
) -> list[Target]:
    """(container id, assignment) for these changes, to the containers that have an id
    (``exclude``: the one the reply adjusts)."""
    ids = ledger.tables.container_id
    return [
        (cid, assignment)
        for key, assignment in changes.items()
        if (cid := ids(key)) is not None and cid != exclude
    ]


def reply_updates(
    sent: SentUpdates, targets: list[Target], *, again: bool = False
) -> list[api.ContainerUpdate]:
    """The updates a reply carries for ``targets``: those the runtime was not sent lately, or
    all of them ``again`` (re-asserting what the runtime replaced); remembered as sent."""
    if not again:
        targets = sent.new(targets)
    sent.record(targets)
    return assignment_updates(targets)
