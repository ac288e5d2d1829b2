"""The NRI handlers: pods and containers in, pinned cpusets out, every decision checkpointed.

``Plugin`` implements the wire layer's ``Handlers`` contract (``nri_plrm.nri.stub``). It turns
NRI events into engine calls (whole-pod mode when a ``PodSpecSource`` knows the pod, NRI-only
inference otherwise, see ``docs/design.md``), makes every decision durable before the reply
that applies it, answers with adjustments and updates, and sends pool growth after removals
with an asynchronous ``UpdateContainers`` (never from inside a handler).

Durability: the full state (engine snapshot + the plugin's tables) is written with the
``CheckpointStore``; each decision after it is appended to a checksummed decision journal in
the same directory (one small write; a background thread syncs it, no reply waits for the disk,
see ``docs/design.md`` §4), and the journal is folded into a
new full checkpoint in the background once it grows (and after every Synchronize). A restart
loads the checkpoint and replays the journal through the same (deterministic) engine calls.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, cast

from nri_plrm.checkpoint.journal import DecisionJournal, JournalError
from nri_plrm.checkpoint.kubelet import (
    cpu_state_from_manager,
    memory_state_from_manager,
    write_kubelet_state,
)
from nri_plrm.checkpoint.store import CheckpointError, CheckpointStore
from nri_plrm.cpuset import CPUSet
from nri_plrm.engine.explain import explain_rejection, rejection_text
from nri_plrm.engine.facade import Engine
from nri_plrm.engine.spec import (
    AdmissionError,
    AssignmentType,
    ContainerAssignment,
    ContainerSpec,
    MemoryBlock,
    PodSpec,
)
from nri_plrm.engine.spec_json import (
    container_from_dict,
    container_to_dict,
    spec_from_dict,
    spec_to_dict,
)
from nri_plrm.ledger.view import ContainerView, PodView
from nri_plrm.metrics import Metrics
from nri_plrm.nri.stub import NRIError
from nri_plrm.podsource.base import PodEventSink, PodSpecSource
from nri_plrm.proto import nri_api_pb2 as api
from nri_plrm.translate.nri_to_pod import (
    IntentError,
    PodIntent,
    container_spec,
    intent_from_dict,
    intent_to_dict,
    pod_identity,
    pod_intent,
)

CHECKPOINT_LAYOUT = 1
"""Version of the plugin's part of the checkpoint ``data`` (the store versions the file)."""
COMPACT_RECORDS = 1000
"""Journal records after which the journal is folded into a full checkpoint."""
COMPACT_BYTES = 4 << 20
COMPACT_DELAY = 0.05
"""Seconds after the decision that filled the journal before compacting (off the reply path)."""
LOAD_ATTEMPTS = 5
"""Times :meth:`Plugin.load` re-reads when a running plugin compacts between its two reads."""
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

Changes = Mapping[tuple[str, str], ContainerAssignment]
"""Other containers whose assignment changed, by (pod uid, container name)."""
Op = dict[str, Any]
"""One journal record: a decision's inputs, replayable through the engine."""

UpdateSender = Callable[[list[api.ContainerUpdate]], Awaitable[Any]]
"""Sends an unsolicited ``UpdateContainers`` (the stub's ``update_containers``)."""


@dataclass
class _Pod:
    intent: PodIntent
    sandbox_id: str
    spec: PodSpec | None = None
    """The full spec in whole-pod mode; None in NRI-only mode."""
    managed: bool = True
    """False for an existing pod that could not be placed at adoption (left alone)."""
    containers: dict[str, str] = field(default_factory=dict)
    """Container name -> container id, in creation order."""

    @property
    def uid(self) -> str:
        return self.intent.spec.uid

    @property
    def pod_spec(self) -> PodSpec:
        return self.spec if self.spec is not None else self.intent.spec

    def label(self) -> str:
        return f"{self.intent.spec.namespace}/{self.intent.spec.name}"


