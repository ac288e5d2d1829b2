"""The allocation engine: Topology Manager + CPU Manager ``static`` + Memory Manager ``Static``.

Whole pod (kubelet-exact): :meth:`Engine.admit_pod` runs the kubelet's admission on the full
spec. Incremental (NRI shows a pod's budget, then its containers one at a time):
:meth:`Engine.admit_sandbox`, :meth:`Engine.add_container`, :meth:`Engine.stop_container`,
:meth:`Engine.remove_container`, :meth:`Engine.remove_pod`. Every call that changes state
returns the other containers whose cpuset or mems changed (``Changes``). A rejection raises
``AdmissionError`` with the kubelet's reason and message and leaves nothing allocated.
docs/design.md explains the incremental rules and where they meet the kubelet's.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

from nri_plrm.base.cpuset import EMPTY, CPUSet
from nri_plrm.engine.admitted import (
    MODE_CLASSIC,
    MODE_POD_LEVEL,
    MODE_WHOLE,
    AdmittedPod,
    hint_from_dict,
    hint_to_dict,
)
from nri_plrm.engine.adoption import AdoptionError, bare_pod, has_budget, numa_mask
from nri_plrm.engine.bitmask import mask_of
from nri_plrm.engine.cpu_manager import CPUManager
from nri_plrm.engine.cpu_options import CPUManagerConfig
from nri_plrm.engine.device_manager import DeviceManager
from nri_plrm.engine.holds_nothing import placed_holding_nothing
from nri_plrm.engine.invariants import accounting_problems, placement_problems
from nri_plrm.engine.memory_manager import MemoryManager
from nri_plrm.engine.memory_state import MemoryManagerConfig
from nri_plrm.engine.node_shared import NodeSharedSet
from nri_plrm.engine.pod_budget import PodBudget
from nri_plrm.engine.readmit import Explain, ReadmitRefused, Readmitted, SavedPod
from nri_plrm.engine.spec import (
    AdmissionError,
    AssignmentType,
    ContainerAssignment,
    ContainerKind,
    ContainerSpec,
    MemoryBlock,
    PodSpec,
    ResizeGates,
    ResourceList,
    TopologyHint,
)
from nri_plrm.engine.spec_json import KeptForms
from nri_plrm.engine.topology_manager import (
    POLICY_NONE,
    SCOPE_POD,
    HintProvider,
    TopologyManager,
    TopologyManagerConfig,
)
from nri_plrm.topology.model import Topology

SNAPSHOT_FORMAT = 1
"""Version of :meth:`Engine.snapshot`'s layout (readers ignore keys they do not know)."""

Changes = dict[tuple[str, str], ContainerAssignment]
"""The new assignments of containers whose cpuset or mems changed, by (pod uid, container
name); the one container a call places is not part of it."""


class EngineStateError(ValueError):
    """A snapshot that cannot be restored on this machine and configuration."""


@dataclass(frozen=True)
class EngineConfig:
    """The three managers' settings and the kubelet's resize feature gates."""

    topology_manager: TopologyManagerConfig
    cpu_manager: CPUManagerConfig
    memory_manager: MemoryManagerConfig
    resize: ResizeGates = field(default_factory=ResizeGates)


@dataclass(frozen=True)
class Allocatable:
    """What PodResources ``GetAllocatableResources`` reports."""

    cpus: CPUSet
    memory: tuple[MemoryBlock, ...]


