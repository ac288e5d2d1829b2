"""``NodeLedger``: the node's state in one place.

It owns the engine, the tables of pods and containers (:mod:`.tables`), the replayable
transitions that change them (:mod:`.transitions`), their durability (:mod:`.persistence`) and
the read model other threads use (:mod:`.read_model`). ``Plugin`` translates NRI events into
the decisions below; ``nri-plrm state`` loads a ledger read-only; ``simulate`` drives one
through the plugin.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from nri_plrm.base.cpuset import EMPTY, CPUSet
from nri_plrm.checkpoint.journal import JournalError
from nri_plrm.checkpoint.store import CheckpointError, CheckpointStore
from nri_plrm.engine.explain import explain_rejection
from nri_plrm.engine.facade import Changes, Engine
from nri_plrm.engine.readmit import ReadmitRefused
from nri_plrm.engine.spec import (
    AdmissionError,
    ContainerAssignment,
    ContainerSpec,
    MemoryBlock,
    PodSpec,
)
from nri_plrm.engine.topology_manager import POLICY_NONE
from nri_plrm.ledger.decision import Decision
from nri_plrm.ledger.observer import LedgerObserver
from nri_plrm.ledger.persistence import Persistence
from nri_plrm.ledger.read_model import ReadModel
from nri_plrm.ledger.tables import ContainerKey, PodRecord, Tables
from nri_plrm.ledger.transitions import Op, Transitions
from nri_plrm.ledger.view import PodView
from nri_plrm.translate.nri_to_pod import PodIntent

LOAD_ATTEMPTS = 5
"""Times :meth:`NodeLedger.load` re-reads when a running plugin compacts between its reads."""


class NotSavedError(Exception):
    """A decision could not be made durable; it was undone (the request must fail)."""


class NodeLedger:
    """The engine, the pod and container tables, their journal and checkpoint, the export.

    ``store`` (optional) keeps the state (the decision journal lives beside its file);
    ``kubelet_state_path`` (optional) is a directory where the state is exported in the
    kubelet's ``cpu_manager_state``/``memory_manager_state`` formats after every change;
    ``observer`` (optional, the metrics) counts decisions and checkpoint writes; ``on_change``
    (optional) is called after every allocation change (it must only note it, e.g. the
    NodeResourceTopology exporter's ``mark_dirty``).
    """

    def __init__(
        self,
        engine: Engine,
        *,
        store: CheckpointStore | None = None,
        kubelet_state_path: str | None = None,
        observer: LedgerObserver | None = None,
        logger: logging.Logger | None = None,
        on_change: Callable[[], None] | None = None,
    ) -> None:
        self.log = logger or logging.getLogger("nri_plrm.ledger")
        self.observer = observer
        self.on_change = on_change
        self._state = Transitions(engine)
        self._read_model = ReadModel()
        self._publish_thread: int | None = None
        self._batch = False
        self.decisions = 0
        """Decisions committed since start (a counter: it tells whether any was made lately)."""
        self.persistence = Persistence(
            self.snapshot,
            store,
            kubelet_state_path=kubelet_state_path,
            observer=observer,
            logger=self.log,
            holding=lambda: self._batch,
        )

    # ----------------------------------------------------------------- lookups

    @property
    def engine(self) -> Engine:
        """The allocation engine (replaced when state is restored)."""
        return self._state.engine

    @property
    def tables(self) -> Tables:
        """The pod and container tables (read them; change them through the decisions)."""
        return self._state.tables

    def pod(self, uid: str) -> PodRecord | None:
        """The tracked pod with this uid, or None."""
        return self._state.tables.pods.get(uid)

    def container(self, cid: str) -> ContainerKey | None:
        """The (pod uid, name) of the tracked container with this id, or None."""
        return self._state.tables.ids.get(cid)

    def assignment(self, key: ContainerKey) -> ContainerAssignment | None:
        """A tracked container's current assignment, or None."""
        return self._state.engine.assignment(*key)

    def assignments(self, keys: Iterable[ContainerKey]) -> Changes:
        """The current assignment of each of these containers that is still tracked."""
        assignment = self._state.engine.assignment
        return {key: a for key in keys if (a := assignment(*key)) is not None}

    # ----------------------------------------------------------------- in-memory state

    def snapshot(self, generation: int | None = None) -> dict[str, Any]:
        """The checkpoint ``data``: the engine's snapshot and the tables."""
        gen = self.persistence.generation if generation is None else generation
        return {"engine": self.engine.snapshot(), "plugin": self.tables.snapshot(gen)}

    def restore(self, data: Mapping[str, Any]) -> None:
        """Adopt checkpoint ``data`` (unknown keys ignored); raises ValueError, KeyError,
        TypeError or AttributeError when it cannot be used on this machine and configuration."""
        engine = Engine.restore(self.engine.topology, self.engine.config, data["engine"])
        tables_data = data.get("plugin", {})
        tables = Tables.restore(tables_data, engine)
        self._state = Transitions(engine, tables)
        self.persistence.generation = int(tables_data.get("generation", 0))
        self.persistence.set_base(dict(data))
        self.persistence.records = []
        self._read_model.rebuild(engine, tables)

    def _reset(self) -> None:
        self._state = Transitions(Engine(self.engine.topology, self.engine.config))
        self.persistence.set_base(None)
        self.persistence.records = []
        self._read_model.rebuild(self.engine, self.tables)

    # ----------------------------------------------------------------- disk

    def open(self) -> str | None:
        """Start-up: :meth:`load`, then write a fresh checkpoint and start an empty journal;
        returns the problem text, if any.

        Raises ``CheckpointError``/``OSError`` when the fresh checkpoint cannot be written (the
        plugin could not keep its promise of durable decisions).
        """
        problem = self.load()
        store = self.persistence.store
        if store is not None:
            self.compact()
            self.log.info(
                "restored %d pods and %d containers from %s",
                len(self.tables.pods),
                len(self.tables.ids),
                store.directory,
            )
        return problem

    def load(self) -> str | None:
        """Read the durable state (checkpoint + journal) without writing anything but the
        quarantine of a damaged file; returns the problem text, if any.

        A missing checkpoint leaves the ledger empty; a corrupt one (or a damaged journal) is
        kept aside, logged and counted, and Synchronize then adopts what the runtime reports.
        """
        journal = self.persistence.journal
        if journal is None:
            return None
        for _ in range(LOAD_ATTEMPTS):
            problem = self._load_checkpoint()
            generation, records, damaged = journal.read()
            if generation is not None and generation > self.persistence.generation and not problem:
                continue  # a running plugin compacted between the two reads: read both again
            break
        if damaged is not None:
            self.persistence.unusable("journal", damaged)
            problem = problem or damaged
        if problem is None:
            self.replay_journal(generation, records)
        return problem

    def replay_journal(self, generation: int | None, records: Sequence[Op]) -> None:
        """Replay journal ``records`` over the loaded checkpoint when the journal belongs to
        its generation, or to the one it folded (from the first record it does not hold); a
        journal of another generation is stale and ignored."""
        if generation is None:
            return
        p = self.persistence
        start = p.journal_start(generation)
        if start is None:
            self.log.warning(
                "journal for checkpoint generation %d, the checkpoint is %d: ignored",
                generation,
                p.generation,
            )
            return
        for n, op in enumerate(records[start:], start + 1):
            try:
                self._state.replay(op)
            except (AdmissionError, AttributeError, KeyError, TypeError, ValueError) as exc:
                problem = f"journal record {n} ({op.get('op')!r}) not replayed: {exc}"
                p.unusable("journal", problem)
                break
            p.records.append(op)
        self._state.forget_changes()
        self._read_model.rebuild(self.engine, self.tables)

    def _load_checkpoint(self) -> str | None:
        store = self.persistence.store
        assert store is not None
        self._reset()
        result = store.load()
        if result.problem is not None:
            self.persistence.unusable(result.problem.kind, str(result.problem))
            return str(result.problem)
        if result.data is None:
            return None
        try:
            self.restore(result.data)
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            self._reset()
            problem = f"checkpoint {store.path}: unusable contents: {exc}"
            self.persistence.unusable("bad-contents", problem)
            return problem
        broken = self.engine.verify()
        if broken:
            self._reset()
            problem = f"checkpoint {store.path}: inconsistent: {'; '.join(broken[:3])}"
            self.persistence.unusable("inconsistent", problem)
            return problem
        return None

    def compact(self) -> None:
        """Write the full state as a new checkpoint generation (see ``Persistence.compact``)."""
        self.persistence.compact()

    def close(self) -> None:
        """Fold the journal into a checkpoint and close it (clean shutdown)."""
        self.persistence.close()

    def export_kubelet_state(self) -> None:
        """Write the kubelet-format files now."""
        self.persistence.export(self.engine)

    # ----------------------------------------------------------------- decisions

    def admit(self, uid: str, sandbox_id: str, intent: PodIntent, spec: PodSpec | None) -> Decision:
        """Admit a pod (whole when ``spec`` is given). Raises ``AdmissionError`` (nothing
        changed) or :class:`NotSavedError` (undone)."""
        try:
            record, changes, op = self._state.admit(uid, sandbox_id, intent, spec)
        except AdmissionError as err:
            self._count_admission(err.reason)
            raise
        self.commit(op)
        self._count_admission(None)
        return Decision(record, None, changes)

    def _count_admission(self, reason: str | None) -> None:
        # The kubelet's none policy admits without the topology manager: nothing to count.
        if self.observer is not None and self.engine.topology_manager.policy != POLICY_NONE:
            self.observer.record_admission(reason)

    def move_sandbox(self, uid: str, sandbox_id: str) -> None:
        """The pod lives on in a new sandbox. Raises :class:`NotSavedError`."""
        self.commit(self._state.move_sandbox(uid, sandbox_id))

    def leave_unmanaged(self, uid: str, sandbox_id: str, intent: PodIntent) -> None:
        """Track an existing pod that cannot be placed. Raises :class:`NotSavedError`."""
        self.commit(self._state.leave_unmanaged(uid, sandbox_id, intent))

    def adopt_pod(
        self,
        uid: str,
        sandbox_id: str,
        intent: PodIntent,
        claimed: CPUSet,
        avoid: CPUSet,
        mems: CPUSet = EMPTY,
    ) -> PodRecord:
        """Admit a running pod keeping the CPUs its containers hold, or the memory nodes its
        shared containers run on (issues 12, 28). Raises ``AdoptionError`` (nothing changed) or
        :class:`NotSavedError`."""
        record, op = self._state.adopt_pod(uid, sandbox_id, intent, claimed, avoid, mems)
        self.commit(op)
        self._count_admission(None)
        return record

    def adopt(
        self, uid: str, name: str, cid: str, cspec: ContainerSpec, cpus: CPUSet, mems: CPUSet
    ) -> ContainerAssignment:
        """Record a running container with the exclusive cpus it runs on (issue 12). Raises
        ``AdoptionError`` (nothing changed) or :class:`NotSavedError`."""
        assignment, op = self._state.adopt(uid, name, cid, cspec, cpus, mems)
        self.commit(op)
        if self.observer is not None:
            self.observer.record_placement(assignment)
        return assignment

    def node_shared(self, uid: str, name: str, cid: str) -> ContainerAssignment:
        """Record a running container that cannot get its allocation in the node shared pool
        (issue 12). Raises :class:`NotSavedError`."""
        assignment, op = self._state.node_shared(uid, name, cid)
        self.commit(op)
        return assignment

    def place(self, uid: str, name: str, cid: str, cspec: ContainerSpec) -> Decision:
        """Place a container. Raises ``AdmissionError`` or :class:`NotSavedError`."""
        try:
            assignment, changes, op = self._state.place(uid, name, cid, cspec)
        except AdmissionError as err:
            if self.observer is not None:
                self.observer.record_placement_error(err.reason)
            raise
        self.commit(op)
        if self.observer is not None:
            self.observer.record_placement(assignment)
        return Decision(self._state.tables.pods[uid], assignment, changes)

    def stop(self, key: ContainerKey) -> Changes:
        """The container exited."""
        changes, op = self._state.stop(*key)
        self.commit(op, release=True)
        return changes

    def remove_container(self, cid: str) -> Changes:
        """Forget a container; the containers whose pools grew."""
        changes, op = self._state.remove_container(cid)
        self.commit(op, release=True)
        return changes

    def remove_pod(self, uid: str) -> tuple[PodRecord | None, Changes]:
        """Forget a pod; the containers whose pools grew."""
        record, changes, op = self._state.remove_pod(uid)
        self.commit(op, release=True)
        return record, changes

    def resize(self, key: ContainerKey, new: ContainerSpec) -> Decision:
        """Resize a container in place. Raises ``AdmissionError`` (nothing changed; the caller
        counts the refusal) or :class:`NotSavedError` (undone)."""
        assignment, changes, op = self._state.resize(*key, new)
        self.commit(op)
        return Decision(self._state.tables.pods[key[0]], assignment, changes)

    def resize_pod(self, uid: str, intent: PodIntent) -> Decision:
        """Resize a pod budget in place. Raises ``AdmissionError`` or :class:`NotSavedError`."""
        changes, op = self._state.resize_pod(uid, intent)
        self.commit(op)
        return Decision(self._state.tables.pods[uid], None, changes)

    def readmit(self, uid: str, kind: str, name: str, cid: str, cspec: ContainerSpec) -> Decision:
        """Re-admit an NRI-only pod as classic ("promote") or as its budget ("demote") and
        place its container ``name`` (id ``cid``), as one decision. Raises ``ReadmitRefused``
        (nothing changed; a refused container comes with its cause) or
        :class:`NotSavedError` (undone)."""
        try:
            done, op = self._state.readmit(uid, kind, (name, cid, cspec), self._explain)
        except ReadmitRefused as err:
            if err.placing and self.observer is not None:
                self.observer.record_placement_error(err.reason)
            raise
        self.commit(op)
        decision = Decision(self._state.tables.pods[uid], done.assignment, done.changes)
        if self.observer is not None:
            self.observer.record_placement(decision.placed)
        return decision

    def _explain(self, pod: PodSpec, err: AdmissionError, container: ContainerSpec) -> str:
        return explain_rejection(self.engine, pod, err, container)

    def commit(self, op: Op, *, release: bool = False) -> None:
        """Make a decision durable before its reply. A failed write undoes a decision and raises
        :class:`NotSavedError`; a release cannot be undone, so it stays in memory and the journal
        is marked broken, which makes the next write a full checkpoint that includes it."""
        self.decisions += 1
        p = self.persistence
        if p.journal is None:
            self._update_read_model_and_export()
            return
        p.records.append(op)
        if self._batch:
            return
        try:
            p.save(op)
        except (JournalError, CheckpointError) as exc:
            if not release:
                p.records.pop()
                self._revert()
                raise NotSavedError(f"decision not applied: {exc}") from exc
            p.mark_broken(f"a release was not written: {exc}")
            self.log.error("release kept in memory until the next checkpoint: %s", exc)
        self._update_read_model_and_export()
        p.schedule_compaction()

    @property
    def in_batch(self) -> bool:
        """True inside :meth:`batch`."""
        return self._batch

    @contextmanager
    def batch(self) -> Iterator[None]:
        """Decisions inside are written at once, as one checkpoint at the end; when that fails
        they are undone and :class:`NotSavedError` is raised (Synchronize)."""
        mark = len(self.persistence.records)
        self._batch = True
        try:
            yield
        finally:
            self._batch = False
        try:
            self.compact()
        except CheckpointError as exc:
            self.persistence.records = self.persistence.records[:mark]
            self._revert()
            raise NotSavedError(str(exc)) from exc
        self._update_read_model_and_export()

    def _revert(self) -> None:
        """Back to the last durable state: the checkpoint plus the journaled records."""
        records = self.persistence.records
        base = self.persistence.base()
        if base is not None:
            self.restore(base)
        else:
            self._reset()
        for op in records:
            self._state.replay(op)
        self.persistence.records = records
        self._state.forget_changes()
        self._read_model.rebuild(self.engine, self.tables)

    def _update_read_model_and_export(self) -> None:
        """Publish the changed pods to the read model and schedule the export: at once, or,
        inside a running event loop, once when the current step ends (after the reply went
        out; the decisions of one request are published together)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self._publish()
            return
        if self._publish_thread is None:
            self._publish_thread = threading.get_ident()
            loop.call_soon(self._publish_pending)

    def _publish_pending(self) -> None:
        if self._publish_thread is not None:
            self._publish()

    def _publish(self) -> None:
        self._publish_thread = None
        state = self._state
        self._read_model.rebuild(
            state.engine, state.tables, state.changed_pods, state.followed_pool
        )
        state.forget_changes()
        self.persistence.schedule_export(state.engine)
        if self.on_change is not None:
            self.on_change()

    # ----------------------------------------------------------------- reads (any thread)

    def pods(self) -> Sequence[PodView]:
        """Every pod with its containers and assignments: an immutable snapshot, safe to read
        from any thread (the PodResources server's workers, ``nri-plrm state``). Other threads
        see each request's decisions once its reply is sent; the loop's own thread at once."""
        if self._publish_thread == threading.get_ident():
            self._publish()
        return self._read_model.pods()

    def allocatable_cpus(self) -> CPUSet:
        """CPUs the plugin may hand out: online CPUs minus the reserved ones."""
        return self.engine.allocatable().cpus

    def allocatable_memory(self) -> Sequence[MemoryBlock]:
        """Allocatable bytes per NUMA node and memory type."""
        return self.engine.allocatable().memory
