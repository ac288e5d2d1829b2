"""The kubelet's device allocation at admission, for ``simulate``: which devices a pod gets.

On a node the kubelet's Device Manager picks a pod's devices at admission, before the sandbox
exists, and the plugin then aligns CPUs and memory with them (``device_manager``). ``simulate``
has no kubelet, so it plays that part. With its CPU and Memory Managers at ``none``, the
kubelet's Topology Manager (``topologyManagerPolicy``, passed as ``policy``) merges the
Device Manager's hints alone:

- per resource, a NUMA mask is a hint when the free devices in it (plus the ones the pod's
  init containers release to it) number at least the request; it is preferred at the
  narrowest width that holds that many of the node's devices at all (``minAffinitySize``);
- the policy picks the best hint (``none``: no alignment; ``single-numa-node`` and
  ``restricted`` refuse a pod without a preferred hint with ``TopologyAffinityError``), per
  container or, in scope ``pod``, once for the pod's whole request;
- the devices are taken from the hint's NUMA nodes first (``filterByAffinity``), then the
  others, then those without topology, each group in (NUMA node, id) order. The kubelet walks
  an unordered set where no affinity applies; the simulation takes device order instead.

A request larger than the free devices fails as the kubelet's allocation does
(``UnexpectedAdmissionError``: ``requested number of devices unavailable``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from nri_plrm.engine.bitmask import iterate_bitmasks
from nri_plrm.engine.spec import (
    ContainerKind,
    ContainerSpec,
    Device,
    HintMap,
    PodSpec,
    TopologyHint,
    unexpected,
)
from nri_plrm.engine.topology_manager import (
    POD_LEVEL_POD_SCOPE_MESSAGE,
    SCOPE_POD,
    TopologyManager,
    TopologyManagerConfig,
    pod_level_topology_affinity_error,
    topology_affinity_error,
)
from nri_plrm.topology.model import Topology

Inventory = Mapping[str, Sequence[Device]]
"""The node's devices per resource name."""
Allocation = dict[str, dict[str, tuple[Device, ...]]]
"""Devices per container name, per resource."""


def _requests(container: ContainerSpec, inventory: Inventory) -> dict[str, int]:
    return {r: n for r, n in container.limits.items() if r in inventory and n > 0}


def _mask(device: Device) -> int:
    mask = 0
    for node in device.numa_nodes:
        mask |= 1 << node
    return mask


class KubeletDeviceAllocator:
    """Allocates devices pod after pod as the kubelet would (see the module docstring)."""

    def __init__(self, topology: Topology, inventory: Inventory, policy: str, scope: str) -> None:
        self.inventory = {r: tuple(d) for r, d in inventory.items()}
        self.numa_ids = tuple(topology.numa_ids)
        self.manager = TopologyManager(topology, TopologyManagerConfig(policy, scope))
        self.taken: dict[str, set[str]] = {r: set() for r in self.inventory}
        self.held: dict[str, Allocation] = {}

    def free(self, resource: str) -> list[Device]:
        """The resource's devices no pod holds, in (NUMA node, id) order."""
        taken = self.taken.get(resource, set())
        devices = [d for d in self.inventory.get(resource, ()) if d.id not in taken]
        return sorted(devices, key=lambda d: (d.numa_nodes or (1 << 16,), d.id))

    def _hints(self, resource: str, available: Sequence[Device], n: int) -> list[TopologyHint]:
        every = [_mask(d) for d in self.inventory[resource]]
        free = [_mask(d) for d in available]
        if not any(every):
            return []
        narrowest = len(self.numa_ids)
        hints: list[tuple[int, int]] = []
        for mask in iterate_bitmasks(self.numa_ids):
            width = mask.bit_count()
            if width < narrowest and sum(1 for m in every if m and m & ~mask == 0) >= n:
                narrowest = width
            if sum(1 for m in free if m and m & ~mask == 0) >= n:
                hints.append((mask, width))
        return [TopologyHint(mask, width == narrowest) for mask, width in hints]

    def _merge(
        self, requests: Mapping[str, int], reusable: Mapping[str, list[Device]]
    ) -> tuple[TopologyHint, bool]:
        maps: list[HintMap | None] = []
        for resource, n in requests.items():
            available = self.free(resource) + reusable.get(resource, [])
            if not any(d.numa_nodes for d in self.inventory[resource]):
                maps.append(None)
            else:
                maps.append({resource: self._hints(resource, available, n)})
        return self.manager.merge(maps)

    def admit(self, pod: PodSpec) -> Allocation:
        """The devices of every container of ``pod`` that asks for some; raises
        ``AdmissionError`` with the kubelet's reason when it would refuse the pod (nothing is
        held then)."""
        containers = [*pod.init_containers, *pod.containers]
        asks = {c.name: _requests(c, self.inventory) for c in containers}
        if not any(asks.values()):
            return {}
        pod_hint: TopologyHint | None = None
        if self.manager.scope == SCOPE_POD:
            total: dict[str, int] = {}
            for c in pod.containers:
                for r, n in asks[c.name].items():
                    total[r] = total.get(r, 0) + n
            for c in pod.init_containers:
                for r, n in asks[c.name].items():
                    total[r] = max(total.get(r, 0), n)
            pod_hint, admit = self._merge(total, {})
            if not admit:
                if pod.has_pod_level_resources:
                    raise pod_level_topology_affinity_error(POD_LEVEL_POD_SCOPE_MESSAGE)
                raise topology_affinity_error()
        allocation: Allocation = {}
        released: dict[str, list[Device]] = {}
        for c in containers:
            if not asks[c.name]:
                continue
            hint = pod_hint
            if hint is None:
                hint, admit = self._merge(asks[c.name], released)
                if not admit:
                    self._forget(allocation)
                    raise topology_affinity_error()
            got: dict[str, tuple[Device, ...]] = {}
            for resource, n in asks[c.name].items():
                reused = {d.id for d in released.get(resource, [])}
                pool = released.get(resource, []) + [
                    d for d in self.free(resource) if d.id not in reused
                ]
                picked = _by_affinity(pool, hint.numa_affinity)[:n]
                if len(picked) < n:
                    self._forget(allocation)
                    raise unexpected(
                        f"requested number of devices unavailable for {resource}. Requested: "
                        f"{n}, Available: {len(pool)}"
                    )
                got[resource] = tuple(picked)
                self.taken[resource].update(d.id for d in picked)
                if released.get(resource):
                    ids = {d.id for d in picked}
                    released[resource] = [d for d in released[resource] if d.id not in ids]
            allocation[c.name] = got
            if c.kind is ContainerKind.INIT:  # later containers of the pod may reuse them
                for resource, devices in got.items():
                    released.setdefault(resource, []).extend(devices)
        self.held[pod.uid] = allocation
        return allocation

    def _forget(self, allocation: Allocation) -> None:
        for got in allocation.values():
            for resource, devices in got.items():
                self.taken[resource].difference_update(d.id for d in devices)

    def release(self, pod_uid: str) -> None:
        """The pod ended: its devices are free again."""
        self._forget(self.held.pop(pod_uid, {}))


def _by_affinity(devices: Sequence[Device], affinity: int | None) -> list[Device]:
    """``filterByAffinity``: devices within the affinity, then the others, then those without
    topology, each in the order given."""
    if affinity is None:
        return list(devices)
    inside = [d for d in devices if d.numa_nodes and _mask(d) & ~affinity == 0]
    outside = [d for d in devices if d.numa_nodes and _mask(d) & ~affinity != 0]
    bare = [d for d in devices if not d.numa_nodes]
    return [*inside, *outside, *bare]