class Engine:
    """Kubelet-exact admission and allocation for one node (see the module docstring)."""

    def __init__(self, topology: Topology, config: EngineConfig) -> None:
        self.topology = topology
        self.config = config
        self.topology_manager = TopologyManager(topology, config.topology_manager)
        self.cpu_manager = CPUManager(
            topology, config.cpu_manager, topology_manager_policy=config.topology_manager.policy
        )
        self.memory_manager = MemoryManager(topology, config.memory_manager)
        self.device_manager = DeviceManager(topology)
        self._pods: dict[str, AdmittedPod] = {}
        self._node_shared = NodeSharedSet()
        self._deferred = 0
        self.forms = KeptForms()
        """JSON forms of the specs, containers and hints held (read them only)."""
        self._on_default = ContainerAssignment(
            AssignmentType.NODE_SHARED, self.cpu_manager.default_cpuset, CPUSet()
        )
        self.budget = PodBudget(self.cpu_manager, self.memory_manager, self._assignment_of)
        """The pod-level pods' CPU and memory budgets (checks, slices, shared containers)."""

    @property
    def _providers(self) -> tuple[HintProvider, ...]:
        return (self.cpu_manager, self.memory_manager, self.device_manager)

    @property
    def pod_scope(self) -> bool:
        """True when the Topology Manager aligns whole pods (a policy and scope ``pod``)."""
        tm = self.topology_manager
        return tm.policy != POLICY_NONE and tm.scope == SCOPE_POD

    # -- whole pod ---------------------------------------------------------------------------

    def admit_pod(self, pod: PodSpec) -> Changes:
        """The kubelet's admission of a whole pod; the containers of other pods that changed
        (the node shared pool shrank). Its own containers' assignments: :meth:`assignment`.

        Raises ``AdmissionError`` (kubelet reason and message); nothing stays allocated then.
        A pod admitted before keeps its state (nothing changes).
        """
        if pod.uid in self._pods:
            return {}
        before = self.cpu_manager.default_cpuset
        try:
            self.topology_manager.admit(pod, self._providers)
        except AdmissionError:
            self._rollback(pod.uid)
            raise
        changes = self._changes_since(before)
        self._pods[pod.uid] = AdmittedPod(spec=pod, mode=MODE_WHOLE)
        for c in pod.all_containers():
            if self.cpu_manager.assignment(pod.uid, c.name) is None:
                self._node_shared.add((pod.uid, c.name))
        return changes

    def _rollback(self, pod_uid: str) -> None:
        self.cpu_manager.remove_pod(pod_uid)
        self.memory_manager.remove_pod(pod_uid)
        self.topology_manager.remove_pod(pod_uid)

    # -- incremental ---------------------------------------------------------------------------

    def admit_sandbox(self, pod: PodSpec, aggregate: ResourceList | None = None) -> Changes:
        """Admit a pod known only by its budget (NRI ``RunPodSandbox``); see the module doc.

        Returns the containers of other pods that changed (a reserved budget shrinks the node
        shared pool); the reservation itself: :meth:`pod_cpus`, :meth:`pod_memory`.
        Idempotent. Raises ``AdmissionError`` with the kubelet's reason and message; nothing
        stays reserved then.
        """
        if pod.uid in self._pods:
            return {}
        before = self.cpu_manager.default_cpuset
        bare = replace(pod, init_containers=(), containers=())
        pod_level = bare.has_pod_level_resources
        record = AdmittedPod(spec=bare, mode=MODE_POD_LEVEL if pod_level else MODE_CLASSIC)
        try:
            if self.pod_scope and pod_level:
                record.hint = self.topology_manager.pod_hint(bare, self._providers)
                self._reserve_budget(record)
            elif self.pod_scope and (aggregate or pod.devices):
                aggregate = aggregate or {}
                probe = PodSpec(
                    uid=pod.uid,
                    containers=(ContainerSpec("", requests=aggregate, limits=aggregate),),
                    devices=pod.devices,
                )
                record.hint = self.topology_manager.pod_hint(probe, self._providers)
        except AdmissionError:
            self._rollback(pod.uid)
            raise
        self._pods[pod.uid] = record
        return self._changes_since(before)

    def _reserve_budget(self, record: AdmittedPod) -> None:
        self.cpu_manager.allocate_pod_bubble(record.spec, record.hint)
        self.memory_manager.allocate_pod_budget(record.spec, record.hint)

    def _reserve_again(self, record: AdmittedPod) -> None:
        """Reserve a pod-level pod's budget again after the kubelet's release rule (its last
        container entry was removed) gave it back while the sandbox lives: the pod hint is
        merged afresh (the node changed since sandbox time); a failure leaves nothing."""
        uid = record.spec.uid
        try:
            record.hint = self.topology_manager.pod_hint(record.spec, self._providers)
            self._reserve_budget(record)
        except AdmissionError:
            self.cpu_manager.remove_pod(uid)
            self.memory_manager.remove_pod(uid)
            raise

    def add_container(
        self, pod: PodSpec, container: ContainerSpec
    ) -> tuple[ContainerAssignment, Changes]:
        """Place a container of an admitted pod; its assignment and the other containers
        that changed (of this pod and of others).

        Raises ``AdmissionError`` (the container must not start); nothing changes then.
        Raises ``KeyError`` for a pod that was not admitted (:meth:`admit_sandbox` first).
        """
        record = self._pods.get(pod.uid)
        if record is None:
            raise KeyError(f"pod {pod.uid}: not admitted")
        uid, name = pod.uid, container.name
        if record.mode == MODE_WHOLE:
            if record.spec.container(name) is None:
                self._node_shared.add((uid, name))
            return self._assignment_of(uid, name), {}
        before = self.cpu_manager.default_cpuset
        budget = self.budget
        pool_before = budget.shared_now(record)
        known = next((c for c in record.containers if c.name == name), None)
        if known is not None and name not in record.stopped:
            return self._assignment_of(uid, name), {}
        if known is not None:
            record.stopped.discard(name)
            if known.kind is ContainerKind.INIT and container.kind is not ContainerKind.INIT:
                record.containers[record.containers.index(known)] = container
        else:
            record.containers.append(container)
        try:
            if record.mode == MODE_POD_LEVEL and self.pod_scope:
                if not budget.holds(uid):
                    self._reserve_again(record)
                self._add_to_budget(budget, record, container)
            else:
                self._add_classic(record, container)
        except AdmissionError:
            if known is None:
                record.containers.remove(container)
            raise
        assignment = self._assignment_of(uid, name)
        if assignment.assignment is AssignmentType.NODE_SHARED:
            self._node_shared.add((uid, name))
        else:  # a restarted container may come back with exclusive resources
            self._node_shared.discard((uid, name))
        changes = self._changes_since(before, exclude=(uid, name))
        budget.moved(record, pool_before, changes, exclude=name)
        return assignment, changes

    def _add_to_budget(
        self, budget: PodBudget, record: AdmittedPod, container: ContainerSpec
    ) -> None:
        """A container of a pod-level pod in scope pod. The budget was reserved at sandbox
        time, or again now if the kubelet's release rule (last container entry gone) gave it
        back meanwhile; a pod without a Guaranteed budget gets nothing (node shared pool)."""
        spec = record.spec_so_far()
        n = self.cpu_manager.guaranteed_cpus(spec, container)
        memory = self.memory_manager.container_requests(spec, container)
        budget.check(record, container.name, n, memory)
        budget.carve(record, container.name, n, memory)

    def _add_classic(self, record: AdmittedPod, container: ContainerSpec) -> None:
        """The kubelet's container path: per-container hint, or the stored pod hint."""
        if placed_holding_nothing(self.topology_manager, record, container, len(self._providers)):
            return
        spec = record.spec_so_far()
        uid, name = spec.uid, container.name
        tm = self.topology_manager
        if tm.policy == POLICY_NONE:
            hint: TopologyHint | None = None
        elif record.hint is not None:
            hint = record.hint
        else:
            hint = tm.container_hint(spec, container, self._providers)
        if hint is not None:
            tm.set_affinity(uid, name, hint)
        try:
            for provider in self._providers:
                provider.allocate(spec, container, hint)
        except AdmissionError:
            self.cpu_manager.remove_container(uid, name)
            self.memory_manager.remove_container(uid, name)
            tm.remove_container(uid, name)
            raise

    def stop_container(self, pod_uid: str, name: str) -> Changes:
        """The container exited (NRI ``StopContainer``, maybe twice); see the module doc.

        A classic container becomes a regular init container of the pod: its CPU entry and its
        memory blocks are then reusable by the pod's next container (the kubelet's init reuse,
        derived from the saved state by the CPU and memory managers)."""
        record = self._pods.get(pod_uid)
        if record is None or record.mode == MODE_WHOLE or name in record.stopped:
            return {}
        known = next((c for c in record.containers if c.name == name), None)
        if known is None:
            return {}
        record.stopped.add(name)
        budget = self.budget
        if record.mode == MODE_POD_LEVEL and budget.holds(pod_uid):
            if name in record.shared:
                return {}
            pool_before = budget.shared_now(record)
            self.cpu_manager.release_container_slice(pod_uid, name)
            self.memory_manager.release_container_slice(pod_uid, name)
            budget.pin_shared(record)
            live = {n: a for n, a in pool_before.items() if n not in record.stopped}
            changes: Changes = {}
            budget.moved(record, live, changes, exclude=name)
            return changes
        if self.cpu_manager.assignment(pod_uid, name) is None and not (
            self.memory_manager.container_blocks(pod_uid, name)
        ):
            return {}
        as_init = ContainerSpec(name, ContainerKind.INIT, known.requests, known.limits)
        record.containers[record.containers.index(known)] = as_init
        return {}

    def remove_container(self, pod_uid: str, name: str) -> Changes:
        """Release a removed container per the kubelet's rules; the pools that grew."""
        record = self._pods.get(pod_uid)
        before = self.cpu_manager.default_cpuset
        budget = self.budget
        pool_before = budget.shared_now(record) if record is not None else {}
        self.cpu_manager.remove_container(pod_uid, name)
        self.memory_manager.remove_container(pod_uid, name)
        self.topology_manager.remove_container(pod_uid, name)
        self._node_shared.discard((pod_uid, name))
        if record is not None and record.mode != MODE_WHOLE:
            record.containers = [c for c in record.containers if c.name != name]
            record.stopped.discard(name)
            record.shared.discard(name)
            budget.pin_shared(record)
        changes = self._changes_since(before)
        if record is not None:
            budget.moved(record, pool_before, changes, exclude=name)
        return changes

    def remove_pod(self, pod_uid: str) -> Changes:
        """Release everything a pod holds; the node-shared containers whose pool grew."""
        before = self.cpu_manager.default_cpuset
        self._rollback(pod_uid)
        self._pods.pop(pod_uid, None)
        self._node_shared.discard_pod(pod_uid)
        return self._changes_since(before)

    # -- readmit (nri_plrm/engine/readmit.py) ---------------------------------------------------

    def readmit(
        self,
        pod: PodSpec,
        aggregate: ResourceList | None,
        containers: Sequence[ContainerSpec],
        stopped: Collection[str],
        new: ContainerSpec | None = None,
        explain: Explain | None = None,
    ) -> Readmitted:
        """Re-admit ``pod`` under another kind (budget, or classic with ``aggregate``) with
        ``containers`` (those in ``stopped`` stopped again), then place ``new``, as one
        operation (:mod:`nri_plrm.engine.readmit`); the placed container's assignment and the
        other containers that changed (the pod's own, then the node-shared ones once). Raises
        ``ReadmitRefused`` (``explain`` gives a refused ``new`` its cause); the pod's entries
        are put back then, so the engine is exactly as before."""
        uid = pod.uid
        saved = self.save_pod(uid)
        own: dict[tuple[str, str], None] = {}
        placed: Changes = {}
        assignment: ContainerAssignment | None = None
        try:
            with self.net_changes() as net:
                self.remove_pod(uid)
                try:
                    self.admit_sandbox(pod, aggregate)
                    for spec in containers:
                        own.update(dict.fromkeys(self.add_container(pod, spec)[1]))
                        own[(uid, spec.name)] = None
                        if spec.name in stopped:
                            own.update(dict.fromkeys(self.stop_container(uid, spec.name)))
                except AdmissionError as err:
                    raise ReadmitRefused(err, placing=False) from err
                new_key = None if new is None else (uid, new.name)
                changes = {
                    k: a for k in own if k != new_key and (a := self.assignment(*k)) is not None
                }
                if new is not None:
                    try:
                        assignment, placed = self.add_container(pod, new)
                    except AdmissionError as err:
                        cause = "" if explain is None else explain(pod, err, new)
                        raise ReadmitRefused(err, placing=True, cause=cause) from err
        except ReadmitRefused:
            self.restore_pod(saved)
            raise
        changes.update(placed)
        changes.update(net)
        return Readmitted(assignment, changes)

    def save_pod(self, pod_uid: str) -> SavedPod:
        """Everything the engine and its managers hold for one pod, for :meth:`restore_pod`."""
        record = self._pods.get(pod_uid)
        if record is not None:
            record = replace(
                record,
                containers=list(record.containers),
                stopped=set(record.stopped),
                shared=set(record.shared),
                baselines=dict(record.baselines),
            )
        return SavedPod(
            pod_uid,
            record,
            tuple(self._node_shared.names(pod_uid)),
            self.cpu_manager.state.save_pod(pod_uid),
            self.memory_manager.state.save_pod(pod_uid),
            self.topology_manager.pod_affinity(pod_uid),
        )

    def restore_pod(self, saved: SavedPod) -> None:
        """Back to ``saved``; valid when only that pod changed since :meth:`save_pod`."""
        uid = saved.pod_uid
        self.cpu_manager.state.restore_pod(saved.cpus)
        self.memory_manager.state.restore_pod(saved.memory)
        self.topology_manager.set_pod_affinity(uid, saved.affinity)
        if saved.record is None:
            self._pods.pop(uid, None)
        else:
            self._pods[uid] = saved.record
        self._node_shared.discard_pod(uid)
        for name in saved.node_shared:
            self._node_shared.add((uid, name))

    # -- adoption: allocations recorded as they run (rules: nri_plrm/engine/adoption.py) -------

    def adopt_sandbox(
        self,
        pod: PodSpec,
        aggregate: ResourceList | None,
        claimed: CPUSet,
        avoid: CPUSet = EMPTY,
        mems: CPUSet = EMPTY,
    ) -> CPUSet:
        """Admit a running pod keeping the CPUs its containers hold.

        A pod with a CPU budget (:func:`~nri_plrm.engine.adoption.has_budget`) gets one
        that contains ``claimed`` (its exclusive slices and shared pool as they run), completed
        to its size on the same NUMA nodes, preferring CPUs outside ``avoid`` (what other
        running containers hold); its memory budget is charged on the NUMA nodes of the CPUs.
        Other pods reserve nothing: their pod hint is the NUMA nodes of ``claimed``, else the
        NUMA nodes ``mems`` (the memory nodes its shared containers run on), or merged as at
        ``RunPodSandbox`` when neither is given (none when that merge fails: the pod runs
        already). Returns the budget's CPUs (empty when none). Raises ``AdoptionError``;
        nothing changes then.
        """
        uid = pod.uid
        if uid in self._pods:
            raise AdoptionError(f"pod {uid}: already admitted")
        bare = bare_pod(pod)
        mode = MODE_POD_LEVEL if bare.has_pod_level_resources else MODE_CLASSIC
        if not has_budget(self.cpu_manager, pod, pod_scope=self.pod_scope):
            record = AdmittedPod(spec=bare, mode=mode)
            nodes = [n for n in mems if n in self.topology.numa_nodes]
            if self.pod_scope and claimed:
                record.hint = TopologyHint(numa_mask(self.topology, claimed), True)
            elif self.pod_scope and nodes:
                record.hint = TopologyHint(mask_of(nodes), True)
            elif self.pod_scope and aggregate:
                try:
                    self.admit_sandbox(pod, aggregate)
                    return EMPTY
                except AdmissionError:
                    record.hint = None  # the pod runs already: admitted without a pod hint
            self._pods[uid] = record
            return EMPTY
        total = self.cpu_manager.pod_guaranteed_cpus(bare)
        affinity = numa_mask(self.topology, claimed) if claimed else None
        try:
            bubble = self.cpu_manager.adopt_pod_cpus(uid, claimed, total, affinity, avoid)
        except ValueError as err:
            raise AdoptionError(f"pod {uid}: {err}") from err
        hint = TopologyHint(numa_mask(self.topology, bubble), True)
        try:
            self.memory_manager.allocate_pod_budget(bare, hint)
        except AdmissionError as err:
            self._rollback(uid)
            raise AdoptionError(f"pod {uid}: memory budget: {err.message}") from err
        self._pods[uid] = AdmittedPod(spec=bare, mode=mode, hint=hint)
        return bubble

    def adopt_container(
        self, pod_uid: str, container: ContainerSpec, cpus: CPUSet, mems: CPUSet
    ) -> ContainerAssignment:
        """Record a running container of an admitted pod with the exclusive ``cpus`` it runs on,
        after checking the engine could hold it now: free CPUs, as many as the request, a
        pod-level pod's slices passing the pod budget's check (:class:`PodBudget`).

        Only containers entitled to exclusive CPUs are adopted this way (shared ones get their
        pool through :meth:`add_container`). Memory is charged on the NUMA nodes of ``mems``
        (of ``cpus`` when empty). Raises ``AdoptionError``; nothing changes then.
        """
        record = self._pods.get(pod_uid)
        name = container.name
        if record is None or record.mode == MODE_WHOLE:
            raise AdoptionError(f"pod {pod_uid}: not admitted from its NRI budget")
        if any(c.name == name for c in record.containers):
            raise AdoptionError(f"container {name}: already placed")
        record.containers.append(container)
        try:
            self._adopt(record, container, cpus, mems)
        except AdoptionError:
            record.containers.remove(container)
            raise
        return self._assignment_of(pod_uid, name)

    def _adopt(
        self, record: AdmittedPod, container: ContainerSpec, cpus: CPUSet, mems: CPUSet
    ) -> None:
        cpu, mem, tm = self.cpu_manager, self.memory_manager, self.topology_manager
        spec = record.spec_so_far()
        uid, name = spec.uid, container.name
        n = cpu.guaranteed_cpus(spec, container)
        if n == 0:
            raise AdoptionError(f"container {name}: not entitled to exclusive cpus")
        if len(cpus) != n:
            raise AdoptionError(
                f"container {name}: runs on {cpus or 'every cpu'}, requests {n} cpus"
            )
        if not cpu.keeps_whole_cores(cpus):
            raise AdoptionError(f"container {name}: cpus {cpus} are not whole cores")
        if record.mode == MODE_POD_LEVEL and self.pod_scope and cpu.pod_cpus(uid) is not None:
            budget = self.budget
            memory = mem.container_requests(spec, container)
            try:
                budget.check(record, name, n, memory)
                budget.carve(record, name, n, memory, cpus)
            except (AdmissionError, ValueError) as err:
                raise AdoptionError(f"container {name}: {err}") from err
            return
        try:
            cpu.adopt_container_cpus(uid, name, cpus)
        except ValueError as err:
            raise AdoptionError(f"container {name}: {err}") from err
        nodes = [n for n in mems if n in self.topology.numa_nodes]
        hint = TopologyHint(mask_of(nodes) if nodes else numa_mask(self.topology, cpus), True)
        try:
            mem.allocate(spec, container, hint)
        except AdmissionError as err:
            cpu.remove_container(uid, name)
            raise AdoptionError(f"container {name}: memory: {err.message}") from err
        if tm.policy != POLICY_NONE:
            tm.set_affinity(uid, name, hint)

    def place_in_node_pool(self, pod: PodSpec, name: str) -> ContainerAssignment:
        """Record a running container that cannot get its allocation in the node shared pool
        (it then follows every change of that pool); the pod is recorded without resources
        when the engine does not know it."""
        uid = pod.uid
        record = self._pods.get(uid)
        if record is None:
            bare = PodSpec(uid=uid, namespace=pod.namespace, name=pod.name)
            record = AdmittedPod(spec=bare, mode=MODE_CLASSIC)
            self._pods[uid] = record
        if record.mode != MODE_WHOLE and all(c.name != name for c in record.containers):
            record.containers.append(ContainerSpec(name))
        self._node_shared.add((uid, name))
        return self._assignment_of(uid, name)

    # -- in-place resize (nri_plrm/engine/resize.py) -------------------------------------------

    def pod_so_far(self, pod_uid: str) -> PodSpec | None:
        """The pod as known now (whole spec, or budget plus the containers seen), or None."""
        record = self._pods.get(pod_uid)
        if record is None:
            return None
        return record.spec if record.mode == MODE_WHOLE else record.spec_so_far()

    def container_spec(self, pod_uid: str, name: str) -> ContainerSpec | None:
        """The spec of a container as known now (:meth:`pod_so_far`'s), or None."""
        record = self._pods.get(pod_uid)
        if record is None:
            return None
        if record.mode == MODE_WHOLE:
            return record.spec.container(name)
        return next((c for c in record.containers if c.name == name), None)

    def admitted(self, pod_uid: str) -> AdmittedPod | None:
        """What the engine holds for an admitted pod (for the resize rules), or None."""
        return self._pods.get(pod_uid)

    def is_stopped(self, pod_uid: str, name: str) -> bool:
        """True for a container reported exited (NRI ``StopContainer``) and not restarted."""
        record = self._pods.get(pod_uid)
        return record is not None and name in record.stopped

    def current(self, pod_uid: str, name: str) -> ContainerAssignment:
        """A container's assignment as the managers hold it now."""
        return self._assignment_of(pod_uid, name)

    def changes_since(self, before: CPUSet, exclude: tuple[str, str] | None = None) -> Changes:
        """Every node-shared container (but ``exclude``) when the node shared pool moved."""
        return self._changes_since(before, exclude)

    @contextmanager
    def net_changes(self) -> Iterator[Changes]:
        """A compound decision (several calls that make one change, e.g. a pod re-admitted and
        its next container placed): calls inside report only the containers of their own pod;
        the node-shared containers are added to the yielded dict once, at exit (also when the
        block raised), and only when the node shared pool ended where it did not start (a pool
        that moved away and back changed no container). Nested blocks defer to the outermost."""
        before = self.cpu_manager.default_cpuset
        net: Changes = {}
        self._deferred += 1
        try:
            yield net
        finally:
            self._deferred -= 1
            if not self._deferred:
                net.update(self._changes_since(before))

    # -- bookkeeping ---------------------------------------------------------------------------

    def _changes_since(self, before: CPUSet, exclude: tuple[str, str] | None = None) -> Changes:
        """Every node-shared container (but ``exclude``) when the node shared pool moved
        (nothing inside :meth:`net_changes`, which reports them at its end)."""
        if self._deferred or self.cpu_manager.default_cpuset == before:
            return {}
        return {
            key: self._assignment_of(*key) for key in sorted(self._node_shared) if key != exclude
        }

    def _assignment_of(self, pod_uid: str, name: str) -> ContainerAssignment:
        cpu, mem = self.cpu_manager, self.memory_manager
        if cpu.state.get_cpuset(pod_uid, name) is None and not mem.state.get_blocks(pod_uid, name):
            return self.node_shared_assignment()
        atype = cpu.assignment_type(pod_uid, name)
        blocks = mem.container_blocks(pod_uid, name) or ()
        mems = CPUSet(mem.numa_nodes_for(pod_uid, name))
        reported = () if atype is AssignmentType.POD_SHARED else blocks
        return ContainerAssignment(atype, cpu.cpus_for(pod_uid, name), mems, reported)

    # -- queries -------------------------------------------------------------------------------

    def assignment(self, pod_uid: str, name: str) -> ContainerAssignment | None:
        """A known container's current assignment, or None."""
        if (pod_uid, name) in self._node_shared:  # known: the set forgets removed containers
            return self._assignment_of(pod_uid, name)
        record = self._pods.get(pod_uid)
        if record is None:
            return None
        if record.mode == MODE_WHOLE:
            if record.spec.container(name) is None and (pod_uid, name) not in self._node_shared:
                return None
        elif all(c.name != name for c in record.containers):
            return None
        return self._assignment_of(pod_uid, name)

    def assignments(self) -> dict[tuple[str, str], ContainerAssignment]:
        """Every known container's assignment."""
        out: dict[tuple[str, str], ContainerAssignment] = {}
        for uid, record in self._pods.items():
            names = record.container_names()
            names += [n for n in self._node_shared.names(uid) if n not in names]
            for name in names:
                out[(uid, name)] = self._assignment_of(uid, name)
        return out

    def pods(self) -> tuple[str, ...]:
        """Admitted pod uids."""
        return tuple(self._pods)

    def pod_spec(self, pod_uid: str) -> PodSpec | None:
        """The full spec of a pod admitted whole (:meth:`admit_pod`), else None."""
        record = self._pods.get(pod_uid)
        return record.spec if record is not None and record.mode == MODE_WHOLE else None

    def node_shared_pool(self) -> CPUSet:
        """The node shared pool (the CPU manager's default set)."""
        return self.cpu_manager.default_cpuset

    def node_shared_assignment(self) -> ContainerAssignment:
        """The assignment of every container on the node shared pool without memory of its
        own: one object per pool (a new one once the pool moved), shared by every such
        container (they all run there)."""
        default = self.cpu_manager.state.default
        if self._on_default.cpus is not default:
            self._on_default = ContainerAssignment(AssignmentType.NODE_SHARED, default, CPUSet())
        return self._on_default

    def pod_cpus(self, pod_uid: str) -> CPUSet | None:
        """The CPUs reserved for a pod-level pod (its bubble), or None."""
        return self.cpu_manager.pod_cpus(pod_uid)

    def pod_memory(self, pod_uid: str) -> tuple[MemoryBlock, ...]:
        """The memory reserved for a pod-level pod (empty when none)."""
        return self.memory_manager.pod_blocks(pod_uid) or ()

    def allocatable(self) -> Allocatable:
        """CPUs (all minus reserved) and memory per NUMA node and type."""
        return Allocatable(
            self.cpu_manager.allocatable_cpus(), tuple(self.memory_manager.allocatable())
        )

    # -- state ---------------------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """JSON-able state: managers, affinities, pod records, format version."""
        affinity: dict[str, dict[str, Any]] = {}
        for uid, record in self._pods.items():
            for name in record.container_names():
                hint = self.topology_manager.get_affinity(uid, name)
                if hint.numa_affinity is not None or hint.preferred:
                    affinity.setdefault(uid, {})[name] = self.forms.form(hint, hint_to_dict)
        pods = {uid: r.to_dict(self.forms) for uid, r in self._pods.items()}
        self.forms.done()
        return {
            "format": SNAPSHOT_FORMAT,
            "cpu": self.cpu_manager.snapshot(),
            "memory": self.memory_manager.snapshot(),
            "affinity": affinity,
            "pods": pods,
            "nodeShared": sorted([list(k) for k in self._node_shared]),
        }

    @classmethod
    def restore(cls, topology: Topology, config: EngineConfig, data: Mapping[str, Any]) -> Engine:
        """Rebuild an engine from :meth:`snapshot` output (newer formats are refused)."""
        version = data.get("format")
        if not isinstance(version, int) or version < 1 or version > SNAPSHOT_FORMAT:
            raise EngineStateError(
                f"engine snapshot format {version!r}: this version reads formats 1 to "
                f"{SNAPSHOT_FORMAT}"
            )
        engine = cls(topology, config)
        try:
            engine.cpu_manager = CPUManager.restore(
                topology,
                config.cpu_manager,
                data.get("cpu", {}),
                topology_manager_policy=config.topology_manager.policy,
            )
            engine.memory_manager = MemoryManager.restore(
                topology, config.memory_manager, data.get("memory", {})
            )
            engine.budget = PodBudget(
                engine.cpu_manager, engine.memory_manager, engine._assignment_of
            )
            for uid, names in dict(data.get("affinity", {})).items():
                for name, hint in dict(names).items():
                    engine.topology_manager.set_affinity(str(uid), str(name), hint_from_dict(hint))
            engine._pods = {
                str(uid): AdmittedPod.from_dict(r) for uid, r in dict(data.get("pods", {})).items()
            }
            shared = data.get("nodeShared", [])
            engine._node_shared = NodeSharedSet((str(u), str(n)) for u, n in shared)
        except (KeyError, TypeError, ValueError) as err:
            raise EngineStateError(f"engine snapshot: {err}") from err
        return engine

    def verify(self) -> list[str]:
        """Invariant violations (empty when consistent); for tests and the ``state`` command."""
        cpu, mem = self.cpu_manager, self.memory_manager
        problems = accounting_problems(self.topology, self.config.memory_manager, cpu, mem)
        return problems + placement_problems(cpu, self._pods, self._node_shared)
