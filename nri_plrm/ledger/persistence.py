"""The ledger's files: the checkpoint, the decision journal beside it, and the kubelet-format
export, with the timers that compact the journal and rewrite the export off the reply path.

Each decision is one journal append (one small write; a background thread syncs it, no reply
waits for the disk, see docs/design.md §4); the journal is
folded into a new checkpoint generation once it grows, after a burst once the plugin is idle,
and after every Synchronize (see docs/design.md, "Durability").

The folds the timers start run beside the requests: the state is taken in one event-loop step,
then encoded in short pieces and written by a worker thread, while decisions go on into the old
journal. The
new checkpoint names how many of that journal's records it holds (``FOLDED``), so a death before
the journal is replaced loses nothing: the records after them are replayed over it. Then, in one
step, the journal is replaced by one that holds those later records. The kubelet-format export
runs beside the requests too, encoded in short steps (it comes after every burst of changes,
where a fold comes every 4,000 decisions).
"""

from __future__ import annotations

import asyncio
import functools
import gc
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, cast

from nri_plrm.checkpoint.dirguard import StateDirGuard
from nri_plrm.checkpoint.journal import DecisionJournal, JournalError
from nri_plrm.checkpoint.kubelet import (
    CPUManagerState,
    MemoryManagerState,
    cpu_state_from_manager,
    kubelet_files_steps,
    memory_state_from_manager,
)
from nri_plrm.checkpoint.kubelet_export import write_owned
from nri_plrm.checkpoint.store import CheckpointError, CheckpointStore, canonical_json
from nri_plrm.engine.facade import Engine
from nri_plrm.ledger.observer import LedgerObserver
from nri_plrm.ledger.transitions import Op
from nri_plrm.util.steps import beside_loop, finish, stepwise

COMPACT_RECORDS = 4000
"""Journal records after which the journal is folded into a full checkpoint. A fold disturbs
the requests around it (its copy of the state is one event-loop step, its encoding shares the
GIL); a longer journal costs a restart about 70 us per record to replay (0.3 s at most here,
docs/performance.md, fourth round). Between bursts the idle fold keeps the journal short."""
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
IDLE_SLACK = 0.001
"""Seconds early an idle timer may fire and still count as on time."""
BACKGROUND_PAUSE = 0.002
"""Seconds an export leaves the event loop to the requests between two of its steps (a request
spans several loop rounds: without a pause, it would wait for a step in each)."""
FOLDED = "journal"
"""Key of a folded checkpoint's ``data`` naming the journal it continues:
``{"generation": g, "records": n}`` (it holds the first n records of generation g's journal)."""
EXPORT_DELAY = 0.05
"""Seconds after a change before the kubelet-format files are rewritten (coalesces bursts);
at least ten times the last export's duration, so exports take at most a tenth of the loop."""

Snapshot = Callable[[int], dict[str, Any]]
"""The ledger's full state for a checkpoint of the given generation."""


