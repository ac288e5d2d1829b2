"""The ledger's files: the checkpoint, the decision journal beside it, and the kubelet-format
export, with the timers that compact the journal and rewrite the export off the reply path.

Each decision is one journal append (one small write; a background thread syncs it, no reply
waits for the disk, see docs/design.md §4); the journal is
folded into a new checkpoint generation once it grows, after a burst once the plugin is idle,
and after every Synchronize (see docs/design.md, "Durability").
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, cast

from nri_plrm.checkpoint.dirguard import StateDirGuard
from nri_plrm.checkpoint.journal import DecisionJournal, JournalError
from nri_plrm.checkpoint.kubelet import (
    cpu_state_from_manager,
    memory_state_from_manager,
    write_kubelet_state,
)
from nri_plrm.checkpoint.store import CheckpointError, CheckpointStore
from nri_plrm.engine.facade import Engine
from nri_plrm.ledger.observer import LedgerObserver
from nri_plrm.ledger.transitions import Op

COMPACT_RECORDS = 1000
"""Journal records after which the journal is folded into a full checkpoint."""
COMPACT_BYTES = 4 << 20
COMPACT_DELAY = 0.05
"""Seconds after the decision that filled the journal before compacting (off the reply path)."""
IDLE_COMPACT_MIN = 0.1
IDLE_COMPACT_MAX = 5.0
IDLE_COMPACT_FACTOR = 10
"""After a burst of decisions, the journal is also folded once the plugin has been idle for
``FACTOR`` times the last compaction's duration (between MIN and MAX seconds): the checkpoint
file stays current for readers of ``state.json`` while compaction takes at most about a tenth
of the event loop's time."""
EXPORT_DELAY = 0.05
"""Seconds after a change before the kubelet-format files are rewritten (coalesces bursts);
at least ten times the last export's duration, so exports take at most a tenth of the loop."""

Snapshot = Callable[[int], dict[str, Any]]
"""The ledger's full state for a checkpoint of the given generation."""