class Plugin:
    """NRI handlers deciding CPU and memory placement through the allocation engine.

    ``engine`` makes the decisions; ``store`` (optional) persists them (the decision journal
    lives beside its file); ``pod_specs`` (optional) gives full pod specs for the kubelet-exact
    whole-pod mode; ``metrics`` (optional) counts them; ``kubelet_state_path`` (optional) is a
    directory where the node state is exported in the kubelet's ``cpu_manager_state``/
    ``memory_manager_state`` formats after every change; ``events`` (optional) receives the
    kubelet's rejection reason and message as pod Events; ``on_change`` (optional) is called
    after every allocation change (it must only note it, e.g. the NodeResourceTopology
    exporter's ``mark_dirty``).
    """

    def __init__(
        self,
        engine: Engine,
        *,
        store: CheckpointStore | None = None,
        pod_specs: PodSpecSource | None = None,
        metrics: Metrics | None = None,
        logger: logging.Logger | None = None,
        kubelet_state_path: str | None = None,
        lookup_timeout: float = 0.5,
        events: PodEventSink | None = None,
        on_change: Callable[[], None] | None = None,
    ) -> None:
        self.engine = engine
        self.on_change = on_change
        self.store = store
        self.pod_specs = pod_specs
        self.metrics = metrics
        self.log = logger or logging.getLogger("nri_plrm.plugin")
        self.kubelet_state_path = kubelet_state_path
        self.lookup_timeout = lookup_timeout
        self.events = events
        self.runtime = ("", "")
        self.journal = (
            DecisionJournal(store.directory, flusher=store.flusher) if store is not None else None
        )
        self._pods: dict[str, _Pod] = {}
        self._ids: dict[str, tuple[str, str]] = {}
        self._generation = 0
        self._base: dict[str, Any] | None = None
        self._records: list[Op] = []
        self._batch = False
        self._compact_handle: asyncio.TimerHandle | None = None
        self._last_compaction = 0.0
        self._compact_urgent = False
        self._sender: UpdateSender | None = None
        self._pending: set[tuple[str, str]] = set()
        self._flush_task: asyncio.Task[None] | None = None
        self._touched: set[str] = set()
        self._node_shared: set[tuple[str, str]] = set()
        self._carry: dict[tuple[str, str], ContainerAssignment] = {}
        self._export_handle: asyncio.TimerHandle | None = None
        self._last_export = 0.0
        self._views: dict[str, PodView] = {}
        self._view: tuple[PodView, ...] = ()

    # ----------------------------------------------------------------- wiring and state

    def attach(self, sender: UpdateSender | None) -> None:
        """Set the function that sends unsolicited updates (the stub's ``update_containers``)."""
        self._sender = sender

    def state(self, generation: int | None = None) -> dict[str, Any]:
        """The checkpoint ``data``: the engine's snapshot and the plugin's tables."""
        pods = {
            uid: {
                "intent": intent_to_dict(p.intent),
                "sandbox_id": p.sandbox_id,
                "spec": None if p.spec is None else spec_to_dict(p.spec),
                "managed": p.managed,
                "containers": [[name, cid] for name, cid in p.containers.items()],
            }
            for uid, p in self._pods.items()
        }
        return {
            "engine": self.engine.snapshot(),
            "plugin": {
                "layout": CHECKPOINT_LAYOUT,
                "generation": self._generation if generation is None else generation,
                "pods": pods,
            },
        }

    def load_state(self, data: Mapping[str, Any]) -> None:
        """Adopt checkpoint ``data`` (unknown keys ignored); raises ValueError, KeyError,
        TypeError or AttributeError when it cannot be used on this machine and configuration."""
        engine = Engine.restore(self.engine.topology, self.engine.config, data["engine"])
        plugin = data.get("plugin", {})
        pods: dict[str, _Pod] = {}
        ids: dict[str, tuple[str, str]] = {}
        for uid, entry in plugin.get("pods", {}).items():
            spec = entry.get("spec")
            pod = _Pod(
                intent=intent_from_dict(entry["intent"]),
                sandbox_id=str(entry.get("sandbox_id", "")),
                spec=None if spec is None else spec_from_dict(spec),
                managed=bool(entry.get("managed", True)),
            )
            for name, cid in entry.get("containers", []):
                pod.containers[str(name)] = str(cid)
                ids[str(cid)] = (uid, str(name))
            pods[uid] = pod
        self.engine = engine
        self._pods = pods
        self._ids = ids
        self._generation = int(plugin.get("generation", 0))
        self._base = dict(data)
        self._records = []
        self._touched.clear()
        self._node_shared = set()
        for key in ids.values():
            self._track(key, self.engine.assignment(*key))
        self._refresh()

    def _reset(self) -> None:
        self.engine = Engine(self.engine.topology, self.engine.config)
        self._pods = {}
        self._ids = {}
        self._node_shared = set()
        self._base = None
        self._records = []
        self._views = {}
        self._view = ()

    def restore(self) -> str | None:
        """Start-up: :meth:`load`, then write a fresh checkpoint and start an empty journal;
        returns the problem text, if any.

        Raises ``CheckpointError``/``OSError`` when the fresh checkpoint cannot be written (the
        plugin could not keep its promise of durable decisions).
        """
        problem = self.load()
        if self.store is not None:
            self.compact()
            self.log.info(
                "restored %d pods and %d containers from %s",
                len(self._pods),
                len(self._ids),
                self.store.directory,
            )
        return problem

    def load(self) -> str | None:
        """Read the durable state (checkpoint + journal) without writing anything but the
        quarantine of a damaged file; returns the problem text, if any (``nri-plrm state``).

        A missing checkpoint leaves the plugin empty; a corrupt one (or a damaged journal) is
        kept aside, logged and counted, and Synchronize then adopts what the runtime reports.
        """
        if self.store is None or self.journal is None:
            return None
        for _ in range(LOAD_ATTEMPTS):
            problem = self._load_checkpoint()
            generation, records, damaged = self.journal.read()
            if generation is not None and generation > self._generation and problem is None:
                continue  # a running plugin compacted between the two reads: read both again
            break
        if damaged is not None:
            self._unusable("journal", damaged)
            problem = problem or damaged
        if problem is None:
            self.apply_journal(generation, records)
        return problem

    def apply_journal(self, generation: int | None, records: list[Op]) -> None:
        """Replay journal ``records`` over the loaded checkpoint when the journal belongs to
        its generation (a journal of another generation is stale and ignored)."""
        if generation is None:
            return
        if generation == self._generation and (self._base is not None or generation == 0):
            self._replay_all(records)
        else:
            self.log.warning(
                "journal for checkpoint generation %d, the checkpoint is %d: ignored",
                generation,
                self._generation,
            )

    def _load_checkpoint(self) -> str | None:
        assert self.store is not None
        self._reset()
        result = self.store.load()
        if result.problem is not None:
            self._unusable(result.problem.kind, str(result.problem))
            return str(result.problem)
        if result.data is None:
            return None
        try:
            self.load_state(result.data)
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            self._reset()
            problem = f"checkpoint {self.store.path}: unusable contents: {exc}"
            self._unusable("bad-contents", problem)
            return problem
        broken = self.engine.verify()
        if broken:
            self._reset()
            problem = f"checkpoint {self.store.path}: inconsistent: {'; '.join(broken[:3])}"
            self._unusable("inconsistent", problem)
            return problem
        return None

    def _unusable(self, kind: str, problem: str) -> None:
        self.log.error(
            "checkpoint unusable, rebuilding from the runtime: %s",
            problem,
            extra={"plrm": {"event": "checkpoint", "problem": kind}},
        )
        if self.metrics is not None:
            self.metrics.plugin_checkpoint_corrupt(kind)

    def _replay_all(self, records: list[Op]) -> None:
        for n, op in enumerate(records, 1):
            try:
                self._replay(op)
            except (AdmissionError, AttributeError, KeyError, TypeError, ValueError) as exc:
                self._unusable(
                    "journal", f"journal record {n} ({op.get('op')!r}) not replayed: {exc}"
                )
                break
            self._records.append(op)
        self._refresh()

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
        generation = self._generation + 1
        data = self.state(generation)
        start = time.perf_counter()
        try:
            self.store.save(data)
        except CheckpointError:
            self._checkpoint_metric(False, start)
            raise
        self._checkpoint_metric(True, start)
        self._last_compaction = time.perf_counter() - start
        self._generation = generation
        self._base = data
        self._records = []
        try:
            self.journal.reset(generation)
        except JournalError as exc:
            self.log.error("decisions will fail until the journal can be restarted: %s", exc)

    def _compact_later(self) -> None:
        self._compact_handle = None
        try:
            self.compact()
        except CheckpointError as exc:
            self.log.error("checkpoint compaction failed, journal keeps growing: %s", exc)

    def _maybe_compact(self) -> None:
        journal = self.journal
        if journal is None:
            return
        full = journal.count >= COMPACT_RECORDS or journal.size >= COMPACT_BYTES
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            if full or journal.broken:
                self._compact_later()
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
        self._compact_handle = loop.call_later(delay, self._compact_later)

    def _commit(self, op: Op, *, release: bool = False) -> None:
        """Make a decision durable before its reply. A failed write undoes a decision and fails
        the request; a release cannot be undone, so it stays in memory and the journal is marked
        broken, which makes the next write a full checkpoint that includes it."""
        if self.journal is None:
            self._publish()
            return
        self._records.append(op)
        if self._batch:
            return
        start = time.perf_counter()
        try:
            self._write(op)
        except (JournalError, CheckpointError) as exc:
            self._checkpoint_metric(False, start)
            if not release:
                self._records.pop()
                self._rebuild()
                raise NRIError(f"decision not applied: {exc}") from exc
            self.journal.broken = self.journal.broken or f"a release was not written: {exc}"
            self.log.error("release kept in memory until the next checkpoint: %s", exc)
        else:
            self._checkpoint_metric(True, start)
        self._publish()
        self._maybe_compact()

    def _write(self, op: Op) -> None:
        """Append ``op`` to the journal; when the journal is not usable (not opened yet, or a
        write failed before), write the whole state, which includes ``op``, as a checkpoint."""
        assert self.journal is not None
        if self.journal.is_open and self.journal.broken is None:
            self.journal.append(op)
        else:
            self.compact()

    def _rebuild(self) -> None:
        """Back to the last durable state: the checkpoint plus the journaled records."""
        records = self._records
        if self._base is not None:
            self.load_state(self._base)
        else:
            self._reset()
        for op in records:
            self._replay(op)
        self._records = records
        self._touched.clear()
        self._refresh()

    def _publish(self) -> None:
        self._refresh(self._touched)
        self._touched.clear()
        self._schedule_export()
        if self.on_change is not None:
            self.on_change()

    def _schedule_export(self) -> None:
        if not self.kubelet_state_path or self._export_handle is not None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.export_kubelet_state()
            return
        delay = max(EXPORT_DELAY, self._last_export * IDLE_COMPACT_FACTOR)
        self._export_handle = loop.call_later(delay, self.export_kubelet_state)

    def export_kubelet_state(self) -> None:
        """Write ``cpu_manager_state``/``memory_manager_state`` to ``kubelet_state_path``."""
        self._export_handle = None
        if not self.kubelet_state_path:
            return
        start = time.perf_counter()
        try:
            write_kubelet_state(
                self.kubelet_state_path,
                cpu_state_from_manager(self.engine.cpu_manager),
                # The exporter's protocol declares machine_state as a plain attribute, which
                # mypy treats as invariant against the manager's dict.
                memory_state_from_manager(cast(Any, self.engine.memory_manager)),
                flusher=self.store.flusher if self.store is not None else None,
            )
        except (OSError, ValueError) as exc:
            self.log.warning("kubelet-format export to %s failed: %s", self.kubelet_state_path, exc)
        self._last_export = time.perf_counter() - start

    def close(self) -> None:
        """Fold the journal into a checkpoint and close it (clean shutdown)."""
        try:
            self.compact()
        except CheckpointError as exc:
            self.log.error("final checkpoint failed; the journal keeps the decisions: %s", exc)
        if self.journal is not None:
            self.journal.close()

    # ----------------------------------------------------------------- state transitions
    # Each _do_* changes the engine and the plugin's tables, live and when replaying a journal.

    def _do_admit(self, uid: str, sandbox_id: str, intent: PodIntent, spec: PodSpec | None) -> _Pod:
        record = _Pod(intent=intent, sandbox_id=sandbox_id, spec=spec)
        if spec is not None:
            self.engine.admit_pod(spec)
        else:
            self.engine.admit_sandbox(intent.spec, intent.aggregate)
        self._pods[uid] = record
        self._touched.add(uid)
        return record

    def _do_sandbox(self, uid: str, sandbox_id: str) -> None:
        self._pods[uid].sandbox_id = sandbox_id

    def _do_unmanaged(self, uid: str, sandbox_id: str, intent: PodIntent) -> None:
        self._pods[uid] = _Pod(intent=intent, sandbox_id=sandbox_id, managed=False)
        self._touched.add(uid)

    def _do_place(
        self, uid: str, name: str, cid: str, cspec: ContainerSpec
    ) -> tuple[ContainerAssignment, Changes]:
        record = self._pods[uid]
        previous = record.containers.get(name)
        record.containers[name] = cid
        if previous is not None and previous != cid:
            self._ids.pop(previous, None)
        self._ids[cid] = (uid, name)
        try:
            assignment, found = self.engine.add_container(record.pod_spec, cspec)
        except AdmissionError:
            self._ids.pop(cid, None)
            del record.containers[name]
            if previous is not None and previous != cid:
                record.containers[name] = previous
                self._ids[previous] = (uid, name)
            raise
        self._track((uid, name), assignment)
        self._touched.add(uid)
        return assignment, found

    def _do_stop(self, uid: str, name: str) -> Changes:
        self._touched.add(uid)
        return self.engine.stop_container(uid, name)

    def _do_remove(self, cid: str) -> Changes:
        key = self._ids.pop(cid, None)
        if key is None:
            return {}
        uid, name = key
        record = self._pods.get(uid)
        if record is not None and record.containers.get(name) == cid:
            del record.containers[name]
        self._node_shared.discard(key)
        self._touched.add(uid)
        return self.engine.remove_container(uid, name)

    def _do_remove_pod(self, uid: str) -> tuple[_Pod | None, Changes]:
        record = self._pods.pop(uid, None)
        if record is None:
            return None, {}
        for name, cid in record.containers.items():
            self._ids.pop(cid, None)
            self._node_shared.discard((uid, name))
        self._touched.add(uid)
        return record, self.engine.remove_pod(uid)

    def _replay(self, op: Op) -> None:
        kind = op.get("op")
        if kind == "admit":
            spec = op.get("spec")
            self._do_admit(
                str(op["uid"]),
                str(op["sandbox"]),
                intent_from_dict(op["intent"]),
                None if spec is None else spec_from_dict(spec),
            )
        elif kind == "sandbox":
            self._do_sandbox(str(op["uid"]), str(op["sandbox"]))
        elif kind == "unmanaged":
            self._do_unmanaged(str(op["uid"]), str(op["sandbox"]), intent_from_dict(op["intent"]))
        elif kind == "place":
            self._do_place(
                str(op["uid"]),
                str(op["name"]),
                str(op["cid"]),
                container_from_dict(op["container"]),
            )
        elif kind == "stop":
            self._do_stop(str(op["uid"]), str(op["name"]))
        elif kind == "remove":
            self._do_remove(str(op["cid"]))
        elif kind == "remove_pod":
            self._do_remove_pod(str(op["uid"]))
        else:
            raise ValueError(f"unknown operation {kind!r}")

    # ----------------------------------------------------------------- views

    def pods(self) -> Sequence[PodView]:
        """Every pod with its containers and assignments: an immutable snapshot, safe to read
        from any thread (the PodResources server's workers, ``nri-plrm state``)."""
        return self._view

    def allocatable_cpus(self) -> CPUSet:
        """CPUs the plugin may hand out: online CPUs minus the reserved ones."""
        return self.engine.allocatable().cpus

    def allocatable_memory(self) -> Sequence[MemoryBlock]:
        """Allocatable bytes per NUMA node and memory type."""
        return self.engine.allocatable().memory

    def _refresh(self, uids: Iterable[str] | None = None) -> None:
        """Rebuild the views of ``uids`` (all pods when None) and publish a new snapshot."""
        if uids is None:
            self._views.clear()
        for uid in list(self._pods) if uids is None else uids:
            record = self._pods.get(uid)
            if record is None:
                self._views.pop(uid, None)
                continue
            self._views[uid] = self._pod_view(record)
        self._view = tuple(self._views.values())

    def _pod_view(self, record: _Pod) -> PodView:
        uid = record.uid
        containers = []
        for name in record.containers:
            spec = record.spec.container(name) if record.spec is not None else None
            containers.append(
                ContainerView(
                    name=name,
                    assignment=self.engine.assignment(uid, name),
                    kind=spec.kind if spec is not None else None,
                )
            )
        return PodView(
            uid=uid,
            namespace=record.intent.spec.namespace,
            name=record.intent.spec.name,
            containers=tuple(containers),
            cpus=self.engine.pod_cpus(uid) or CPUSet(),
            memory=tuple(self.engine.pod_memory(uid) or ()),
        )

    # ----------------------------------------------------------------- NRI handlers

    def configure(self, config: str, runtime_name: str, runtime_version: str) -> None:
        """Remember the runtime; the plugin takes its settings from its own file, not NRI."""
        self.runtime = (runtime_name, runtime_version)
        self.log.info("configured by %s %s", runtime_name, runtime_version)

    async def run_pod_sandbox(self, pod: api.PodSandbox) -> None:
        """Admit the pod: reserve its budget (scope pod) or fail the sandbox like the kubelet."""
        uid, namespace, name = pod_identity(pod)
        if self._known_sandbox(uid, pod.id):
            return
        spec = await self._lookup(uid, namespace, name)
        if self._known_sandbox(uid, pod.id):
            return
        try:
            intent = pod_intent(pod)
        except IntentError as exc:
            raise NRIError(f"pod {namespace}/{name}: {exc}") from exc
        before = self.engine.node_shared_pool()
        try:
            record = self._do_admit(uid, pod.id, intent, spec)
        except AdmissionError as err:
            record = _Pod(intent=intent, sandbox_id=pod.id, spec=spec)
            if self.metrics is not None:
                self.metrics.plugin_admission_rejected(err.reason)
            cause = explain_rejection(
                self.engine, spec or intent.spec, err, aggregate=None if spec else intent.aggregate
            )
            why = rejection_text(err, cause)
            self._decision_log(record, "", None, f"rejected {err.reason}: {why}")
            self._event(record, err, why)
            raise NRIError(f"{err.reason}: {why}") from err
        carry = self._with_node_pool(before, {})
        op: Op = {"op": "admit", "uid": uid, "sandbox": pod.id, "intent": intent_to_dict(intent)}
        op["spec"] = None if spec is None else spec_to_dict(spec)
        self._commit(op)
        self._carry.update(carry)
        if self.metrics is not None:
            self.metrics.plugin_admitted()
        cpus = self.engine.pod_cpus(uid)
        self.log.info(
            "pod=%s uid=%s admitted mode=%s budget_cpus=%d pod_cpus=%s",
            record.label(),
            uid,
            "spec" if spec is not None else intent.mode.value,
            intent.budget_cpus,
            cpus if cpus else "-",
            extra={"plrm": {"event": "admit", "pod": record.label(), "uid": uid}},
        )

    def _known_sandbox(self, uid: str, sandbox_id: str) -> bool:
        """True for a pod already admitted; a new sandbox of it (the kubelet recreates a dead
        one) keeps the pod's resources and becomes the pod's sandbox."""
        record = self._pods.get(uid)
        if record is None:
            return False
        if sandbox_id and record.sandbox_id != sandbox_id:
            self._do_sandbox(uid, sandbox_id)
            self._commit({"op": "sandbox", "uid": uid, "sandbox": sandbox_id})
            self.log.info("pod=%s uid=%s moved to sandbox %s", record.label(), uid, sandbox_id)
        return True

    async def create_container(
        self, pod: api.PodSandbox, container: api.Container
    ) -> tuple[api.ContainerAdjustment | None, list[api.ContainerUpdate]]:
        """Decide the container's cpuset; adjust it and update containers whose pool shrank."""
        record = self._pods.get(pod_identity(pod)[0])
        if record is None:
            await self.run_pod_sandbox(pod)
            record = self._pods[pod_identity(pod)[0]]
        if not record.managed:
            return None, []
        assignment, changes = self._place(record, container)
        adjust = api.ContainerAdjustment()
        _fill_resources(adjust.linux.resources, assignment)
        carried, self._carry = self._carry, {}
        for key in carried:
            current = self.engine.assignment(*key)
            if key not in changes and current is not None:
                changes[key] = current
        return adjust, self._updates(changes, exclude=container.id)

    def update_container(
        self, pod: api.PodSandbox, container: api.Container, resources: api.LinuxResources
    ) -> list[api.ContainerUpdate]:
        """Re-assert the container's pinning over what the kubelet asked for."""
        key = self._ids.get(container.id)
        if key is None:
            return []
        assignment = self.engine.assignment(*key)
        if assignment is None:
            return []
        return [_update(container.id, assignment)]

    def stop_container(
        self, pod: api.PodSandbox, container: api.Container
    ) -> list[api.ContainerUpdate]:
        """The container exited (maybe reported twice): its exclusive slice becomes reusable."""
        key = self._ids.get(container.id)
        if key is None:
            return []
        before = self.engine.node_shared_pool()
        changes = self._with_node_pool(before, self._do_stop(*key))
        self._commit({"op": "stop", "uid": key[0], "name": key[1]}, release=True)
        return self._updates(changes, exclude=container.id)

    def remove_container(self, pod: api.PodSandbox, container: api.Container) -> None:
        """Release the container per the kubelet's rules; grown pools are sent asynchronously."""
        if container.id not in self._ids:
            return
        before = self.engine.node_shared_pool()
        changes = self._with_node_pool(before, self._do_remove(container.id))
        self._commit({"op": "remove", "cid": container.id}, release=True)
        self._schedule(changes)

    def remove_pod_sandbox(self, pod: api.PodSandbox) -> None:
        """Release everything the pod holds; grown pools are sent asynchronously. Removing a
        sandbox the pod has been moved away from releases nothing."""
        uid = pod_identity(pod)[0]
        record = self._pods.get(uid)
        if record is None or (pod.id and record.sandbox_id and pod.id != record.sandbox_id):
            return
        before = self.engine.node_shared_pool()
        record, released = self._do_remove_pod(uid)
        changes = self._with_node_pool(before, released)
        self._commit({"op": "remove_pod", "uid": uid}, release=True)
        if record is not None:
            self.log.info(
                "pod=%s uid=%s released",
                record.label(),
                uid,
                extra={"plrm": {"event": "release", "pod": record.label(), "uid": uid}},
            )
        self._schedule(changes)

    async def synchronize(
        self, pods: list[api.PodSandbox], containers: list[api.Container]
    ) -> list[api.ContainerUpdate]:
        """Reconcile the restored state with what the runtime reports (docs/design.md §5).

        Every change is written at once with one full checkpoint at the end; when that fails,
        the reconciliation is undone and the request fails (the runtime retries on reconnect).
        """
        mark = len(self._records)
        self._batch = True
        try:
            updates = await self._reconcile(pods, containers)
        finally:
            self._batch = False
        try:
            self.compact()
        except CheckpointError as exc:
            self._records = self._records[:mark]
            self._rebuild()
            raise NRIError(f"reconciliation not applied: {exc}") from exc
        self._publish()
        self._pending.clear()
        self._carry.clear()
        return updates

    async def _reconcile(
        self, pods: list[api.PodSandbox], containers: list[api.Container]
    ) -> list[api.ContainerUpdate]:
        reported_pods = {pod_identity(p)[0]: p for p in pods}
        by_sandbox = {p.id: p for p in pods}
        reported_ids = {c.id for c in containers}
        for uid in [u for u in self._pods if u not in reported_pods]:
            self.remove_pod_sandbox(_sandbox_of(self._pods[uid]))
        for cid, (uid, name) in list(self._ids.items()):
            if cid not in reported_ids:
                self.remove_container(reported_pods[uid], api.Container(id=cid, name=name))
                if self.metrics is not None:
                    self.metrics.plugin_released()
        for uid, sandbox in reported_pods.items():
            if uid not in self._pods:
                await self._adopt_pod(sandbox)
        for ctr in sorted(containers, key=lambda c: c.created_at):
            owner = by_sandbox.get(ctr.pod_sandbox_id)
            if owner is None:
                continue
            record = self._pods.get(pod_identity(owner)[0])
            if record is None or not record.managed:
                continue
            if ctr.id not in self._ids:
                self._adopt_container(record, ctr)
        updates: list[api.ContainerUpdate] = []
        for ctr in containers:
            key = self._ids.get(ctr.id)
            if key is None:
                continue
            assignment = self.engine.assignment(*key)
            if assignment is not None and not _matches(ctr, assignment):
                updates.append(_update(ctr.id, assignment))
                if self.metrics is not None:
                    self.metrics.plugin_reconcile_corrected()
        return updates

    def on_disconnect(self) -> None:
        """Connection lost: pending pool updates are dropped (the next Synchronize redoes them)."""
        self._pending.clear()
        if self._flush_task is not None:
            self._flush_task.cancel()
            self._flush_task = None

    # ----------------------------------------------------------------- internals

    async def _lookup(self, uid: str, namespace: str, name: str) -> PodSpec | None:
        source = self.pod_specs
        if source is None:
            return None
        return await source.lookup(uid, namespace, name, self.lookup_timeout)

    def _event(self, record: _Pod, err: AdmissionError, message: str) -> None:
        """Post the kubelet's rejection reason with ``message`` (the kubelet's message and the
        cause) as a Warning Event on the pod (never blocks)."""
        if self.events is not None:
            spec = record.intent.spec
            self.events.record(spec.uid, spec.namespace, spec.name, err.reason, message)

    def _place(
        self, record: _Pod, container: api.Container
    ) -> tuple[ContainerAssignment, dict[tuple[str, str], ContainerAssignment]]:
        uid, name = record.uid, container.name
        before = self.engine.node_shared_pool()
        try:
            if record.spec is not None:
                cspec = record.spec.container(name) or ContainerSpec(name)
            else:
                cspec = container_spec(record.intent, container)
            assignment, found = self._do_place(uid, name, container.id, cspec)
        except (AdmissionError, IntentError) as err:
            reason = err.reason if isinstance(err, AdmissionError) else "InvalidResources"
            if self.metrics is not None:
                self.metrics.plugin_allocation_error(reason)
            why = str(err)
            if isinstance(err, AdmissionError):
                cause = explain_rejection(self.engine, record.pod_spec, err, cspec)
                why = rejection_text(err, cause)
            self._decision_log(record, name, None, f"rejected {reason}: {why}")
            if isinstance(err, AdmissionError):
                self._event(record, err, why)
            raise NRIError(f"pod {record.label()} container {name}: {reason}: {why}") from err
        changes = self._with_node_pool(before, found)
        self._commit(
            {
                "op": "place",
                "uid": uid,
                "name": name,
                "cid": container.id,
                "container": container_to_dict(cspec),
            }
        )
        if self.metrics is not None:
            self.metrics.plugin_assignment(assignment.assignment.value, assignment)
        self._decision_log(record, name, assignment, _reason(assignment))
        return assignment, changes

    async def _adopt_pod(self, pod: api.PodSandbox) -> None:
        try:
            await self.run_pod_sandbox(pod)
        except NRIError as exc:
            uid = pod_identity(pod)[0]
            intent = pod_intent(pod)
            self._do_unmanaged(uid, pod.id, intent)
            self._commit(
                {"op": "unmanaged", "uid": uid, "sandbox": pod.id, "intent": intent_to_dict(intent)}
            )
            self.log.warning(
                "pod=%s/%s uid=%s exists but cannot be placed, left unmanaged: %s",
                pod.namespace,
                pod.name,
                uid,
                exc,
            )

    def _adopt_container(self, record: _Pod, ctr: api.Container) -> None:
        try:
            self._place(record, ctr)
        except NRIError as exc:
            self.log.warning("container %s left unpinned at adoption: %s", ctr.id, exc)
            return
        if self.metrics is not None:
            self.metrics.plugin_adopted()

    def _with_node_pool(
        self, before: CPUSet, changes: Changes
    ) -> dict[tuple[str, str], ContainerAssignment]:
        """``changes`` plus every node-shared container when the node shared pool moved.

        The engine reports node-shared containers of other pods; the plugin also needs those of
        the same pod and the shrink caused by a budget reserved at ``RunPodSandbox``.
        """
        out = dict(changes)
        if self.engine.node_shared_pool() != before:
            for key in self._node_shared:
                if key not in out and (assignment := self.engine.assignment(*key)) is not None:
                    out[key] = assignment
        self._touched.update(u for u, _ in out)
        return out

    def _track(self, key: tuple[str, str], assignment: ContainerAssignment | None) -> None:
        if assignment is not None and assignment.assignment is AssignmentType.NODE_SHARED:
            self._node_shared.add(key)
        else:
            self._node_shared.discard(key)

    def _updates(self, changes: Changes, *, exclude: str) -> list[api.ContainerUpdate]:
        updates = []
        for (uid, name), assignment in changes.items():
            record = self._pods.get(uid)
            cid = record.containers.get(name) if record is not None else None
            if cid is not None and cid != exclude:
                updates.append(_update(cid, assignment))
        return updates

    def _schedule(self, changes: Changes) -> None:
        if not changes or self._sender is None or self._batch:
            return
        self._pending.update(changes.keys())
        if self._flush_task is None or self._flush_task.done():
            with contextlib.suppress(RuntimeError):
                self._flush_task = asyncio.get_running_loop().create_task(self._flush())

    async def _flush(self) -> None:
        """Send queued pool updates with each container's current assignment."""
        await asyncio.sleep(0)
        while self._pending and self._sender is not None:
            keys, self._pending = self._pending, set()
            updates = []
            for uid, name in sorted(keys):
                record = self._pods.get(uid)
                cid = record.containers.get(name) if record is not None else None
                assignment = self.engine.assignment(uid, name)
                if cid is not None and assignment is not None:
                    updates.append(_update(cid, assignment))
            if not updates:
                continue
            try:
                failed = await self._sender(updates)
            except Exception as exc:  # the runtime reports failures without details
                self.log.warning("pool update of %d containers failed: %s", len(updates), exc)
                continue
            if failed:
                self.log.warning("pool update failed for %d containers", len(failed))

    async def reassert(self, cpus: Callable[[ContainerAssignment], CPUSet]) -> tuple[int, int]:
        """Send every container its assignment with the cpuset ``cpus`` gives (empty: skipped)
        through the update sender, outside any NRI event (CPU hotplug repair).

        Returns (updates sent, updates the runtime reported failed); (0, 0) when not attached.
        """
        updates = []
        for cid, key in sorted(self._ids.items()):
            if (assignment := self.engine.assignment(*key)) is not None and (
                chosen := cpus(assignment)
            ):
                updates.append(_update(cid, replace(assignment, cpus=chosen)))
        if self._sender is None or not updates:
            return 0, 0
        return len(updates), len(await self._sender(updates) or ())

    async def drain(self) -> None:
        """Wait until queued pool updates have been sent (tests, shutdown)."""
        while self._flush_task is not None and not self._flush_task.done():
            await asyncio.shield(self._flush_task)

    def _decision_log(
        self, record: _Pod, container: str, assignment: ContainerAssignment | None, reason: str
    ) -> None:
        cpus = str(assignment.cpus) if assignment is not None else "-"
        mems = str(assignment.mems) if assignment is not None and assignment.mems else "-"
        self.log.info(
            "decision pod=%s container=%s cpus=%s mems=%s reason=%s",
            record.label(),
            container or "-",
            cpus,
            mems,
            reason,
            extra={
                "plrm": {
                    "event": "decision",
                    "pod": record.label(),
                    "uid": record.uid,
                    "container": container,
                    "cpus": cpus,
                    "mems": mems,
                    "reason": reason,
                }
            },
        )

    def _checkpoint_metric(self, ok: bool, start: float) -> None:
        if self.metrics is not None:
            self.metrics.plugin_checkpoint_write(ok, time.perf_counter() - start)


