"""The NRI handlers: pods and containers in, pinned cpusets out, every decision checkpointed.

``Plugin`` implements the wire layer's ``Handlers`` contract (``nri_plrm.nri.stub``). It turns
NRI events into engine calls (whole-pod mode when a ``PodSpecSource`` knows the pod, NRI-only
inference otherwise, see ``docs/design.md``), saves every decision with the checkpoint store
before the reply that applies it, answers with adjustments and updates, and sends pool growth
after removals with an asynchronous ``UpdateContainers`` (never from inside a handler).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from nri_plrm.checkpoint.kubelet import (
    cpu_state_from_manager,
    memory_state_from_manager,
    write_kubelet_state,
)
from nri_plrm.checkpoint.store import CheckpointError, CheckpointStore
from nri_plrm.cpuset import CPUSet
from nri_plrm.engine.engine import Engine
from nri_plrm.engine.types import (
    AdmissionError,
    AssignmentType,
    ContainerAssignment,
    ContainerSpec,
    MemoryBlock,
    PodSpec,
)
from nri_plrm.intent import (
    IntentError,
    PodIntent,
    container_spec,
    intent_from_dict,
    intent_to_dict,
    pod_identity,
    pod_intent,
    spec_from_dict,
    spec_to_dict,
)
from nri_plrm.metrics import Metrics
from nri_plrm.nri.stub import NRIError
from nri_plrm.podresources.view import ContainerView, PodView
from nri_plrm.podsource.base import PodEventSink, PodSpecSource
from nri_plrm.proto import nri_api_pb2 as api

CHECKPOINT_LAYOUT = 1
"""Version of the plugin's part of the checkpoint ``data`` (the store versions the file)."""

Changes = Mapping[tuple[str, str], ContainerAssignment]
"""Other containers whose assignment changed, by (pod uid, container name)."""
EXPORT_DELAY = 0.05
"""Seconds after a change before the kubelet-format files are rewritten (coalesces bursts)."""

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

    def label(self) -> str:
        return f"{self.intent.spec.namespace}/{self.intent.spec.name}"