class Persistence:
    """Writes the ledger's state: ``snapshot`` gives it, ``store`` (optional) keeps it;
    ``holding`` is True while decisions are held back from the journal (a batch, which ends
    with a full checkpoint): no fold starts or ends then."""

    def __init__(
        self,
        snapshot: Snapshot,
        store: CheckpointStore | None,
        *,
        kubelet_state_path: str | None,
        observer: LedgerObserver | None,
        logger: logging.Logger,
        holding: Callable[[], bool] = lambda: False,
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
        self._base: bytes | None = None
        self._folded: object = None
        self.records: list[Op] = []
        """The decisions made since the checkpoint (:meth:`base`), in order."""
        self._compact_handle: asyncio.TimerHandle | None = None
        self._compact_urgent = False
        self._idle_at = 0.0
        self._last_compaction = 0.0
        self._export_handle: asyncio.TimerHandle | None = None
        self._last_export = 0.0
        self._export_engine: Engine | None = None
        self._exporting: asyncio.Task[None] | None = None
        self._export_again = False
        self._export_lock = threading.Lock()
        self._holding = holding
        self._fold: asyncio.Task[None] | None = None
        self._writer: ThreadPoolExecutor | None = None
        self._write_lock = threading.Lock()
        self._claimed = 0
        self._written = 0

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
        """Write the full state as a new checkpoint generation and start an empty journal, at
        once (a fold in progress is superseded).

        Raises ``CheckpointError`` when the checkpoint cannot be written (nothing changes then);
        a journal that cannot be restarted refuses appends until the next compaction.
        """
        if self.store is None or self.journal is None:
            return
        if self._compact_handle is not None:
            self._compact_handle.cancel()
            self._compact_handle = None
        generation = self._claim()
        start = time.perf_counter()
        with _collector_held():
            data = self._snapshot(generation)
            body = self.store.encode(data)
            del data
        self._state_dir_lost()
        with self._counted_write():
            self._write(body, generation)
        if self.state_dir is not None:
            self.state_dir.remember()
        self._last_compaction = time.perf_counter() - start
        self._adopt(generation, body, None, [])

    def _claim(self) -> int:
        """A generation number above every one in use or being written."""
        self._claimed = max(self._claimed, self.generation) + 1
        return self._claimed

    def _write(self, body: bytes, generation: int) -> bool:
        """Write checkpoint ``generation`` unless a newer one was written meanwhile (any thread;
        one write at a time). Raises ``CheckpointError``."""
        assert self.store is not None
        with self._write_lock:
            if generation <= self._written:
                return False
            self.store.write(body)
            self._written = generation
            return True

    def _adopt(
        self, generation: int, body: bytes, folded: dict[str, int] | None, carried: list[Op]
    ) -> None:
        """Checkpoint ``generation``, its data encoded as ``body`` (``folded``: its ``FOLDED``
        entry), is written: the journal starts over with the ``carried`` decisions, made after
        that data was taken."""
        assert self.journal is not None
        self.generation = generation
        self._base, self._folded = body, folded
        self.records = carried
        try:
            self.journal.reset(generation, carried)
        except JournalError as exc:
            self.log.error("decisions will fail until the journal can be restarted: %s", exc)

    def set_base(self, data: dict[str, Any] | None) -> None:
        """The checkpoint ``data`` the journal continues (None: nothing durable yet). It is kept
        encoded: one object for the garbage collector to skip, not a copy of the whole state
        to walk."""
        if data is None:
            self._base, self._folded = None, None
        else:
            self._base, self._folded = canonical_json(data), data.get(FOLDED)

    def base(self) -> dict[str, Any] | None:
        """The checkpoint data the journal continues, decoded (None: nothing durable yet)."""
        return None if self._base is None else cast(dict[str, Any], json.loads(self._base))

    def journal_start(self, generation: int) -> int | None:
        """Where the replay of the journal of ``generation`` starts over the loaded checkpoint:
        0 for the checkpoint's own journal, the records it folded for the journal it continues
        (a fold that had not replaced that journal yet), None for a stale journal."""
        if generation == self.generation and (self._base is not None or generation == 0):
            return 0
        folded = self._folded
        if isinstance(folded, dict) and folded.get("generation") == generation:
            count = folded.get("records")
            if isinstance(count, int) and not isinstance(count, bool) and count >= 0:
                return count
        return None

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
                self._compact_logged()
            return
        urgent = full or journal.broken is not None
        handle = self._compact_handle
        if not urgent:
            idle = self._last_compaction * IDLE_COMPACT_FACTOR
            self._idle_at = loop.time() + min(IDLE_COMPACT_MAX, max(IDLE_COMPACT_MIN, idle))
            if handle is None:  # else the armed timer waits on until then (see its callback)
                self._compact_urgent = False
                self._compact_handle = loop.call_at(self._idle_at, self._compact_in_background)
            return
        if handle is not None:
            if self._compact_urgent:
                return
            handle.cancel()
        self._compact_urgent = True
        self._compact_handle = loop.call_later(COMPACT_DELAY, self._compact_in_background)

    def _compact_in_background(self) -> None:
        """Timer: fold once the journal is full or broken, or the plugin idle."""
        self._compact_handle = None
        loop = asyncio.get_running_loop()
        if not self._compact_urgent and loop.time() + IDLE_SLACK < self._idle_at:
            # decisions came since it was armed: idle is counted from the last one
            self._compact_handle = loop.call_at(self._idle_at, self._compact_in_background)
            return
        self.start_fold()

    def start_fold(self) -> asyncio.Task[None] | None:
        """Start folding the journal into a checkpoint beside the requests (in the running
        event loop); its task, or None when a fold is running already or a batch is open (it
        ends with a full checkpoint)."""
        if self._fold is not None or self._holding():
            return None
        self._fold = asyncio.get_running_loop().create_task(self._fold_journal())
        return self._fold

    def _compact_logged(self) -> None:
        try:
            self.compact()
        except CheckpointError as exc:
            self.log.error("checkpoint compaction failed, journal keeps growing: %s", exc)

    async def _fold_journal(self) -> None:
        """Fold the journal into a new checkpoint, the file written by the worker thread while
        requests go on (see the module docs)."""
        try:
            written = await self._write_fold()
        except CheckpointError as exc:
            self.log.error("checkpoint compaction failed, journal keeps growing: %s", exc)
            written = None
        finally:
            self._fold = None
        journal = self.journal
        if written is None or journal is None:
            return
        generation, body, entry, based_on = written
        folded = entry["records"]
        if (
            self.generation != based_on  # a full checkpoint was written meanwhile
            or len(self.records) < folded
            or not journal.is_open
            or self._holding()
        ):
            return
        self._adopt(generation, body, entry, self.records[folded:])
        if self.records:  # decisions came meanwhile: fold them too, when full or idle
            self.schedule_compaction()

    async def _write_fold(self) -> tuple[int, bytes, dict[str, int], int] | None:
        """Take the state in one step, then encode and write it from the worker thread;
        returns (generation, the encoded data, its ``FOLDED`` entry, generation folded) once
        written, None when a newer checkpoint won.

        The copy is taken in one step (it must be one point in the sequence of decisions); the
        worker encodes it in pieces of 0.2 ms, letting the event loop's thread have the GIL
        between them (``steps.beside_loop``), so a request waits for one piece at most. The
        collector stays off until the copy is encoded and freed (it has no cycles)."""
        assert self.store is not None
        start = time.perf_counter()
        based_on, folded = self.generation, len(self.records)
        generation = self._claim()
        loop = asyncio.get_running_loop()
        with _collector_held():
            data = self._snapshot(generation)
            entry = data[FOLDED] = {"generation": based_on, "records": folded}
            encode = functools.partial(beside_loop, self.store.encode_steps(data))
            del data
            body = await loop.run_in_executor(self._writer_pool(), encode)
        with self._counted_write():
            written = await loop.run_in_executor(self._writer_pool(), self._write, body, generation)
        self._last_compaction = time.perf_counter() - start
        return (generation, body, entry, based_on) if written else None

    def schedule_export(self, engine: Engine) -> None:
        """Rewrite the kubelet-format files soon (at once outside an event loop): on a timer,
        then beside the requests (:meth:`_export_beside`)."""
        if not self.kubelet_state_path or self._follows_running_export(engine):
            return
        if self._export_handle is not None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.export(engine)
            return
        delay = max(EXPORT_DELAY, self._last_export * IDLE_COMPACT_FACTOR)
        self._export_handle = loop.call_later(delay, self._export_in_background)

    def _follows_running_export(self, engine: Engine) -> bool:
        """Remember ``engine`` as the one to export; True (and another export is due after it)
        when an export is running now."""
        self._export_engine = engine
        if self._exporting is None:
            return False
        self._export_again = True
        return True

    def _export_in_background(self) -> None:
        self._export_handle = None
        if self._export_engine is not None:
            self.start_export(self._export_engine)

    @property
    def export_pending(self) -> bool:
        """True while an export is armed or running."""
        return self._export_handle is not None or self._exporting is not None

    def start_export(self, engine: Engine) -> asyncio.Task[None] | None:
        """Start writing the kubelet-format files of ``engine`` beside the requests (in the
        running event loop); its task, or None when one is running already (it is followed
        by another) or no export is configured."""
        if not self.kubelet_state_path or self._follows_running_export(engine):
            return None
        self._exporting = asyncio.get_running_loop().create_task(self._export_beside())
        return self._exporting

    async def _export_beside(self) -> None:
        """The export without holding the event loop for more than a short step: the
        managers' state is taken in one step, the files are encoded in short ones and written
        by the worker thread."""
        engine = self._export_engine
        assert self.kubelet_state_path and engine is not None
        start = time.perf_counter()
        try:
            cpu, memory = _kubelet_states(engine)
            files = await stepwise(kubelet_files_steps(cpu, memory), pause=BACKGROUND_PAUSE)
            write = functools.partial(self._write_export, self.kubelet_state_path, files)
            await asyncio.get_running_loop().run_in_executor(self._writer_pool(), write)
        except (OSError, ValueError) as exc:
            self.log.warning("kubelet-format export to %s failed: %s", self.kubelet_state_path, exc)
        finally:
            self._exporting = None
            self._last_export = time.perf_counter() - start
        latest = self._export_engine
        if self._export_again and latest is not None:  # changes came meanwhile
            self._export_again = False
            self.schedule_export(latest)

    def export(self, engine: Engine) -> None:
        """Write ``cpu_manager_state``/``memory_manager_state`` to ``kubelet_state_path`` at
        once."""
        self._export_handle = None
        if not self.kubelet_state_path:
            return
        start = time.perf_counter()
        try:
            files = finish(kubelet_files_steps(*_kubelet_states(engine)))
            self._write_export(self.kubelet_state_path, files)
        except (OSError, ValueError) as exc:
            self.log.warning("kubelet-format export to %s failed: %s", self.kubelet_state_path, exc)
        self._last_export = time.perf_counter() - start

    def _write_export(self, directory: str, files: dict[str, bytes]) -> None:
        """Write the kubelet-format ``files`` (any thread; one export write at a time)."""
        with self._export_lock:
            flusher = self.store.flusher if self.store is not None else None
            write_owned(directory, files, 0o644, flusher=flusher)

    def _writer_pool(self) -> ThreadPoolExecutor:
        if self._writer is None:
            self._writer = ThreadPoolExecutor(1, thread_name_prefix="nri-plrm-checkpoint")
        return self._writer

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
        for task in (self._fold, self._exporting):
            if task is not None and not task.get_loop().is_closed():
                task.cancel()
        try:
            self.compact()
        except CheckpointError as exc:
            self.log.error("final checkpoint failed; the journal keeps the decisions: %s", exc)
        if self.journal is not None:
            self.journal.close()
        if self._writer is not None:
            self._writer.shutdown(wait=True)
            self._writer = None

    def halt(self) -> None:
        """Stop as a killed plugin stops, for a restart in the same process (tests): no timer
        fires later and no fold or export finishes (a write the worker thread has begun
        completes, as a killed process's last rename did or did not happen), and the journal
        is closed without a final checkpoint."""
        for handle in (self._compact_handle, self._export_handle):
            if handle is not None:
                handle.cancel()
        self._compact_handle = self._export_handle = None
        for task in (self._fold, self._exporting):
            if task is not None and not task.get_loop().is_closed():
                task.cancel()
        if self._writer is not None:
            self._writer.shutdown(wait=True, cancel_futures=True)
            self._writer = None
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


def _kubelet_states(engine: Engine) -> tuple[CPUManagerState, MemoryManagerState]:
    """The kubelet-format views of the engine's managers (copies: later decisions do not
    change them)."""
    # The exporter's protocol declares machine_state as a plain attribute, which mypy treats
    # as invariant against the manager's dict.
    return (
        cpu_state_from_manager(engine.cpu_manager),
        memory_state_from_manager(cast(Any, engine.memory_manager)),
    )


@contextmanager
def _collector_held() -> Iterator[None]:
    """The cyclic garbage collector held off while the state is copied and encoded: the copy
    (tens of thousands of dicts and lists, no cycles) is freed by reference counting when the
    block ends, so no collection walks it or promotes it to an older generation (with it, a
    compaction took 10-15 ms instead of 5-6 in the benchmark's plugin)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
