"""CPU Manager ``static`` policy with pod-level resource managers (KEP-5526), kubelet-exact.

The kubelet's ``policy_static.go``: it decides, and records its decisions in a
:class:`~nri_plrm.engine.cpu_state.CPUState` (the default set, i.e. the node shared pool,
container entries and pod entries, the "bubble" of a pod-level pod). Driven whole
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
from nri_plrm.engine.cpu_state import (
    POLICY_STATIC,
    CPUState,
    parse_state,
    reusable_init_cpus,
    validate_state,
)
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

ISOLATION_HOST = "host"
ISOLATION_POD = "pod"
ISOLATION_CONTAINER = "container"

T = TypeVar("T")


class CPUManager:
    """The static policy's decisions for one node, recorded in :attr:`state` (see the module
    docstring)."""

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
        self.state = CPUState(self._initial_default())
        """What the policy decided (read it freely; change it only through the policy, or to
        record an allocation as it already runs: :mod:`~nri_plrm.engine.adoption`)."""

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
        return self.state.default

    @property
    def reserved_cpus(self) -> CPUSet:
        """CPUs never handed out exclusively."""
        return self._reserved

    def available_cpus(self) -> CPUSet:
        """CPUs exclusive allocations can take now: default set minus reserved."""
        return self.state.default - self._reserved

    def allocatable_cpus(self) -> CPUSet:
        """All CPUs minus reserved (PodResources ``GetAllocatableResources``)."""
        return self._all - self._reserved

    def assignment(self, pod_uid: str, name: str) -> CPUSet | None:
        """The container's state entry, or None (it then runs on the default set)."""
        return self.state.get_cpuset(pod_uid, name)

    def cpus_for(self, pod_uid: str, name: str) -> CPUSet:
        """``GetCPUSetOrDefault``: the container's entry, else the node shared pool."""
        return self.state.get_cpuset_or_default(pod_uid, name)

    def pod_cpus(self, pod_uid: str) -> CPUSet | None:
        """The pod entry (bubble) of a pod-level pod, or None."""
        return self.state.pod_cpus(pod_uid)

    def entries(self) -> dict[str, dict[str, CPUSet]]:
        """A copy of every container entry."""
        return self.state.assignments()

    def pod_entries(self) -> dict[str, CPUSet]:
        """A copy of every pod entry."""
        return self.state.pod_entries()

    def pod_shared_pool(self, pod_uid: str) -> CPUSet:
        """The pod shared pool: bubble minus the pod's live exclusive slices (empty: no bubble)."""
        return self.state.pod_shared_pool(pod_uid)

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
        state = self.state
        if state.pod_cpus(pod_uid) is None:
            return AssignmentType.NODE_EXCLUSIVE
        if state.is_pool_consumer(pod_uid, name) or state.is_init_slice(pod_uid, name):
            return AssignmentType.POD_EXCLUSIVE
        return AssignmentType.POD_SHARED

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

    def keeps_whole_cores(self, cpus: CPUSet) -> bool:
        """True unless ``full-pcpus-only`` is on and ``cpus`` hold only part of a core."""
        if not self.options.full_pcpus_only:
            return True
        return self._ix.siblings_mask(cpus.mask) == cpus.mask

    def _enforce_smt_alignment(self, n: int) -> None:
        if not self.options.full_pcpus_only:
            return
        self.require_whole_cores(n)
        group = self.topology.cpus_per_core
        physical = len(self.state.default - self._reserved_physical)
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

    def allocate_cpus(
        self, n: int, affinity: int | None, reusable: CPUSet = EMPTY, *, exclude: CPUSet = EMPTY
    ) -> CPUSet:
        """The kubelet's ``allocateCPUs``: NUMA-aligned CPUs first, then any; shrinks the default.
        ``reusable``: CPUs it may take besides the free ones; ``exclude``: CPUs it must not take.

        Raises :class:`CPUAllocationError` (nothing changed) when the CPUs cannot be found.
        """
        allocatable = self.available_cpus() | reusable
        if exclude:
            allocatable = allocatable - exclude
        result = EMPTY
        if affinity is not None:
            aligned = self._aligned_cpus(affinity, allocatable)
            result = self._take_by_topology(aligned, min(n, len(aligned)))
        result = result | self._take_by_topology(allocatable - result, n - len(result))
        self.state.set_default(self.state.default - result)
        return result

    def reusable_cpus(self, pod: PodSpec, name: str | None = None) -> CPUSet:
        """Init-container CPUs container ``name`` of the pod may reuse (the kubelet's
        ``cpusToReuse``), derived from the saved entries: see :func:`reusable_init_cpus`. Empty
        for a pod with a pod entry: its init slices are reused inside the bubble."""
        entries = self.state.pod_containers(pod.uid)
        if not entries or self.state.pod_cpus(pod.uid) is not None:
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
        self.state.set_cpuset(pod.uid, container.name, cpus)

    def allocate_pod(self, pod: PodSpec, hint: TopologyHint | None) -> None:
        """Pod scope with pod-level resources (``AllocatePod``): bubble, slices, pod shared pool.

        ``hint`` is the Topology Manager's pod hint (the affinity stored for the first
        container). Idempotent: a pod that already has a pod entry keeps its bubble and its
        container entries. Raises :class:`AdmissionError`; on error nothing is changed.
        """
        total = self.pod_guaranteed_cpus(pod)
        if total == 0:
            return
        state = self.state
        saved_default = state.default
        existing = state.pod_cpus(pod.uid)
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
            state.set_default(saved_default)
            raise
        state.set_pod(pod.uid, bubble)
        for container in pod.all_containers():
            if state.get_cpuset(pod.uid, container.name) is None:
                state.set_cpuset(pod.uid, container.name, partition[container.name])
        state.mark_pool_consumers(pod.uid, consumers)
        state.mark_init_slices(pod.uid, init_slices)

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
        existing = self.state.pod_cpus(pod.uid)
        if existing is not None:
            return existing
        total = self.pod_guaranteed_cpus(pod)
        if total == 0:
            return EMPTY
        self._enforce_smt_alignment(total)
        affinity = hint.numa_affinity if hint is not None else None
        bubble = self._allocate_or_admission_error(total, affinity)
        self.state.set_pod(pod.uid, bubble)
        return bubble

    def take_from_pod(self, pod_uid: str, name: str, n: int) -> CPUSet:
        """Carve an exclusive slice of ``n`` CPUs out of the pod shared pool and record it.

        Idempotent: a container that already holds a live slice keeps it; a restarted container
        whose released slice is still wholly in the pool gets it back. Raises
        :class:`AdmissionError` (``UnexpectedAdmissionError``, the kubelet's takeByTopology
        text) when the pool is too small, and ValueError when the pod has no pod entry.
        """
        state = self.state
        if state.pod_cpus(pod_uid) is None:
            raise ValueError(f"pod {pod_uid}: has no pod-level cpuset; allocate its bubble first")
        existing = state.get_cpuset(pod_uid, name)
        if existing is not None and state.is_pool_consumer(pod_uid, name):
            return existing
        pool = state.pod_shared_pool(pod_uid)
        if existing is not None and len(existing) == n and existing <= pool:
            state.mark_pool_consumers(pod_uid, (name,))
            return existing
        cpus = self._take_or_admission_error(pool, n)
        state.set_cpuset(pod_uid, name, cpus)
        state.mark_pool_consumers(pod_uid, (name,))
        return cpus

    def set_container_cpus(self, pod_uid: str, name: str, cpus: CPUSet) -> None:
        """Record a container entry that does not consume the pod pool (e.g. a shared container
        pinned to the pod shared pool); replaces an existing entry."""
        outside = cpus - self._all
        if outside:
            raise ValueError(
                f"pod {pod_uid}, container {name}: cpus {outside} are not on this machine"
            )
        self.state.set_cpuset(pod_uid, name, cpus)
        self.state.release_slice(pod_uid, name)

    def set_pod_cpus(self, pod_uid: str, cpus: CPUSet) -> None:
        """Replace a pod-level pod's reserved CPUs (a pod budget resize; CPUs it gains come
        from :meth:`allocate_cpus`, CPUs it drops go back with :meth:`give_back`)."""
        self.state.set_pod(pod_uid, cpus)

    def give_back(self, cpus: CPUSet) -> None:
        """Return CPUs an in-place resize took from a container or a pod to the shared pool."""
        self.state.set_default(self.state.default | cpus)

    def release_container_slice(self, pod_uid: str, name: str) -> None:
        """Give an exited container's exclusive slice back to the pod shared pool.

        The entry is kept (a restart gets the same CPUs back when they are still free); the pod
        bubble is untouched. Idempotent.
        """
        self.state.release_slice(pod_uid, name)

    # -- adoption: allocations recorded as they run ------------------------------------------
    def adopt_container_cpus(self, pod_uid: str, name: str, cpus: CPUSet) -> None:
        """Record ``cpus`` as a node-pool container entry as they are; raises ValueError
        (nothing changed) unless they are all free (in the node shared pool, not reserved)."""
        taken = cpus - self.available_cpus()
        if taken or not cpus:
            raise ValueError(f"cpus {taken or cpus} are not free for an exclusive allocation")
        self.state.set_cpuset(pod_uid, name, cpus)
        self.state.set_default(self.state.default - cpus)

    def adopt_pod_cpus(
        self, pod_uid: str, claimed: CPUSet, total: int, affinity: int | None, avoid: CPUSet
    ) -> CPUSet:
        """Record a pod entry of ``total`` CPUs that keeps ``claimed`` (free CPUs its running
        containers hold); the rest is allocated as ``allocateCPUs`` would, preferring CPUs
        outside ``avoid``. Returns the pod entry; raises ValueError (nothing changed) when that
        is impossible."""
        taken = claimed - self.available_cpus()
        if taken or len(claimed) > total:
            raise ValueError(f"pod cpus {claimed}: {taken or 'more than'} the budget of {total}")
        extra = EMPTY
        for excluded in (claimed | avoid, claimed):
            try:
                extra = self.allocate_cpus(total - len(claimed), affinity, exclude=excluded)
                break
            except CPUAllocationError as err:
                if excluded == claimed:
                    raise ValueError(f"pod budget of {total} cpus: {err}") from err
        bubble = claimed | extra
        self.state.set_default(self.state.default - claimed)
        self.state.set_pod(pod_uid, bubble)
        return bubble

    def adopt_pod_slice(self, pod_uid: str, name: str, cpus: CPUSet) -> None:
        """Record ``cpus`` as an exclusive slice of the pod's budget as they are; raises
        ValueError (nothing changed) unless they are all in the pod shared pool."""
        pool = self.state.pod_shared_pool(pod_uid)
        if not cpus or not cpus <= pool:
            raise ValueError(f"cpus {cpus - pool or cpus} are not free in the pod's budget {pool}")
        self.state.set_cpuset(pod_uid, name, cpus)
        self.state.mark_pool_consumers(pod_uid, (name,))

    # -- release -----------------------------------------------------------------------------
    def remove_container(self, pod_uid: str, name: str) -> None:
        """``RemoveContainer``: drop the entry; a pod-level pod's bubble goes back to the node
        pool only with its last container entry; a classic container's CPUs go back unless a
        sibling still holds them. Idempotent."""
        state = self.state
        released = state.delete(pod_uid, name)
        if released is None:
            return
        entries = state.pod_containers(pod_uid)
        bubble = state.pod_cpus(pod_uid)
        if bubble is not None:
            if not entries:
                state.set_default(state.default | bubble)
                state.remove_pod(pod_uid)
            return
        in_use = EMPTY.union(*entries.values())
        state.set_default(state.default | (released - in_use))

    def remove_pod(self, pod_uid: str) -> None:
        """Release everything the pod holds (its bubble or its containers' CPUs). Idempotent."""
        state = self.state
        bubble = state.pod_cpus(pod_uid)
        held = EMPTY.union(*state.pod_containers(pod_uid).values())
        state.set_default(state.default | (bubble if bubble is not None else held))
        state.remove_pod(pod_uid)

    # -- checkpoint --------------------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        """JSON-able state: policy, default set, entries, pod entries, pool bookkeeping."""
        return self.state.to_dict(POLICY_STATIC)

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
        manager.start_from_state(
            saved.default,
            saved.entries,
            saved.pod_entries,
            pool_consumers=saved.pool_consumers,
            init_slices=saved.init_slices,
        )
        return manager

    def start_from_state(
        self,
        default: CPUSet,
        entries: Mapping[str, Mapping[str, CPUSet]],
        pod_entries: Mapping[str, CPUSet] | None = None,
        *,
        pool_consumers: Mapping[str, set[str]] | None = None,
        init_slices: Mapping[str, set[str]] | None = None,
        validate: bool = True,
    ) -> None:
        """Replace the state (kubelet ``Start``): validated like ``validateState`` unless told not
        to; an empty default set with no entries initialises to all CPUs (minus reserved when
        strict); ``pool_consumers`` and ``init_slices`` mark the pod-level slices (none when
        not given). Raises :class:`CPUStateError`."""
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
        default = default if default or entries else self._initial_default()
        self.state.replace(default, entries, pods, pool_consumers, init_slices)
