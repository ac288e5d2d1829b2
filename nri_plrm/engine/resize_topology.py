"""Where a growing in-place resize may take CPUs: the topology rules of the opt-in resizes.

Followed from kubernetes/kubernetes#140629 (KEP-5554, ``InPlacePodVerticalScalingExclusiveCPUs``,
open; alpha targeted at 1.38). For a resize, the static policy's hints keep every NUMA node the
container already runs on: the candidate affinities are the NUMA sets that include those nodes
and whose free CPUs, with the ones held, cover the new size; the narrowest wins, and it is
preferred when no narrower set of NUMA nodes could hold that many CPUs on this machine (the
kubelet's ``minAffinitySize``). The Topology Manager then judges that hint by its policy:

- ``none``: no alignment, the CPUs come from anywhere;
- ``best-effort``: admitted, the new CPUs are taken from the hint's NUMA nodes first;
- ``restricted``: refused with ``TopologyAffinityError`` unless the hint is preferred;
- ``single-numa-node``: refused unless the hint is a single, preferred NUMA node.

Memory follows the CPUs: when the Memory Manager pins the container's (or the pod's) memory to
NUMA nodes, a hint that leaves them is refused with ``TopologyAffinityError`` under every
policy but ``none``; the memory itself is never moved.
"""

from __future__ import annotations

from itertools import combinations

from nri_plrm.base.cpuset import CPUSet
from nri_plrm.engine.topology_manager import (
    POLICY_NONE,
    POLICY_RESTRICTED,
    POLICY_SINGLE_NUMA_NODE,
    topology_affinity_error,
)
from nri_plrm.topology.model import Topology


def numa_nodes_of(topology: Topology, cpus: CPUSet) -> frozenset[int]:
    """The NUMA nodes ``cpus`` lie on."""
    return frozenset(n for n in topology.numa_ids if cpus & topology.cpus_in_numa(n))


def _mask(nodes: frozenset[int] | tuple[int, ...]) -> int:
    mask = 0
    for node in nodes:
        mask |= 1 << node
    return mask


def _min_affinity_size(topology: Topology, n: int) -> int:
    """The fewest NUMA nodes whose CPUs (free or not) number at least ``n``."""
    ids = [i for i in topology.numa_ids if topology.cpus_in_numa(i)]
    for size in range(1, len(ids) + 1):
        if any(len(topology.cpus_in_numa(*combo)) >= n for combo in combinations(ids, size)):
            return size
    return len(ids)


def grow_affinity(
    topology: Topology,
    policy: str,
    held: CPUSet,
    free: CPUSet,
    n: int,
    memory_numa: tuple[int, ...] = (),
) -> int | None:
    """The NUMA affinity (bit mask) a grow from ``held`` to ``n`` CPUs takes its new CPUs from,
    None when the policy does not align. Raises ``AdmissionError`` (``TopologyAffinityError``)
    when the policy refuses the grow (module docstring)."""
    if policy == POLICY_NONE:
        return None
    current = numa_nodes_of(topology, held)
    ids = [i for i in topology.numa_ids if topology.cpus_in_numa(i)]
    others = [i for i in ids if i not in current]
    best: frozenset[int] | None = None
    for extra in range(len(others) + 1):
        for combo in combinations(others, extra):
            nodes = current | frozenset(combo)
            if len((free | held) & topology.cpus_in_numa(*nodes)) >= n:
                best = nodes
                break
        if best is not None:
            break
    if best is None:
        if policy in (POLICY_RESTRICTED, POLICY_SINGLE_NUMA_NODE):
            raise topology_affinity_error()
        return None
    preferred = len(best) == _min_affinity_size(topology, n)
    if policy == POLICY_SINGLE_NUMA_NODE and (len(best) != 1 or not preferred):
        raise topology_affinity_error()
    if policy == POLICY_RESTRICTED and not preferred:
        raise topology_affinity_error()
    if memory_numa and not best <= frozenset(memory_numa):
        raise topology_affinity_error()
    return _mask(best)
