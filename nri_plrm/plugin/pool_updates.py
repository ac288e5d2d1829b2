"""Updates of other pods' containers to the runtime: which to send, when, how, and what was
sent (docs/design.md section 3).

containerd applies the updates of an event's reply before the event returns, holding the NRI
lock that every pod and container event of the node takes (a runc update, 8-10 ms each), and it
holds that lock for the whole of a plugin's ``UpdateContainers`` too. A pod start must not wait
for the containers of the rest of the node, so:

- an event's reply updates only its own pod's containers (:meth:`UpdateFlusher.reply_updates`);
  the other pods' changed containers are queued and sent once the node settled (no decision
  for ``SETTLE``, no container between its creation and its start), in batches of ``BATCH``, a
  shrunk pool ``SHRINK_WAIT_MAX`` at the latest, a grown one ``GROWTH_WAIT_MAX`` (the next
  admission often takes freed CPUs back, and then nothing is sent);
- they go by CRI ``UpdateContainerResources`` where containerd's CRI socket is there (the
  kubelet's path: the runc update runs outside the NRI lock), else by NRI ``UpdateContainers``
  where the runtime applies it safely (NRI v0.12.1+), else in the next replies
  (:func:`choose_update_path`);
- an assignment sent in an adjustment or an update (and not reported failed) is remembered for
  ``REMEMBER_SECONDS`` (:class:`SentUpdates`); an update that would send the same assignment
  within that time is left out. The memory is short on purpose: containerd logs and ignores a
  failed update of another container in an event's reply, so what the plugin remembers may be
  wrong, and it must not stay wrong for long. It is emptied whenever the runtime's state is in
  doubt (a new connection, a Synchronize, a hotplug repair) and forgets a container whose
  update carried more than its assignment;
- the runtime holds what was sent last: a container whose assignment changed while its update
  was out is queued again; a failed one is tried again (``UPDATE_ATTEMPTS``), a removed one
  forgotten.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import replace
from typing import Any

from nri_plrm.base.cpuset import CPUSet
from nri_plrm.engine.spec import ContainerAssignment
from nri_plrm.ledger import NodeLedger
from nri_plrm.ledger.tables import ContainerKey
from nri_plrm.plugin.cri_updates import CRIUpdater
from nri_plrm.proto import nri_api_pb2 as api
from nri_plrm.translate.pod_to_cri import assignment_update, assignment_updates

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


SETTLE = 0.05
"""Seconds without a decision, and with no container between its creation and its start,
that queued updates wait for before each batch: containerd applies an ``UpdateContainers``
under the lock every NRI event takes, so a batch sent while a pod starts delays that start."""

SHRINK_WAIT_MAX = 0.5
"""Seconds a pool that shrank waits at most for the node to settle: its containers still run
on CPUs that were just given to an exclusive slice (the kubelet leaves them there until its
next reconcile, up to 10 s)."""

GROWTH_WAIT_MAX = 1.0
"""Seconds a pool that only grew waits at most (a pod start often takes the freed CPUs back
meanwhile, and then nothing needs sending)."""

BATCH = 10
"""Containers per ``UpdateContainers``: containerd applies each update with a runc update
(15-25 ms on a busy node) while it holds the NRI lock, so a pod start that arrives during a
batch waits for at most this many."""

START_WAIT = 2.0
"""Seconds a created container counts as starting when no PostStartContainer follows (its
start failed, or the runtime does not send it)."""

STARTING_KEPT = 64
"""Containers between creation and start above which expired ones are forgotten at once."""

UPDATE_ATTEMPTS = 3
"""Deliveries tried for one change of a container before it is left to the next change or
Synchronize (each failure is logged with the runtime's reason)."""


class _Queued:
    """A container waiting for its update: since when, how long it may wait, attempts made."""

    __slots__ = ("attempts", "deadline", "since")

    def __init__(self, since: float, wait_max: float) -> None:
        self.since = since
        self.deadline = since + wait_max
        self.attempts = 0


class UpdateFlusher:
    """Sends the current assignment of queued containers with ``UpdateContainers``, outside
    every NRI event: in batches of ``BATCH``, each once the node settled (no decision for
    ``SETTLE`` and no container between its creation and its start) or once the oldest queued
    change waited its longest (``SHRINK_WAIT_MAX``, ``GROWTH_WAIT_MAX`` for a pool that only
    grew), leaving out what the runtime was sent already (``sent``). ``observe_lag`` receives,
    for each delivered update, the seconds since the change was queued."""

    def __init__(
        self,
        ledger: NodeLedger,
        logger: logging.Logger,
        sent: SentUpdates,
        observe_lag: Callable[[float], None] | None = None,
    ) -> None:
        self.ledger = ledger
        self.log = logger
        self.sent = sent
        self.observe_lag = observe_lag
        self.sender: UpdateSender | None = None
        """How updates go now (:meth:`choose_route`); None: in the events' replies."""
        self.nri: UpdateSender | None = None
        self.cri: CRIUpdater | None = None
        self.nri_version: Callable[[], str] = str
        self._queued: dict[ContainerKey, _Queued] = {}
        self._starting: dict[str, float] = {}
        self._task: asyncio.Task[None] | None = None
        self._urgent = False
        self._wake: asyncio.Future[None] | None = None

    def routes(
        self, nri: UpdateSender | None, cri: CRIUpdater | None, nri_version: Callable[[], str]
    ) -> None:
        """The ways to the runtime: ``nri`` sends an NRI ``UpdateContainers``, ``cri`` a CRI
        ``UpdateContainerResources`` per container; ``nri_version`` tells the connected
        runtime's NRI version. Until :meth:`choose_route`, updates go through ``nri``."""
        self.nri, self.cri, self.nri_version = nri, cri, nri_version
        self.sender = nri

    def choose_route(self) -> None:
        """Choose the way for this connection (at Configure) and log it."""
        self.sender, how = choose_update_path(self.cri, self.nri, self.nri_version())
        level = logging.INFO if self.sender is not None else logging.WARNING
        self.log.log(level, "updates of other pods' containers: %s", how)

    def reply_updates(
        self, uid: str, changes: Mapping[ContainerKey, ContainerAssignment], exclude: str
    ) -> list[api.ContainerUpdate]:
        """The updates an event's reply carries: the changed containers of the pod ``uid``
        (as many as the pod has, never as many as the node), leaving out ``exclude`` (the one
        the reply adjusts); the other pods' changed containers are queued. containerd applies
        a reply's updates before the event returns, while every other pod start waits. With
        no way outside the events, everything queued goes in the reply."""
        if self.sender is None:
            owed = self.ledger.assignments(self.take())
            return reply_updates(self.sent, targets_for(self.ledger, {**owed, **changes}, exclude))
        own = {key: assignment for key, assignment in changes.items() if key[0] == uid}
        if not self.ledger.in_batch:
            self.queue(key for key in changes if key[0] != uid)
        return reply_updates(self.sent, targets_for(self.ledger, own, exclude))

    async def reassert(self, cpus: Callable[[ContainerAssignment], CPUSet]) -> tuple[int, int]:
        """Send every container its assignment with the cpuset ``cpus`` gives (empty: skipped)
        with an NRI ``UpdateContainers``, outside any NRI event (CPU hotplug repair).

        Returns (updates sent, updates the runtime reported failed); (0, 0) when not attached.
        """
        updates = []
        for cid, key in sorted(self.ledger.tables.ids.items()):
            if (assignment := self.ledger.assignment(key)) is not None and (
                chosen := cpus(assignment)
            ):
                updates.append(assignment_update(cid, replace(assignment, cpus=chosen)))
        if self.nri is None or not updates:
            return 0, 0
        self.sent.clear()  # these cpusets are not the assignments: nothing sent is known now
        return len(updates), len(await self.nri(updates) or ())

    def queue(self, keys: Iterable[ContainerKey], *, grown: bool = False) -> None:
        """Send these containers' assignments once the node settles (kept for the next reply
        when there is no way outside the events); a container already queued keeps its place
        and the shorter wait."""
        now = time.monotonic()
        wait_max = GROWTH_WAIT_MAX if grown else SHRINK_WAIT_MAX
        for key in keys:
            known = self._queued.get(key)
            if known is None:
                self._queued[key] = _Queued(now, wait_max)
            else:
                known.deadline = min(known.deadline, now + wait_max)
        if self.sender is not None and self._queued and (self._task is None or self._task.done()):
            with contextlib.suppress(RuntimeError):
                self._task = asyncio.get_running_loop().create_task(self._flush())

    def take(self) -> list[ContainerKey]:
        """Empty the queue into a reply (when no path outside the events is safe)."""
        keys = list(self._queued)
        self._queued.clear()
        return keys

    def starting(self, cid: str) -> None:
        """A container was created: updates wait until it started (``START_WAIT`` at most)."""
        now = time.monotonic()
        if len(self._starting) >= STARTING_KEPT:
            self.settled(now)  # forget creations that never started
        self._starting[cid] = now + START_WAIT

    def started(self, cid: str) -> None:
        """The container started, exited or is gone."""
        self._starting.pop(cid, None)

    def _hurry(self) -> None:
        self._urgent = True
        if self._wake is not None and not self._wake.done():
            self._wake.set_result(None)

    def clear(self) -> None:
        """Drop the queue (a Synchronize answers for every container)."""
        self._queued.clear()
        self._starting.clear()

    def cancel(self) -> None:
        """Drop the queue and stop sending (connection lost)."""
        self.clear()
        if self._task is not None:
            self._task.cancel()
            self._task = None

    async def drain(self) -> None:
        """Send what is queued now, without waiting for the node to settle (tests, shutdown)."""
        while self._task is not None and not self._task.done():
            self._hurry()
            await asyncio.shield(self._task)

    async def idle(self) -> None:
        """Wait until everything queued has been sent, at the flusher's own pace (unlike
        :meth:`drain`, it does not hurry the batches: tests see what the runtime gets when
        the node settles, however slow the machine). Returns also when sending stops (the
        connection was lost)."""
        while self._task is not None and not self._task.done():
            await asyncio.wait({self._task})

    async def _flush(self) -> None:
        while self._queued and self.sender is not None:
            await self._pause()
            await asyncio.sleep(0)
            batch = sorted(self._queued, key=lambda key: self._queued[key].deadline)[:BATCH]
            entries = {key: self._queued.pop(key) for key in batch}
            targets = self.sent.new(targets_for(self.ledger, self.ledger.assignments(batch)))
            if targets:
                await self._send(targets, entries)

    def settled(self, now: float) -> bool:
        """No container between its creation and its start (expired ones forgotten)."""
        for cid, until in list(self._starting.items()):
            if until <= now:
                del self._starting[cid]
        return not self._starting

    async def _pause(self) -> None:
        """Wait until the node settled: no decision for ``SETTLE`` and nothing starting; or
        until the most pressing queued change waited its longest (or ``drain``)."""
        loop = asyncio.get_running_loop()
        latest = loop.time() + max(
            0.0, min(q.deadline for q in self._queued.values()) - time.monotonic()
        )
        while not self._urgent and loop.time() < latest:
            seen = self.ledger.decisions
            self._wake = loop.create_future()
            await asyncio.wait({self._wake}, timeout=min(SETTLE, latest - loop.time()))
            self._wake = None
            if self.ledger.decisions == seen and self.settled(time.monotonic()):
                break
        self._urgent = False

    async def _send(self, targets: list[Target], entries: Mapping[ContainerKey, _Queued]) -> None:
        """Send ``targets``; what the runtime now has is what was sent last, so a container
        whose assignment changed while the request was out is queued again, and one whose
        update failed is tried again while it exists (``UPDATE_ATTEMPTS`` per change)."""
        assert self.sender is not None
        ids = self.ledger.tables.ids
        try:
            failed = list(await self.sender(assignment_updates(targets)))
        except Exception as exc:
            self.log.warning(
                "pool update of %d containers failed: %s", len(targets), describe_error(exc)
            )
            failed = assignment_updates(targets)
        failed_ids = {update.container_id for update in failed}
        self.sent.record(target for target in targets if target[0] not in failed_ids)
        self.sent.forget(failed_ids)
        now = time.monotonic()
        if self.observe_lag is not None:
            for cid, _ in targets:
                key = ids.get(cid)
                if cid not in failed_ids and key is not None and key in entries:
                    self.observe_lag(now - entries[key].since)
        retry = []
        for cid, assignment in targets:
            key = ids.get(cid)
            if key is None:
                continue  # removed meanwhile: nothing to send it any more
            entry = entries.get(key)
            if cid in failed_ids:
                if entry is not None and entry.attempts + 1 < UPDATE_ATTEMPTS:
                    entry.attempts += 1
                    retry.append((key, entry))
                else:
                    self.log.warning(
                        "pool update of container %s (%s/%s) failed %d times; left to the next "
                        "change or Synchronize",
                        cid,
                        *key,
                        UPDATE_ATTEMPTS,
                    )
            elif self.ledger.assignment(key) != assignment:
                self.queue([key])
        for key, entry in retry:
            if key not in self._queued:
                entry.deadline = now + SETTLE * (2**entry.attempts)
                self._queued[key] = entry
        if failed_ids:
            self.log.warning(
                "pool update failed for %d of %d containers (%d to be tried again): %s",
                len(failed_ids),
                len(targets),
                len(retry),
                ", ".join(sorted(failed_ids)[:5]) + (" ..." if len(failed_ids) > 5 else ""),
            )


SAFE_UPDATE_CONTAINERS = (0, 12, 1)
"""The first NRI version whose runtime side applies a plugin's ``UpdateContainers`` in the lock
order of the events (containerd#13733, fixed by NRI v0.12.1: containerd 2.4)."""


def nri_version_tuple(version: str) -> tuple[int, ...]:
    """``v0.12.2`` as (0, 12, 2); () when absent or unreadable (NRI before v0.12 sends none)."""
    parts = version.lstrip("v").split("-")[0].split(".")
    try:
        return tuple(int(part) for part in parts)
    except ValueError:
        return ()


def choose_update_path(
    cri: CRIUpdater | None, nri: UpdateSender | None, nri_version: str
) -> tuple[UpdateSender | None, str]:
    """How other pods' containers are updated, and a sentence saying so: CRI
    ``UpdateContainerResources`` when a CRI socket is configured and exists (the kubelet's
    path: the runc update runs outside containerd's NRI lock); else NRI ``UpdateContainers``
    when the runtime applies it safely; else None: in the replies of the events (containerd
    applies them before the event returns, so pod starts grow with the node)."""
    if cri is not None and os.path.exists(cri.socket_path):
        return cri, f"CRI UpdateContainerResources on {cri.socket_path}"
    if nri is not None and nri_version_tuple(nri_version) >= SAFE_UPDATE_CONTAINERS:
        return nri, f"NRI UpdateContainers (runtime NRI {nri_version})"
    return None, (
        f"in the replies of NRI events: the runtime's NRI ({nri_version or '< v0.12'}) can "
        "deadlock containerd on a plugin's UpdateContainers (containerd#13733) and no CRI "
        "socket is configured or present ([nri] cri_socket); pod starts then wait for the "
        "updates of every container whose pool moved"
    )


def describe_error(exc: BaseException) -> str:
    """An exception as a log line's reason: its message, else its kind (a timeout has none)."""
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


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