class Persistence:
    """Writes the ledger's state: ``snapshot`` gives it, ``store`` (optional) keeps it."""

    def __init__(
        self,
        snapshot: Snapshot,
        store: CheckpointStore | None,
        *,
        kubelet_state_path: str | None,
        observer: LedgerObserver | None,
        logger: logging.Logger,
    ) -> None:
        self._snapshot = snapshot
        self.store = store
        self.journal = (
            DecisionJournal(store.directory, flusher=store.flusher) if store is not None else None
        )
        self.state_dir = StateDirGuard(store.directory) if store is not None else None
        self.kubelet_state_path = kubelet_state_path
        self.observer = observer
        self.log = logger
        self.generation = 0
        self.base: dict[str, Any] | None = None
        """The checkpoint ``data`` the journal continues (None: nothing durable yet)."""
        self.records: list[Op] = []
        """The decisions made since ``base``, in order."""
        self._compact_handle: asyncio.TimerHandle | None = None
        self._compact_urgent = False
        self._last_compaction = 0.0
        self._export_handle: asyncio.TimerHandle | None = None
        self._last_export = 0.0

    def save(self, op: Op) -> None:
        """Make ``op`` durable: append it to the journal or, when the journal is not usable
        (not opened yet, or a write failed before), write the whole state as a checkpoint.
        Raises ``JournalError``/``CheckpointError``."""
        assert self.journal is not None
        if not self.journal.is_open or self.journal.broken is not None:
            self.compact()
            return
        with self._counted_write():
            self.journal.append(op)
        if self._state_dir_lost():
            self.compact()

    def _state_dir_lost(self) -> bool:
        """True (logged and counted) when the state directory or the journal was deleted or
        replaced since the last checkpoint; the caller then writes a full one (issue 12)."""
        if self.state_dir is None or self.journal is None:
            return False
        why = self.state_dir.lost(self.journal.fileno())
        if why is None:
            return False
        self.journal.close()  # reported once: compact() starts a new journal in a new directory
        self.state_dir.remember()
        self.log.error(
            "%s: recreating it and writing a full checkpoint before acknowledging",
            why,
            extra={"plrm": {"event": "checkpoint", "problem": "state-directory-lost"}},
        )
        if self.observer is not None:
            self.observer.record_state_directory_lost()
        return True

    def compact(self) -> None:
        """Write the full state as a new checkpoint generation and start an empty journal.

        Raises ``CheckpointError`` when the checkpoint cannot be written (nothing changes then);
        a journal that cannot be restarted refuses appends until the next compaction.
        """
        if self.store is None or self.journal is None:
            return
        if self._compact_handle is not None:
            self._compact_handle.cancel()
            self._compact_handle = None
        generation = self.generation + 1
        data = self._snapshot(generation)
        self._state_dir_lost()
        start = time.perf_counter()
        with self._counted_write():
            self.store.save(data)
        if self.state_dir is not None:
            self.state_dir.remember()
        self._last_compaction = time.perf_counter() - start
        self.generation = generation
        self.base = data
        self.records = []
        try:
            self.journal.reset(generation)
        except JournalError as exc:
            self.log.error("decisions will fail until the journal can be restarted: %s", exc)

    def mark_broken(self, why: str) -> None:
        """A release was not written: the next write is a full checkpoint that includes it."""
        assert self.journal is not None
        self.journal.broken = self.journal.broken or why

    def schedule_compaction(self) -> None:
        """Compact soon when the journal is full or broken, else once the plugin is idle."""
        journal = self.journal
        if journal is None:
            return
        full = journal.count >= COMPACT_RECORDS or journal.size >= COMPACT_BYTES
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            if full or journal.broken:
                self._compact_in_background()
            return
        urgent = full or journal.broken is not None
        if self._compact_handle is not None:
            if self._compact_urgent:
                return
            self._compact_handle.cancel()
        if urgent:
            delay = COMPACT_DELAY
        else:
            idle = self._last_compaction * IDLE_COMPACT_FACTOR
            delay = min(IDLE_COMPACT_MAX, max(IDLE_COMPACT_MIN, idle))
        self._compact_urgent = urgent
        self._compact_handle = loop.call_later(delay, self._compact_in_background)

    def _compact_in_background(self) -> None:
        self._compact_handle = None
        try:
            self.compact()
        except CheckpointError as exc:
            self.log.error("checkpoint compaction failed, journal keeps growing: %s", exc)

    def schedule_export(self, engine: Engine) -> None:
        """Rewrite the kubelet-format files soon (at once outside an event loop)."""
        if not self.kubelet_state_path or self._export_handle is not None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.export(engine)
            return
        delay = max(EXPORT_DELAY, self._last_export * IDLE_COMPACT_FACTOR)
        self._export_handle = loop.call_later(delay, self.export, engine)

    def export(self, engine: Engine) -> None:
        """Write ``cpu_manager_state``/``memory_manager_state`` to ``kubelet_state_path``."""
        self._export_handle = None
        if not self.kubelet_state_path:
            return
        start = time.perf_counter()
        try:
            write_kubelet_state(
                self.kubelet_state_path,
                cpu_state_from_manager(engine.cpu_manager),
                # The exporter's protocol declares machine_state as a plain attribute, which
                # mypy treats as invariant against the manager's dict.
                memory_state_from_manager(cast(Any, engine.memory_manager)),
                flusher=self.store.flusher if self.store is not None else None,
            )
        except (OSError, ValueError) as exc:
            self.log.warning("kubelet-format export to %s failed: %s", self.kubelet_state_path, exc)
        self._last_export = time.perf_counter() - start

    def unusable(self, kind: str, problem: str) -> None:
        """Log and count a checkpoint or journal that cannot be used."""
        self.log.error(
            "checkpoint unusable, rebuilding from the runtime: %s",
            problem,
            extra={"plrm": {"event": "checkpoint", "problem": kind}},
        )
        if self.observer is not None:
            self.observer.record_corrupt_checkpoint(kind)

    def close(self) -> None:
        """Fold the journal into a checkpoint and close it (clean shutdown)."""
        try:
            self.compact()
        except CheckpointError as exc:
            self.log.error("final checkpoint failed; the journal keeps the decisions: %s", exc)
        if self.journal is not None:
            self.journal.close()

    @contextmanager
    def _counted_write(self) -> Iterator[None]:
        """Report the write inside, its duration and whether it raised, to the observer."""
        start = time.perf_counter()
        ok = False
        try:
            yield
            ok = True
        finally:
            if self.observer is not None:
                self.observer.record_checkpoint_write(time.perf_counter() - start, ok=ok)
