"""CPU Manager ``static`` policy with pod-level resource managers (KEP-5526), kubelet-exact.

State as in the kubelet's ``cpu_manager_state``: the default set (the node shared pool),
container entries and pod entries (the "bubble" of a pod-level pod). Driven whole
(``allocate``/``allocate_pod``, as ``policy_static.go``) or incrementally for NRI
(``allocate_pod_bubble``, ``take_from_pod``, ``set_container_cpus``,
``release_container_slice``). On purpose unlike the kubelet: a failed allocation leaves no
partial state, ``allocate_pod`` reuses an existing pod entry (kubernetes issue #140989), and
init-container CPU reuse is derived from the saved entries (:meth:`CPUManager.reusable_cpus`)
rather than kept in memory, so neither other pods nor a restart in between change it.
Go map iteration is replaced by spec order and ascending ids.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from nri_plrm.base.cpuset import EMPTY, CPUSet
from nri_plrm.engine.cpu_assignment import (
    CPUAllocationError,
    topology_index,
)
from nri_plrm.engine.cpu_hints import generate_cpu_hints
from nri_plrm.engine.cpu_options import (
    CPUManagerConfig,
    CPUManagerConfigError,
    validate_static_policy_options,
)
from nri_plrm.engine.cpu_requests import (
    guaranteed_cpus,
    pod_guaranteed_cpus,
    qualifies_for_exclusive_cpus,
    validate_pod_scope_resources,
)
from nri_plrm.engine.cpu_state import parse_state, reusable_init_cpus, validate_state
from nri_plrm.engine.cpu_takes import KeptTakes
from nri_plrm.engine.spec import (
    CPU,
    EMPTY_POD_SHARED_POOL_ERROR,
    SMT_ALIGNMENT_ERROR,
    AdmissionError,
    AssignmentType,
    ContainerSpec,
    HintMap,
    PodSpec,
    TopologyHint,
    unexpected,
)
from nri_plrm.engine.topology_manager import HintList
from nri_plrm.topology.model import Topology

POLICY_STATIC = "static"

ISOLATION_HOST = "host"
ISOLATION_POD = "pod"
ISOLATION_CONTAINER = "container"

T = TypeVar("T")


class CPUManager:
    """The static policy's state and decisions for one node (see the module docstring)."""

    def __init__(
        self,
        topology: Topology,
        config: CPUManagerConfig,
        *,
        topology_manager_policy: str = "none",
    ) -> None:
        self.topology = topology
        self.config = config
        self.options = config.policy_options()
        validate_static_policy_options(self.options, topology, topology_manager_policy)
        self._ix = topology_index(topology)
        self._plrm = config.pod_level_resource_managers
        self._takes = KeptTakes(topology, self.options.take_options)
        self._reserved = self._pick_reserved()
        self._reserved_physical = CPUSet.from_mask(self._ix.siblings_mask(self._reserved.mask))
        self._all = topology.all_cpus
        self._default = self._initial_default()
        self._entries: dict[str, dict[str, CPUSet]] = {}
        self._pod_entries: dict[str, CPUSet] = {}
        self._pool_consumers: dict[str, set[str]] = {}
        self._exclusive_inits: dict[str, set[str]] = {}

    # -- configuration -----------------------------------------------------------------------
    def _pick_reserved(self) -> CPUSet:
        explicit = self.config.reserved_cpus
        count = self.config.reserved_cpu_count
        if explicit is not None and not explicit.is_empty():
            outside = explicit - self.topology.all_cpus
            if outside:
                raise CPUManagerConfigError(
                    f'[cpumanager] reserved cpus "{explicit}": cpus "{outside}" are not online '
                    f'on this machine ("{self.topology.all_cpus}")'
                )
            if count is not None and count != len(explicit):
                raise CPUManagerConfigError(
                    f"[cpumanager] unable to reserve the required amount of CPUs "
                    f"(size of {explicit} did not equal {count})"
                )
            return explicit
        if count is None or count < 0:
            raise CPUManagerConfigError(
                "[cpumanager] the static policy requires systemreserved.cpu + kubereserved.cpu "
                f"to be greater than zero (reserved_cpus or reserved_cpu_count; got {count})"
            )
        if count == 0:
            return EMPTY
        try:
            reserved = self._take_by_topology(self.topology.all_cpus, count)
        except CPUAllocationError:
            reserved = EMPTY
        if len(reserved) != count:
            raise CPUManagerConfigError(
                f"[cpumanager] unable to reserve the required amount of CPUs "
                f"(size of {reserved} did not equal {count})"
            )
        return reserved

    def _initial_default(self) -> CPUSet:
        if self.options.strict_cpu_reservation:
            return self.topology.all_cpus - self._reserved
        return self.topology.all_cpus

    # -- queries -----------------------------------------------------------------------------
    @property
    def default_cpuset(self) -> CPUSet:
        """The node shared pool (the kubelet's ``defaultCPUSet``)."""
        return self._default

    @property
    def reserved_cpus(self) -> CPUSet:
        """CPUs never handed out exclusively."""
        return self._reserved

    def available_cpus(self) -> CPUSet:
        """CPUs exclusive allocations can take now: default set minus reserved."""
        return self._default - self._reserved

    def allocatable_cpus(self) -> CPUSet:
        """All CPUs minus reserved (PodResources ``GetAllocatableResources``)."""
        return self._all - self._reserved

    def assignment(self, pod_uid: str, name: str) -> CPUSet | None:
        """The container's state entry, or None (it then runs on the default set)."""
        return self._entries.get(pod_uid, {}).get(name)

    def cpus_for(self, pod_uid: str, name: str) -> CPUSet:
        """``GetCPUSetOrDefault``: the container's entry, else the node shared pool."""
        entry = self.assignment(pod_uid, name)
        return self._default if entry is None else entry

    def pod_cpus(self, pod_uid: str) -> CPUSet | None:
        """The pod entry (bubble) of a pod-level pod, or None."""
        return self._pod_entries.get(pod_uid)

    def entries(self) -> dict[str, dict[str, CPUSet]]:
        """A copy of every container entry."""
        return {uid: dict(names) for uid, names in self._entries.items() if names}

    def pod_entries(self) -> dict[str, CPUSet]:
        """A copy of every pod entry."""
        return dict(self._pod_entries)

    def pod_shared_pool(self, pod_uid: str) -> CPUSet:
        """The pod shared pool: bubble minus the pod's live exclusive slices (empty: no bubble)."""
        bubble = self._pod_entries.get(pod_uid)
        if bubble is None:
            return EMPTY
        held = 0
        entries = self._entries.get(pod_uid, {})
        for name in self._pool_consumers.get(pod_uid, ()):
            if name in entries:
                held |= entries[name].mask
        return CPUSet.from_mask(bubble.mask & ~held)

    def guaranteed_cpus(self, pod: PodSpec, container: ContainerSpec) -> int:
        """Exclusive CPUs the container is entitled to (0 = shared), per ``guaranteedCPUs``."""
        return guaranteed_cpus(pod, container, plrm=self._plrm)

    def pod_guaranteed_cpus(self, pod: PodSpec) -> int:
        """The pod's CPU budget (pod-level) or the kubelet's aggregate (classic pods)."""
        return pod_guaranteed_cpus(pod, plrm=self._plrm)

    def validate_pod_scope_resources(self, pod: PodSpec) -> str | None:
        """The kubelet's empty-pod-shared-pool check: its exact message, or None."""
        return validate_pod_scope_resources(pod, plrm=self._plrm)

    def isolation_level(self, pod: PodSpec, container: ContainerSpec) -> str:
        """``GetResourceIsolationLevel``: ``host``, ``pod`` or ``container``."""
        if self.assignment(pod.uid, container.name) is None:
            return ISOLATION_HOST
        if (
            self._plrm
            and pod.has_pod_level_resources
            and not qualifies_for_exclusive_cpus(container)
        ):
            return ISOLATION_POD
        return ISOLATION_CONTAINER

    def assignment_type(self, pod_uid: str, name: str) -> AssignmentType:
        """How the container's CPUs were decided (metrics label and ``simulate`` output)."""
        if self.assignment(pod_uid, name) is None:
            return AssignmentType.NODE_SHARED
        if pod_uid not in self._pod_entries:
            return AssignmentType.NODE_EXCLUSIVE
        if name in self._pool_consumers.get(pod_uid, ()) or name in self._init_slices(pod_uid):
            return AssignmentType.POD_EXCLUSIVE
        return AssignmentType.POD_SHARED

    def _init_slices(self, pod_uid: str) -> set[str]:
        return self._exclusive_inits.get(pod_uid, set())

    # -- policy primitives -------------------------------------------------------------------
    def _take_by_topology(self, available: CPUSet, n: int) -> CPUSet:
        return self._takes.take(available, n)

    def require_whole_cores(self, n: int) -> None:
        """With ``full-pcpus-only``, refuse ``n`` CPUs that are not whole cores."""
        group = self.topology.cpus_per_core
        if self.options.full_pcpus_only and n % group:
            raise AdmissionError(
                SMT_ALIGNMENT_ERROR,
                f"SMT Alignment Error: requested {n} cpus not multiple cpus per core = {group}",
            )

    def _enforce_smt_alignment(self, n: int) -> None:
        if not self.options.full_pcpus_only:
            return
        self.require_whole_cores(n)
        group = self.topology.cpus_per_core
        physical = len(self._default - self._reserved_physical)
        if n > physical:
            raise AdmissionError(
                SMT_ALIGNMENT_ERROR,
                "SMT Alignment Error: not enough free physical CPUs: available physical CPUs = "
                f"{physical}, requested CPUs = {n}, CPUs per core = {group}",
            )

    def _aligned_cpus(self, affinity: int, allocatable: CPUSet) -> CPUSet:
        ix = self._ix
        if self.options.align_by_socket:
            mask = 0
            for socket in ix.sockets_of_numa_mask(affinity):
                mask |= ix.socket_mask[socket]
            return CPUSet.from_mask(allocatable.mask & mask)
        return CPUSet.from_mask(allocatable.mask & ix.cpus_in_numa_mask(affinity))

    def allocate_cpus(self, n: int, affinity: int | None, reusable: CPUSet = EMPTY) -> CPUSet:
        """The kubelet's ``allocateCPUs``: NUMA-aligned CPUs first, then any; shrinks the default.

        Raises :class:`CPUAllocationError` (nothing changed) when the CPUs cannot be found.
        """
        allocatable = self.available_cpus() | reusable
        result = EMPTY
        if affinity is not None:
            aligned = self._aligned_cpus(affinity, allocatable)
            result = self._take_by_topology(aligned, min(n, len(aligned)))
        result = result | self._take_by_topology(allocatable - result, n - len(result))
        self._default = self._default - result
        return result

    def reusable_cpus(self, pod: PodSpec, name: str | None = None) -> CPUSet:
        """Init-container CPUs container ``name`` of the pod may reuse (the kubelet's
        ``cpusToReuse``), derived from the saved entries: see :func:`reusable_init_cpus`. Empty
        for a pod with a pod entry: its init slices are reused inside the bubble."""
        entries = self._entries.get(pod.uid)
        if not entries or pod.uid in self._pod_entries:
            return EMPTY
        return reusable_init_cpus(pod, entries, name)

    def _gates_skip(self, pod: PodSpec) -> bool:
        return not self._plrm and pod.has_pod_level_resources

    # -- hints -------------------------------------------------------------------------------
    def _generate_hints(self, available: CPUSet, reusable: CPUSet, request: int) -> HintList:
        return generate_cpu_hints(
            self.topology,
            available,
            reusable,
            request,
            align_by_socket=self.options.align_by_socket,
        )

    def get_topology_hints(self, pod: PodSpec, container: ContainerSpec) -> HintMap:
        """Container-scope hints (``GetTopologyHints``); None means "no preference"."""
        requested = self.guaranteed_cpus(pod, container)
        if requested == 0 or self._gates_skip(pod):
            return {}
        allocated = self.assignment(pod.uid, container.name)
        if allocated is not None:
            if len(allocated) != requested:
                return {CPU: []}
            return {CPU: self._generate_hints(allocated, EMPTY, requested)}
        reusable = self.reusable_cpus(pod, container.name)
        return {CPU: self._generate_hints(self.available_cpus(), reusable, requested)}

    def get_pod_topology_hints(self, pod: PodSpec) -> HintMap:
        """Pod-scope hints (``GetPodTopologyHints``): pod budget or the classic aggregate. The
        kubelet's reusable set (``cpusToReuse`` plus the CPUs already assigned) is the assigned
        CPUs here: :meth:`reusable_cpus` is a subset of them."""
        requested = self.pod_guaranteed_cpus(pod)
        if requested == 0 or self._gates_skip(pod):
            return {}
        if (
            self._plrm
            and pod.has_pod_level_resources
            and self.validate_pod_scope_resources(pod) is not None
        ):
            return {CPU: []}
        assigned = EMPTY
        for container in pod.all_containers():
            allocated = self.assignment(pod.uid, container.name)
            if allocated is None:
                continue
            if len(allocated) != self.guaranteed_cpus(pod, container):
                return {CPU: []}
            assigned = assigned | allocated
        if len(assigned) == requested:
            return {CPU: self._generate_hints(assigned, EMPTY, requested)}
        return {CPU: self._generate_hints(self.available_cpus(), assigned, requested)}

    # -- allocation: kubelet paths -----------------------------------------------------------
    def allocate(self, pod: PodSpec, container: ContainerSpec, hint: TopologyHint | None) -> None:
        """Container path (``Allocate``): exclusive CPUs from the node pool for an eligible one.

        Idempotent: an existing entry is kept. Raises :class:`AdmissionError` with the kubelet's
        reason and message.
        """
        n = self.guaranteed_cpus(pod, container)
        if n == 0 or self._gates_skip(pod):
            return
        self._enforce_smt_alignment(n)
        if self.assignment(pod.uid, container.name) is not None:
            return
        affinity = hint.numa_affinity if hint is not None else None
        reusable = self.reusable_cpus(pod, container.name)
        try:
            cpus = self.allocate_cpus(n, affinity, reusable)
        except CPUAllocationError as err:
            raise unexpected(str(err)) from err
        self._entries.setdefault(pod.uid, {})[container.name] = cpus

    def allocate_pod(self, pod: PodSpec, hint: TopologyHint | None) -> None:
        """Pod scope with pod-level resources (``AllocatePod``): bubble, slices, pod shared pool.

        ``hint`` is the Topology Manager's pod hint (the affinity stored for the first
        container). Idempotent: a pod that already has a pod entry keeps its bubble and its
        container entries. Raises :class:`AdmissionError`; on error nothing is changed.
        """
        total = self.pod_guaranteed_cpus(pod)
        if total == 0:
            return
        saved_default = self._default
        existing = self._pod_entries.get(pod.uid)
        try:
            message = self.validate_pod_scope_resources(pod)
            if message is not None:
                raise AdmissionError(EMPTY_POD_SHARED_POOL_ERROR, message)
            if existing is None:
                self._enforce_smt_alignment(total)
                affinity = hint.numa_affinity if hint is not None else None
                bubble = self._allocate_or_admission_error(total, affinity)
            else:
                bubble = existing
            partition, consumers, init_slices = self._partition(pod, bubble)
        except AdmissionError:
            self._default = saved_default
            raise
        self._pod_entries[pod.uid] = bubble
        entries = self._entries.setdefault(pod.uid, {})
        for container in pod.all_containers():
            if container.name not in entries:
                entries[container.name] = partition[container.name]
        self._pool_consumers.setdefault(pod.uid, set()).update(consumers)
        self._exclusive_inits.setdefault(pod.uid, set()).update(init_slices)

    def _allocate_or_admission_error(self, n: int, affinity: int | None) -> CPUSet:
        try:
            return self.allocate_cpus(n, affinity, EMPTY)
        except CPUAllocationError as err:
            raise unexpected(str(err)) from err

    def _partition(
        self, pod: PodSpec, bubble: CPUSet
    ) -> tuple[dict[str, CPUSet], set[str], set[str]]:
        exclusive: dict[str, CPUSet] = {}
        consumers: set[str] = set()
        init_slices: set[str] = set()
        sidecars = EMPTY
        for container in pod.init_containers:
            n = self.guaranteed_cpus(pod, container)
            if n > 0:
                cpus = self._take_or_admission_error(bubble - sidecars, n)
                exclusive[container.name] = cpus
                if container.restartable:
                    sidecars = sidecars | cpus
                    consumers.add(container.name)
                else:
                    init_slices.add(container.name)
            elif not container.restartable:
                exclusive[container.name] = bubble - sidecars
        pool = bubble - sidecars
        for container in pod.containers:
            n = self.guaranteed_cpus(pod, container)
            if n > 0:
                cpus = self._take_or_admission_error(pool, n)
                exclusive[container.name] = cpus
                consumers.add(container.name)
                pool = pool - cpus
        partition: dict[str, CPUSet] = {}
        for container in pod.all_containers():
            partition[container.name] = exclusive.get(container.name, pool)
        return partition, consumers, init_slices

    def _take_or_admission_error(self, available: CPUSet, n: int) -> CPUSet:
        try:
            return self._take_by_topology(available, n)
        except CPUAllocationError as err:
            raise unexpected(str(err)) from err

    # -- allocation: incremental primitives --------------------------------------------------
    def allocate_pod_bubble(self, pod: PodSpec, hint: TopologyHint | None) -> CPUSet:
        """Reserve the pod budget (``allocateCPUs(total, hint)``) before any container is known.

        Idempotent: an existing pod entry is returned unchanged. Returns the empty set for pods
        without a Guaranteed integral CPU budget. Raises :class:`AdmissionError`.
        """
        existing = self._pod_entries.get(pod.uid)
        if existing is not None:
            return existing
        total = self.pod_guaranteed_cpus(pod)
        if total == 0:
            return EMPTY
        self._enforce_smt_alignment(total)
        affinity = hint.numa_affinity if hint is not None else None
        bubble = self._allocate_or_admission_error(total, affinity)
        self._pod_entries[pod.uid] = bubble
        return bubble

    def take_from_pod(self, pod_uid: str, name: str, n: int) -> CPUSet:
        """Carve an exclusive slice of ``n`` CPUs out of the pod shared pool and record it.

        Idempotent: a container that already holds a live slice keeps it; a restarted container
        whose released slice is still wholly in the pool gets it back. Raises
        :class:`AdmissionError` (``UnexpectedAdmissionError``, the kubelet's takeByTopology
        text) when the pool is too small, and ValueError when the pod has no pod entry.
        """
        if pod_uid not in self._pod_entries:
            raise ValueError(f"pod {pod_uid}: has no pod-level cpuset; allocate its bubble first")
        entries = self._entries.setdefault(pod_uid, {})
        consumers = self._pool_consumers.setdefault(pod_uid, set())
        existing = entries.get(name)
        if existing is not None and name in consumers:
            return existing
        pool = self.pod_shared_pool(pod_uid)
        if existing is not None and len(existing) == n and existing <= pool:
            consumers.add(name)
            return existing
        cpus = self._take_or_admission_error(pool, n)
        entries[name] = cpus
        consumers.add(name)
        return cpus

    def set_container_cpus(self, pod_uid: str, name: str, cpus: CPUSet) -> None:
        """Record a container entry that does not consume the pod pool (e.g. a shared container
        pinned to the pod shared pool); replaces an existing entry."""
        outside = cpus - self._all
        if outside:
            raise ValueError(
                f"pod {pod_uid}, container {name}: cpus {outside} are not on this machine"
            )
        self._entries.setdefault(pod_uid, {})[name] = cpus
        self._pool_consumers.get(pod_uid, set()).discard(name)
        self._init_slices(pod_uid).discard(name)

    def set_pod_cpus(self, pod_uid: str, cpus: CPUSet) -> None:
        """Replace a pod-level pod's reserved CPUs (a pod budget resize; CPUs it gains come
        from :meth:`allocate_cpus`, CPUs it drops go back with :meth:`give_back`)."""
        self._pod_entries[pod_uid] = cpus

    def give_back(self, cpus: CPUSet) -> None:
        """Return CPUs an in-place resize took from a container or a pod to the shared pool."""
        self._default = self._default | cpus

    def release_container_slice(self, pod_uid: str, name: str) -> None:
        """Give an exited container's exclusive slice back to the pod shared pool.

        The entry is kept (a restart gets the same CPUs back when they are still free); the pod
        bubble is untouched. Idempotent.
        """
        self._pool_consumers.get(pod_uid, set()).discard(name)
        self._init_slices(pod_uid).discard(name)

    # -- release -----------------------------------------------------------------------------
    def remove_container(self, pod_uid: str, name: str) -> None:
        """``RemoveContainer``: drop the entry; a pod-level pod's bubble goes back to the node
        pool only with its last container entry; a classic container's CPUs go back unless a
        sibling still holds them. Idempotent."""
        entries = self._entries.get(pod_uid)
        if entries is None or name not in entries:
            return
        released = entries.pop(name)
        self._pool_consumers.get(pod_uid, set()).discard(name)
        self._init_slices(pod_uid).discard(name)
        bubble = self._pod_entries.get(pod_uid)
        if bubble is not None:
            if not entries:
                self._default = self._default | bubble
                self._forget_pod(pod_uid)
            return
        in_use = EMPTY.union(*entries.values())
        self._default = self._default | (released - in_use)
        if not entries:
            del self._entries[pod_uid]

    def remove_pod(self, pod_uid: str) -> None:
        """Release everything the pod holds (its bubble or its containers' CPUs). Idempotent."""
        bubble = self._pod_entries.get(pod_uid)
        held = EMPTY.union(*self._entries.get(pod_uid, {}).values())
        self._default = self._default | (bubble if bubble is not None else held)
        self._forget_pod(pod_uid)

    def _forget_pod(self, pod_uid: str) -> None:
        self._entries.pop(pod_uid, None)
        self._pod_entries.pop(pod_uid, None)
        self._pool_consumers.pop(pod_uid, None)
        self._exclusive_inits.pop(pod_uid, None)

    # -- one pod saved and put back (Engine.readmit) -------------------------------------------
    def save_pod(self, pod_uid: str) -> SavedPodCPUs:
        """The pod's entries and the default set now, for :meth:`restore_pod`."""
        entries = self._entries.get(pod_uid)
        consumers = self._pool_consumers.get(pod_uid)
        inits = self._exclusive_inits.get(pod_uid)
        return SavedPodCPUs(
            pod_uid,
            self._default,
            None if entries is None else dict(entries),
            self._pod_entries.get(pod_uid),
            None if consumers is None else set(consumers),
            None if inits is None else set(inits),
        )

    def restore_pod(self, saved: SavedPodCPUs) -> None:
        """Back to ``saved``: valid when only that pod changed since :meth:`save_pod`."""
        uid = saved.pod_uid
        self._default = saved.default
        _put(self._entries, uid, None if saved.entries is None else dict(saved.entries))
        _put(self._pod_entries, uid, saved.pod_entry)
        _put(self._pool_consumers, uid, _copied(saved.pool_consumers))
        _put(self._exclusive_inits, uid, _copied(saved.exclusive_inits))

    # -- checkpoint --------------------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        """JSON-able state: policy, default set, entries, pod entries, pool bookkeeping."""
        return {
            "policyName": POLICY_STATIC,
            "defaultCpuSet": str(self._default),
            "entries": {
                uid: {name: str(cpus) for name, cpus in sorted(names.items())}
                for uid, names in sorted(self._entries.items())
                if names
            },
            "podEntries": {uid: str(cpus) for uid, cpus in sorted(self._pod_entries.items())},
            "podPoolConsumers": {
                uid: sorted(names) for uid, names in sorted(self._pool_consumers.items()) if names
            },
            "podInitSlices": {
                uid: sorted(names) for uid, names in sorted(self._exclusive_inits.items()) if names
            },
        }

    @classmethod
    def restore(
        cls,
        topology: Topology,
        config: CPUManagerConfig,
        data: Mapping[str, Any],
        *,
        topology_manager_policy: str = "none",
    ) -> CPUManager:
        """Restore :meth:`snapshot` output, validated like the kubelet's ``validateState``.

        Raises :class:`CPUStateError` with the kubelet's messages when the state does not fit.
        """
        manager = cls(topology, config, topology_manager_policy=topology_manager_policy)
        saved = parse_state(data, POLICY_STATIC)
        manager.start_from_state(saved.default, saved.entries, saved.pod_entries)
        manager._pool_consumers = saved.pool_consumers
        manager._exclusive_inits = saved.init_slices
        return manager

    def start_from_state(
        self,
        default: CPUSet,
        entries: Mapping[str, Mapping[str, CPUSet]],
        pod_entries: Mapping[str, CPUSet] | None = None,
        *,
        validate: bool = True,
    ) -> None:
        """Replace the state (kubelet ``Start``): validated like ``validateState`` unless told not
        to; an empty default set with no entries initialises to all CPUs (minus reserved when
        strict). Raises :class:`CPUStateError`."""
        pods = dict(pod_entries or {})
        if validate:
            all_cpus = self._all
            if self.options.strict_cpu_reservation:
                all_cpus = all_cpus - self._reserved
            validate_state(
                default,
                entries,
                pods if self._plrm else {},
                all_cpus=all_cpus,
                reserved=self._reserved,
                strict=self.options.strict_cpu_reservation,
            )
        self._default = default if default or entries else self._initial_default()
        self._entries = {uid: dict(names) for uid, names in entries.items()}
        self._pod_entries = pods
        self._pool_consumers = {}
        self._exclusive_inits = {}


@dataclass(frozen=True)
class SavedPodCPUs:
    """One pod's CPU entries and the default set, as :meth:`CPUManager.save_pod` read them."""

    pod_uid: str
    default: CPUSet
    entries: dict[str, CPUSet] | None
    pod_entry: CPUSet | None
    pool_consumers: set[str] | None
    exclusive_inits: set[str] | None


def _put(table: dict[str, T], key: str, value: T | None) -> None:
    if value is None:
        table.pop(key, None)
    else:
        table[key] = value


def _copied(names: set[str] | None) -> set[str] | None:
    return None if names is None else set(names)