class Plugin:
    """NRI handlers deciding CPU and memory placement through the allocation engine.

    ``engine`` makes the decisions; ``store`` (optional) persists them; ``pod_specs`` (optional)
    gives full pod specs for the kubelet-exact whole-pod mode; ``metrics`` (optional) counts
    them; ``kubelet_state_path`` (optional) is a directory where the node state is exported in
    the kubelet's ``cpu_manager_state``/``memory_manager_state`` formats after every change;
    ``events`` (optional) receives the kubelet's rejection reason and message as pod Events.
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
    ) -> None:
        self.engine = engine
        self.store = store
        self.pod_specs = pod_specs
        self.metrics = metrics
        self.log = logger or logging.getLogger("nri_plrm.plugin")
        self.kubelet_state_path = kubelet_state_path
        self.lookup_timeout = lookup_timeout
        self.events = events
        self.runtime = ("", "")
        self._pods: dict[str, _Pod] = {}
        self._ids: dict[str, tuple[str, str]] = {}
        self._saved: dict[str, Any] | None = None
        self._sender: UpdateSender | None = None
        self._pending: set[tuple[str, str]] = set()
        self._flush_task: asyncio.Task[None] | None = None
        self._touched: set[str] = set()
        self._node_shared: set[tuple[str, str]] = set()
        self._carry: dict[tuple[str, str], ContainerAssignment] = {}
        self._export_handle: asyncio.TimerHandle | None = None
        self._views: dict[str, PodView] = {}
        self._view: tuple[PodView, ...] = ()

    # ----------------------------------------------------------------- wiring and state

    def attach(self, sender: UpdateSender | None) -> None:
        """Set the function that sends unsolicited updates (the stub's ``update_containers``)."""
        self._sender = sender

    def state(self) -> dict[str, Any]:
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
            "plugin": {"layout": CHECKPOINT_LAYOUT, "pods": pods},
        }

    def load_state(self, data: Mapping[str, Any]) -> None:
        """Adopt checkpoint ``data`` (unknown keys ignored); raises ValueError/KeyError/TypeError
        when it cannot be used on this machine and configuration."""
        self.engine = Engine.restore(self.engine.topology, self.engine.config, data["engine"])
        pods: dict[str, _Pod] = {}
        ids: dict[str, tuple[str, str]] = {}
        for uid, entry in data.get("plugin", {}).get("pods", {}).items():
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
        self._pods = pods
        self._ids = ids
        self._saved = dict(data)
        self._touched.clear()
        self._node_shared = set()
        for cid_key in ids.values():
            self._track(cid_key, self.engine.assignment(*cid_key))
        self._refresh()

    def restore(self) -> str | None:
        """Load the checkpoint from the store at start-up; returns the problem text, if any.

        A missing file leaves the plugin empty; a corrupt one is kept aside by the store, logged,
        counted, and the plugin starts empty (Synchronize then adopts what the runtime reports).
        """
        if self.store is None:
            return None
        result = self.store.load()
        if result.problem is not None:
            self.log.error(
                "checkpoint unusable, rebuilding from the runtime: %s",
                result.problem,
                extra={"plrm": {"event": "checkpoint", "problem": result.problem.kind}},
            )
            if self.metrics is not None:
                self.metrics.plugin_checkpoint_corrupt(result.problem.kind)
            return str(result.problem)
        if result.data is None:
            return None
        try:
            self.load_state(result.data)
        except (KeyError, TypeError, ValueError) as exc:
            self.log.error(
                "checkpoint %s has unusable contents, rebuilding: %s", self.store.path, exc
            )
            if self.metrics is not None:
                self.metrics.plugin_checkpoint_corrupt("bad-contents")
            return f"checkpoint {self.store.path}: unusable contents: {exc}"
        self.log.info(
            "restored %d pods and %d containers from %s",
            len(self._pods),
            len(self._ids),
            self.store.path,
        )
        return None

    def _publish(self) -> None:
        self._refresh(self._touched)
        self._touched.clear()
        self._schedule_export()

    def _schedule_export(self) -> None:
        if not self.kubelet_state_path or self._export_handle is not None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.export_kubelet_state()
            return
        self._export_handle = loop.call_later(EXPORT_DELAY, self.export_kubelet_state)

    def export_kubelet_state(self) -> None:
        """Write ``cpu_manager_state``/``memory_manager_state`` to ``kubelet_state_path``."""
        self._export_handle = None
        if not self.kubelet_state_path:
            return
        try:
            write_kubelet_state(
                self.kubelet_state_path,
                cpu_state_from_manager(self.engine.cpu_manager),
                # The exporter's protocol declares machine_state as a plain attribute, which
                # mypy treats as invariant against the manager's dict.
                memory_state_from_manager(cast(Any, self.engine.memory_manager)),
            )
        except (OSError, ValueError) as exc:
            self.log.warning("kubelet-format export to %s failed: %s", self.kubelet_state_path, exc)

    def _save(self) -> None:
        """Persist the current state; on failure roll back to the last saved state and raise."""
        if self.store is None:
            self._publish()
            return
        data = self.state()
        start = time.perf_counter()
        try:
            self.store.save(data)
        except CheckpointError as exc:
            self._checkpoint_metric(False, start)
            self._rollback()
            raise NRIError(f"decision not applied: {exc}") from exc
        self._checkpoint_metric(True, start)
        self._saved = data
        self._publish()

    def _save_release(self) -> None:
        """Persist a release; a failed write is logged and retried with the next decision."""
        self._publish()
        if self.store is None:
            return
        data = self.state()
        start = time.perf_counter()
        try:
            self.store.save(data)
        except CheckpointError as exc:
            self._checkpoint_metric(False, start)
            self.log.error("release kept in memory only, will be written with the next: %s", exc)
            return
        self._checkpoint_metric(True, start)
        self._saved = data

    def _rollback(self) -> None:
        if self._saved is not None:
            self.load_state(self._saved)
            return
        self.engine = Engine(self.engine.topology, self.engine.config)
        self._pods.clear()
        self._ids.clear()
        self._refresh()

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
        for uid in [u for u in self._views if u not in self._pods]:
            del self._views[uid]
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
        if uid in self._pods:
            return
        spec = await self._lookup(uid, namespace, name)
        try:
            intent = pod_intent(pod)
        except IntentError as exc:
            raise NRIError(f"pod {namespace}/{name}: {exc}") from exc
        record = _Pod(intent=intent, sandbox_id=pod.id, spec=spec)
        before = self.engine.node_shared_pool()
        try:
            if spec is not None:
                self.engine.admit_pod(spec)
            else:
                self.engine.admit_sandbox(intent.spec, intent.aggregate)
        except AdmissionError as err:
            if self.metrics is not None:
                self.metrics.plugin_admission_rejected(err.reason)
            self._decision_log(record, "", None, f"rejected {err.reason}: {err.message}")
            self._event(record, err)
            raise NRIError(f"{err.reason}: {err.message}") from err
        self._pods[uid] = record
        self._touched.add(uid)
        carry = self._with_node_pool(before, {})
        self._save()
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
        self._save()
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
        changes = self._with_node_pool(before, self.engine.stop_container(*key))
        self._touched.add(key[0])
        self._save_release()
        return self._updates(changes, exclude=container.id)

    def remove_container(self, pod: api.PodSandbox, container: api.Container) -> None:
        """Release the container per the kubelet's rules; grown pools are sent asynchronously."""
        key = self._ids.pop(container.id, None)
        if key is None:
            return
        uid, name = key
        record = self._pods.get(uid)
        if record is not None and record.containers.get(name) == container.id:
            del record.containers[name]
        self._node_shared.discard(key)
        before = self.engine.node_shared_pool()
        changes = self._with_node_pool(before, self.engine.remove_container(uid, name))
        self._touched.add(uid)
        self._save_release()
        self._schedule(changes)

    def remove_pod_sandbox(self, pod: api.PodSandbox) -> None:
        """Release everything the pod holds; grown pools are sent asynchronously."""
        uid = pod_identity(pod)[0]
        record = self._pods.pop(uid, None)
        if record is None:
            return
        for name, cid in record.containers.items():
            self._ids.pop(cid, None)
            self._node_shared.discard((uid, name))
        before = self.engine.node_shared_pool()
        changes = self._with_node_pool(before, self.engine.remove_pod(uid))
        self._touched.add(uid)
        self._save_release()
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
        """Reconcile the restored state with what the runtime reports (docs/design.md §5)."""
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
        updates: list[api.ContainerUpdate] = []
        for ctr in sorted(containers, key=lambda c: c.created_at):
            owner = by_sandbox.get(ctr.pod_sandbox_id)
            if owner is None:
                continue
            record = self._pods.get(pod_identity(owner)[0])
            if record is None or not record.managed:
                continue
            if ctr.id not in self._ids:
                self._adopt_container(record, ctr)
        for ctr in containers:
            key = self._ids.get(ctr.id)
            if key is None:
                continue
            assignment = self.engine.assignment(*key)
            if assignment is not None and not _matches(ctr, assignment):
                updates.append(_update(ctr.id, assignment))
                if self.metrics is not None:
                    self.metrics.plugin_reconcile_corrected()
        self._save()
        self._pending.clear()
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

    def _event(self, record: _Pod, err: AdmissionError) -> None:
        """Post the kubelet's rejection as a Warning Event on the pod (never blocks)."""
        if self.events is not None:
            spec = record.intent.spec
            self.events.record(spec.uid, spec.namespace, spec.name, err.reason, err.message)

    def _place(
        self, record: _Pod, container: api.Container
    ) -> tuple[ContainerAssignment, dict[tuple[str, str], ContainerAssignment]]:
        uid = record.uid
        name = container.name
        previous = record.containers.get(name)
        if previous is not None and previous != container.id:
            self._ids.pop(previous, None)
        record.containers[name] = container.id
        self._ids[container.id] = (uid, name)
        before = self.engine.node_shared_pool()
        try:
            if record.spec is not None:
                spec = record.spec.container(name) or ContainerSpec(name)
                assignment, found = self.engine.add_container(record.spec, spec)
            else:
                cspec = container_spec(record.intent, container)
                assignment, found = self.engine.add_container(record.intent.spec, cspec)
        except (AdmissionError, IntentError) as err:
            del record.containers[name]
            self._ids.pop(container.id, None)
            reason = err.reason if isinstance(err, AdmissionError) else "InvalidResources"
            if self.metrics is not None:
                self.metrics.plugin_allocation_error(reason)
            self._decision_log(record, name, None, f"rejected {reason}: {err}")
            if isinstance(err, AdmissionError):
                self._event(record, err)
            raise NRIError(f"pod {record.label()} container {name}: {reason}: {err}") from err
        self._track((uid, name), assignment)
        changes = self._with_node_pool(before, found)
        self._touched.add(uid)
        if self.metrics is not None:
            self.metrics.plugin_assignment(assignment.assignment.value, assignment)
        self._decision_log(record, name, assignment, _reason(assignment))
        return assignment, changes

    async def _adopt_pod(self, pod: api.PodSandbox) -> None:
        try:
            await self.run_pod_sandbox(pod)
        except NRIError as exc:
            uid = pod_identity(pod)[0]
            self._pods[uid] = _Pod(intent=pod_intent(pod), sandbox_id=pod.id, managed=False)
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
        if not changes or self._sender is None:
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


def known_ids(plugin: Plugin) -> Iterable[str]:
    """Container ids the plugin tracks (for tests and ``state``)."""
    return plugin._ids.keys()
