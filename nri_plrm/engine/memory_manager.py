"""Memory Manager ``Static`` policy, kubelet-exact, with pod-level resources (KEP-5526).

The kubelet's ``policy_static.go``: it decides, charges the machine state and records blocks
(NUMA nodes, type, size) in a :class:`~nri_plrm.engine.memory_state.MemoryState`; pod-level
pods in pod scope get pod blocks charged once, and their containers' blocks are views of them.
Init-container reuse (the kubelet's ``initContainersReusableMemory``) is derived from the
blocks: see :meth:`MemoryManager.reusable`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

from nri_plrm.engine.bitmask import bits, mask_of
from nri_plrm.engine.cpu_requests import (
    QOS_GUARANTEED,
    effective_requests,
    is_container_equivalent_guaranteed,
    pod_qos,
)
from nri_plrm.engine.memory_hints import HintCalculator, regenerate_hints
from nri_plrm.engine.memory_state import (
    POLICY_STATIC,
    STATE_FORMAT,
    Block,
    MachineState,
    MemoryManagerConfig,
    MemoryManagerConfigError,
    MemoryState,
    MemoryStateError,
    block_from_dict,
    default_machine_state,
    machine_state_from_dict,
    machine_states_equal,
    memory_requests,
    ordered,
)
from nri_plrm.engine.spec import (
    EMPTY_POD_SHARED_POOL_ERROR,
    AdmissionError,
    ContainerKind,
    ContainerSpec,
    HintMap,
    MemoryBlock,
    PodSpec,
    TopologyHint,
)
from nri_plrm.topology.model import Topology

T = TypeVar("T")


def _pod_guaranteed(pod: PodSpec) -> bool:
    return pod_qos(pod) == QOS_GUARANTEED


class MemoryManager:
    """Hints and allocation of the Static policy, recorded in :attr:`state`."""

    def __init__(self, topology: Topology, config: MemoryManagerConfig) -> None:
        for node in config.reserved:
            if node not in topology.numa_nodes:
                raise MemoryManagerConfigError(
                    f"reserved memory names numa node {node}, which this machine does not have "
                    f"(nodes {list(topology.numa_ids)})"
                )
        self.topology = topology
        self.config = config
        self.state = MemoryState(default_machine_state(topology, config))
        """What the policy decided (read it freely; change it through the policy)."""
        self._hints = HintCalculator(topology.numa_ids)

    @property
    def machine_state(self) -> MachineState:
        """The machine state: memory tables per NUMA node (the state's)."""
        return self.state.machine_state

    @machine_state.setter
    def machine_state(self, machine_state: MachineState) -> None:
        self.state.set_machine_state(machine_state)

    @property
    def static(self) -> bool:
        """True for the Static policy (``None`` pins nothing)."""
        return self.config.policy == POLICY_STATIC

    # machine state ----------------------------------------------------------------------------

    def _charge(self, numa: tuple[int, ...], name: str, size: int) -> None:
        """``updateMachineState``: count the assignment on every node, take memory in order."""
        machine = self.state.machine_state
        for node in numa:
            state = machine[node]
            state.number_of_assignments += 1
            state.cells = list(numa)
            if size == 0:
                continue
            t = state.memory_map.get(name)
            if t is None or t.free <= 0:
                continue
            take = min(t.free, size)
            t.reserved += take
            t.free -= take
            size -= take

    def _release(self, blocks: Iterable[Block]) -> None:
        """``releaseMemory``: uncount the assignment, give memory back in node order."""
        machine = self.state.machine_state
        for b in blocks:
            size = b.size
            for node in b.numa:
                state = machine[node]
                state.number_of_assignments -= 1
                if state.number_of_assignments == 0:
                    state.cells = [node]
                if size == 0:
                    continue
                t = state.memory_map.get(b.type)
                if t is None or t.reserved == 0:
                    continue
                give = min(t.reserved, size)
                t.free += give
                t.reserved -= give
                size -= give

    # requests ---------------------------------------------------------------------------------

    def container_requests(self, pod: PodSpec, container: ContainerSpec) -> dict[str, int]:
        """``getContainerRequestedResources``: {} for non-equivalent-Guaranteed containers of
        pod-level pods; otherwise the container's memory and hugepages requests."""
        if pod.has_pod_level_resources and not is_container_equivalent_guaranteed(container):
            return {}
        return memory_requests(effective_requests(container.requests, container.limits))

    def pod_requests(self, pod: PodSpec) -> dict[str, int]:
        """``getPodRequestedResources``: pod-level memory/hugepages (> 0), or the classic
        aggregate ``max(largest init, apps + sidecars)`` for types the app containers request."""
        if pod.has_pod_level_resources:
            req = effective_requests(pod.requests, pod.limits)
            return memory_requests({k: v for k, v in req.items() if v > 0})
        by_init: dict[str, int] = {}
        by_sidecars: dict[str, int] = {}
        for c in pod.init_containers:
            for name, qty in self.container_requests(pod, c).items():
                by_init.setdefault(name, 0)
                if c.restartable:
                    by_sidecars[name] = by_sidecars.get(name, 0) + qty
                elif by_sidecars.get(name, 0) + qty > by_init[name]:
                    by_init[name] = by_sidecars.get(name, 0) + qty
        by_apps: dict[str, int] = {}
        for c in pod.containers:
            for name, qty in self.container_requests(pod, c).items():
                by_apps[name] = by_apps.get(name, 0) + qty
        out: dict[str, int] = {}
        for name, qty in by_apps.items():
            out[name] = max(qty + by_sidecars.get(name, 0), by_init.get(name, 0))
        return ordered(out)

    # hints ------------------------------------------------------------------------------------

    def reusable(self, pod: PodSpec, name: str | None = None) -> dict[int, dict[str, int]]:
        """Init-container memory the pod's next allocation may reuse, per NUMA mask and type:
        what is left of the blocks of the pod's regular init containers listed before ``name``
        (all of them when ``name`` is not an init container).

        The kubelet keeps this in memory (``initContainersReusableMemory``: the largest init
        block, less what later containers took, dropped whenever another pod allocates) and
        shrinks the init blocks by exactly what a container reuses
        (``updateInitContainersMemoryBlocks``), so both agree when a pod's containers are
        allocated in spec order, as the kubelet does. Deriving it from the blocks keeps the
        machine state equal to the sum of the blocks (what ``validateState`` checks) also when
        NRI interleaves pods, when stopped containers had run side by side, and after a restore.
        """
        entries = self.state.pod_containers(pod.uid)
        out: dict[int, dict[str, int]] = {}
        if not entries:
            return out
        for ic in pod.init_containers:
            if ic.name == name:
                break
            if ic.kind is not ContainerKind.INIT:
                continue
            for b in entries.get(ic.name, ()):
                if b.size:
                    row = out.setdefault(mask_of(b.numa), {})
                    row[b.type] = row.get(b.type, 0) + b.size
        return out

    def calculate_hints(
        self, pod: PodSpec, requests: Mapping[str, int], container_name: str | None = None
    ) -> dict[str, list[TopologyHint]]:
        """``calculateHints`` over the current machine state (see ``HintCalculator``); free
        memory counts what container ``container_name`` may reuse (:meth:`reusable`)."""
        return self._hints.calculate(
            self.state.machine_state, requests, self.reusable(pod, container_name)
        )

    def get_topology_hints(self, pod: PodSpec, container: ContainerSpec) -> HintMap | None:
        """Container-scope hints; None (no preference) for non-Guaranteed pods and, as v1.37
        does, for containers that request no exclusive memory."""
        if not self.static or not _pod_guaranteed(pod):
            return None
        requests = self.container_requests(pod, container)
        if not requests:
            return None
        blocks = self.state.get_blocks(pod.uid, container.name)
        if blocks is not None:
            return regenerate_hints(blocks, requests)
        return self.calculate_hints(pod, requests, container.name)

    def get_pod_topology_hints(self, pod: PodSpec) -> HintMap | None:
        """Pod-scope hints from the pod's requests; ``{type: []}`` when a pod-level pod fails
        ``validate_pod_scope_resources``; regenerated from existing blocks on re-admission."""
        if not self.static or not _pod_guaranteed(pod):
            return None
        requests = self.pod_requests(pod)
        if pod.has_pod_level_resources:
            if self.validate_pod_scope_resources(pod) is not None:
                return {name: [] for name in requests}
            pod_blocks = self.state.pod_blocks(pod.uid)
            if pod_blocks is not None and requests:
                return regenerate_hints(pod_blocks, requests)
        if not requests:
            return None
        for c in pod.all_containers():
            blocks = self.state.get_blocks(pod.uid, c.name)
            if blocks is not None:
                return regenerate_hints(blocks, requests)
        return self.calculate_hints(pod, requests)

    # validation -------------------------------------------------------------------------------

    def validate_pod_scope_resources(self, pod: PodSpec) -> str | None:
        """The memory half of ``validatePodScopeResources``: the kubelet's message, or None."""
        total = self.pod_requests(pod)
        sidecar = dict.fromkeys(total, 0)
        shared_long_running = False
        for c in pod.init_containers:
            req = self.container_requests(pod, c)
            if not c.restartable:
                if req:
                    for name, size in total.items():
                        pool = size - sidecar[name]
                        if req.get(name, 0) > pool:
                            return (
                                "pod rejected, largest exclusive init container requests "
                                f"{req.get(name, 0)} of {name}, but only {pool} available"
                            )
                else:
                    for name, size in total.items():
                        if sidecar[name] >= size:
                            return (
                                "pod rejected, pod has shared init containers but no "
                                f"{name} available for them"
                            )
                continue
            if not req:
                shared_long_running = True
                continue
            for name, size in req.items():
                sidecar[name] = sidecar.get(name, 0) + size
        for c in pod.containers:
            req = self.container_requests(pod, c)
            if not req:
                shared_long_running = True
                continue
            for name, size in req.items():
                sidecar[name] = sidecar.get(name, 0) + size
        if shared_long_running:
            for name, size in total.items():
                if sidecar[name] >= size:
                    return (
                        f"pod rejected, sum of exclusive container {name} requests equals pod "
                        "budget, leaving no memory for shared containers"
                    )
        return None

    # allocation -------------------------------------------------------------------------------

    def allocate(self, pod: PodSpec, container: ContainerSpec, hint: TopologyHint | None) -> None:
        """``Allocate`` (container path, §3.4); idempotent. Raises ``AdmissionError``."""
        if not self.static or not _pod_guaranteed(pod):
            return
        requests = self.container_requests(pod, container)
        if not requests:
            return
        if self.state.get_blocks(pod.uid, container.name) is not None:
            return
        mask = self._hints.choose_affinity(
            self.state.machine_state, requests, self.reusable(pod, container.name), hint
        )
        numa = bits(mask)
        reusable = self.reusable(pod, container.name).get(mask, {})
        blocks: list[Block] = []
        for name, size in requests.items():
            blocks.append(Block(numa, name, size))
            self._charge(numa, name, size - min(size, reusable.get(name, 0)))
        self.state.set_blocks(pod.uid, container.name, blocks)
        self._shrink_init_blocks(pod, container, blocks)

    def _shrink_init_blocks(
        self, pod: PodSpec, container: ContainerSpec, blocks: list[Block]
    ) -> None:
        entries = self.state.pod_containers(pod.uid)
        for cb in blocks:
            left = cb.size
            for ic in pod.init_containers:
                if ic.name == container.name or left == 0:
                    break
                if ic.restartable:
                    continue
                for ib in entries.get(ic.name, []):
                    if ib.size == 0 or ib.type != cb.type or ib.numa != cb.numa:
                        continue
                    if ib.size > left:
                        ib.size -= left
                        left = 0
                    else:
                        left -= ib.size
                        ib.size = 0

    def allocate_pod(self, pod: PodSpec, hint: TopologyHint | None) -> None:
        """``AllocatePod`` (§4.6): charge the pod-level budget once, then give every container
        its exclusive blocks or the pod shared pool's. Idempotent: an existing pod entry is kept.
        Raises ``AdmissionError``."""
        if not self.static or not _pod_guaranteed(pod):
            return
        if self.state.pod_blocks(pod.uid) is not None:
            return
        message = self.validate_pod_scope_resources(pod)
        if message is not None:
            raise AdmissionError(EMPTY_POD_SHARED_POOL_ERROR, message)
        total = self.pod_requests(pod)
        if not total:
            return
        machine = self.state.machine_state
        mask = self._hints.choose_affinity(machine, total, self.reusable(pod), hint)
        numa = bits(mask)
        self.state.set_pod_blocks(
            pod.uid, [Block(numa, name, size) for name, size in total.items()]
        )
        for name, size in total.items():
            self._charge(numa, name, size)
        sidecar = dict.fromkeys(total, 0)
        exclusive: dict[str, list[Block]] = {}
        for c in pod.init_containers:
            req = self.container_requests(pod, c)
            if not req:
                if c.restartable:
                    continue
                exclusive[c.name] = [
                    Block(numa, name, size - sidecar[name])
                    for name, size in total.items()
                    if size - sidecar[name] > 0
                ]
                continue
            exclusive[c.name] = [Block(numa, name, size) for name, size in req.items() if size > 0]
            if c.restartable:
                for name, size in req.items():
                    sidecar[name] = sidecar.get(name, 0) + size
        app = {name: size - sidecar[name] for name, size in total.items()}
        for c in pod.containers:
            req = self.container_requests(pod, c)
            if not req:
                continue
            exclusive[c.name] = [Block(numa, name, size) for name, size in req.items() if size > 0]
            for name, size in req.items():
                app[name] = app.get(name, 0) - size
        for c in pod.all_containers():
            if c.name in exclusive:
                self.state.set_blocks(pod.uid, c.name, exclusive[c.name])
            else:
                shared = [Block(numa, name, size) for name, size in app.items() if size > 0]
                self.state.set_blocks(pod.uid, c.name, shared)

    # incremental primitives (NRI: containers one at a time) ------------------------------------

    def allocate_pod_budget(self, pod: PodSpec, hint: TopologyHint | None) -> tuple[int, ...]:
        """Charge a pod-level pod's memory budget at sandbox time (no containers known yet).

        Same placement as :meth:`allocate_pod`; idempotent. Returns the NUMA nodes (empty when
        the pod pins no memory)."""
        if not self.static or not _pod_guaranteed(pod):
            return ()
        existing = self.state.pod_blocks(pod.uid)
        if existing is not None:
            return existing[0].numa if existing else ()
        total = self.pod_requests(pod)
        if not total:
            return ()
        numa = bits(
            self._hints.choose_affinity(self.state.machine_state, total, self.reusable(pod), hint)
        )
        self.state.set_pod_blocks(
            pod.uid, [Block(numa, name, size) for name, size in total.items()]
        )
        for name, size in total.items():
            self._charge(numa, name, size)
        return numa

    def pod_pool(self, pod_uid: str) -> dict[str, int]:
        """What is left of a pod-level pod's memory budget: budget minus live exclusive blocks."""
        pod_blocks = self.state.pod_blocks(pod_uid)
        if pod_blocks is None:
            return {}
        left = {b.type: b.size for b in pod_blocks}
        shared = self.state.shared(pod_uid)
        for name, blocks in self.state.pod_containers(pod_uid).items():
            if name in shared:
                continue
            for b in blocks:
                left[b.type] = left.get(b.type, 0) - b.size
        return left

    def take_from_pod(
        self, pod_uid: str, name: str, requests: Mapping[str, int]
    ) -> list[MemoryBlock]:
        """Record an exclusive slice of a pod-level pod's budget for a container."""
        numa = self._pod_numa(pod_uid)
        blocks = [Block(numa, t, s) for t, s in memory_requests(requests).items() if s > 0]
        self.state.set_blocks(pod_uid, name, blocks)
        self.state.unmark_shared(pod_uid, name)
        return [b.frozen() for b in blocks]

    def _pod_numa(self, pod_uid: str) -> tuple[int, ...]:
        pod_blocks = self.state.pod_blocks(pod_uid)
        if pod_blocks is None:
            raise KeyError(f"pod {pod_uid}: has no pod-level memory budget")
        return pod_blocks[0].numa

    def share_pod_pool(self, pod_uid: str, name: str) -> list[MemoryBlock]:
        """Record a container on the pod shared pool (blocks = what the pool has left)."""
        numa = self._pod_numa(pod_uid)
        self.state.mark_shared(pod_uid, name)
        blocks = [Block(numa, t, s) for t, s in self.pod_pool(pod_uid).items() if s > 0]
        self.state.set_blocks(pod_uid, name, blocks)
        return [b.frozen() for b in blocks]

    def release_container_slice(self, pod_uid: str, name: str) -> None:
        """Give an exited container's exclusive slice back to its pod-level pod's pool.

        The pod budget stays charged; the container's entry is dropped. Idempotent; a no-op
        for pods without a pod-level budget."""
        if self.state.pod_blocks(pod_uid) is None:
            return
        self.state.delete(pod_uid, name)

    def refresh_shared(self, pod_uid: str) -> None:
        """Recompute the blocks of a pod's shared containers after the pool changed."""
        pod_blocks = self.state.pod_blocks(pod_uid)
        if not pod_blocks:
            return
        numa = pod_blocks[0].numa
        pool = [(t, s) for t, s in self.pod_pool(pod_uid).items() if s > 0]
        entries = self.state.pod_containers(pod_uid)
        for name in self.state.shared(pod_uid):
            if name in entries:
                self.state.set_blocks(pod_uid, name, [Block(numa, t, s) for t, s in pool])

    # release ----------------------------------------------------------------------------------

    def remove_container(self, pod_uid: str, name: str) -> None:
        """``RemoveContainer`` (§3.5): pod-level pods release their budget with the last entry."""
        state = self.state
        if state.pod_blocks(pod_uid) is not None:
            state.delete(pod_uid, name)
            if not state.pod_containers(pod_uid):
                _, pod_blocks = state.remove_pod(pod_uid)
                self._release(pod_blocks or ())
            return
        blocks = state.delete(pod_uid, name)
        if blocks is not None:
            self._release(blocks)

    def remove_pod(self, pod_uid: str) -> None:
        """Release everything a pod holds."""
        entries, pod_blocks = self.state.remove_pod(pod_uid)
        if pod_blocks is not None:
            self._release(pod_blocks)
        else:
            for blocks in entries.values():
                self._release(blocks)

    # queries ----------------------------------------------------------------------------------

    def has_blocks(self, pod_uid: str, name: str) -> bool:
        """True when the container holds memory blocks of its own."""
        return bool(self.state.get_blocks(pod_uid, name))

    def container_blocks(self, pod_uid: str, name: str) -> tuple[MemoryBlock, ...] | None:
        """A container's blocks, or None when it has no entry."""
        blocks = self.state.get_blocks(pod_uid, name)
        return None if blocks is None else tuple(b.frozen() for b in blocks)

    def pod_blocks(self, pod_uid: str) -> tuple[MemoryBlock, ...] | None:
        """A pod-level pod's budget blocks, or None."""
        blocks = self.state.pod_blocks(pod_uid)
        return None if blocks is None else tuple(b.frozen() for b in blocks)

    def numa_nodes_for(self, pod_uid: str, name: str) -> tuple[int, ...]:
        """``GetMemoryNUMANodes``: NUMA nodes of a container's blocks (empty: leave mems as is)."""
        nodes: set[int] = set()
        for b in self.state.get_blocks(pod_uid, name) or ():
            nodes.update(b.numa)
        return tuple(sorted(nodes))

    def pods(self) -> tuple[str, ...]:
        """Pods with any entry."""
        return tuple(sorted(self.state.pods()))

    def containers(self, pod_uid: str) -> tuple[str, ...]:
        """Containers of a pod with an entry."""
        return tuple(self.state.pod_containers(pod_uid))

    def allocatable(self) -> list[MemoryBlock]:
        """``GetAllocatableMemory``: one block per (NUMA node, type) with allocatable > 0."""
        return [
            MemoryBlock((node,), name, t.allocatable)
            for node, state in sorted(self.machine_state.items())
            for name, t in state.memory_map.items()
            if t.allocatable > 0
        ]

    # state ------------------------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """JSON-able state with the kubelet's field names plus ``podEntries``."""
        return self.state.to_dict(STATE_FORMAT, self.config.policy)

    @classmethod
    def restore(
        cls, topology: Topology, config: MemoryManagerConfig, data: Mapping[str, Any]
    ) -> MemoryManager:
        """Restore a state saved by :meth:`snapshot`, recomputing the machine state from the
        blocks; a saved machine state that disagrees raises ``MemoryStateError``."""
        mm = cls(topology, config)
        policy = data.get("policyName", config.policy)
        if policy != config.policy:
            raise MemoryStateError(
                f'configured policy "{config.policy}" differs from state checkpoint policy '
                f'"{policy}"'
            )
        try:
            pod_entries = {
                str(uid): [block_from_dict(b) for b in blocks]
                for uid, blocks in dict(data.get("podEntries", {})).items()
            }
            entries = {
                str(uid): {
                    str(name): [block_from_dict(b) for b in blocks]
                    for name, blocks in dict(conts).items()
                }
                for uid, conts in dict(data.get("entries", {})).items()
            }
        except (KeyError, TypeError, ValueError) as err:
            raise MemoryStateError(f"memory manager state: malformed entries ({err})") from err
        charged: list[tuple[str, str, Block]] = [
            (uid, "", b) for uid, blocks in pod_entries.items() for b in blocks
        ]
        for uid, conts in entries.items():
            if uid not in pod_entries:
                charged.extend((uid, name, b) for name, blocks in conts.items() for b in blocks)
        saved = data.get("machineState")
        if saved is not None and not saved and charged:
            raise MemoryStateError(
                "[memorymanager] machine state can not be empty when it has memory assignments"
            )
        for uid, name, b in charged:
            for n in b.numa:
                if n not in mm.machine_state:
                    raise MemoryStateError(
                        f"[memorymanager] (pod: {uid}, container: {name}) the memory assignment "
                        "uses the NUMA that does not exist"
                    )
                if b.type not in mm.machine_state[n].memory_map:
                    raise MemoryStateError(
                        f"[memorymanager] (pod: {uid}, container: {name}) the memory assignment "
                        "uses memory resource that does not exist"
                    )
            mm._charge(b.numa, b.type, b.size)
        if saved:
            restored = machine_state_from_dict(saved)
            if not machine_states_equal(restored, mm.machine_state):
                raise MemoryStateError(
                    "[memorymanager] the expected machine state is different from the real one"
                )
            mm.machine_state = restored
        shared = {str(u): set(map(str, n)) for u, n in dict(data.get("podShared", {})).items()}
        mm.state.replace(entries, pod_entries, shared)
        return mm