def _sandbox_of(record: _Pod) -> api.PodSandbox:
    spec = record.intent.spec
    return api.PodSandbox(
        id=record.sandbox_id, uid=spec.uid, namespace=spec.namespace, name=spec.name
    )


def _reason(assignment: ContainerAssignment) -> str:
    return {
        AssignmentType.NODE_EXCLUSIVE: "exclusive slice from the node",
        AssignmentType.POD_EXCLUSIVE: "exclusive slice from the pod budget",
        AssignmentType.POD_SHARED: "pod shared pool",
        AssignmentType.NODE_SHARED: "node shared pool",
    }[assignment.assignment]


def _fill_resources(res: api.LinuxResources, assignment: ContainerAssignment) -> None:
    res.cpu.cpus = str(assignment.cpus)
    if assignment.mems:
        res.cpu.mems = str(assignment.mems)
    if assignment.exclusive:
        res.cpu.quota.value = -1


def _update(container_id: str, assignment: ContainerAssignment) -> api.ContainerUpdate:
    update = api.ContainerUpdate(container_id=container_id)
    _fill_resources(update.linux.resources, assignment)
    return update


def _matches(ctr: api.Container, assignment: ContainerAssignment) -> bool:
    """True when the container already runs with the decided cpus (and mems, when pinned)."""
    if not (ctr.HasField("linux") and ctr.linux.HasField("resources")):
        return False
    cpu = ctr.linux.resources.cpu
    try:
        if CPUSet.parse(cpu.cpus) != assignment.cpus:
            return False
        if assignment.mems and CPUSet.parse(cpu.mems) != assignment.mems:
            return False
    except ValueError:
        return False
    return not (assignment.exclusive and not (cpu.HasField("quota") and cpu.quota.value == -1))
