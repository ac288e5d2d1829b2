"""The Topology model: validation and derived counts."""

from __future__ import annotations

import pytest

from nri_plrm.base.cpuset import CPUSet
from nri_plrm.topology.model import CPUInfo, Topology, TopologyError


def dual_socket_ht() -> Topology:
    """The kubelet's topoDualSocketHT: 12 CPUs, core c % 6, socket = NUMA = c % 2."""
    return Topology.build(
        [CPUInfo(cpu=c, core=c % 6, socket=c % 2, numa=c % 2, l3=c % 2) for c in range(12)],
        memory={0: {"memory": 8 << 30}, 1: {"memory": 8 << 30, "hugepages-1Gi": 2 << 30}},
        distances={0: {0: 10, 1: 21}, 1: {0: 21, 1: 10}},
    )


def test_counts_follow_the_kubelet() -> None:
    topo = dual_socket_ht()
    assert (topo.num_cpus, topo.num_cores, topo.num_sockets, topo.num_numa_nodes) == (12, 6, 2, 2)
    assert (topo.cpus_per_core, topo.cpus_per_socket, topo.cpus_per_uncore) == (2, 6, 6)
    assert topo.cpus_in_numa(0) == CPUSet.parse("0,2,4,6,8,10")
    assert topo.cpus_in_numa(0, 1) == topo.all_cpus == CPUSet.parse("0-11")
    assert topo.distance(0, 1) == 21 and topo.memory_of(1, "hugepages-1Gi") == 2 << 30
    assert topo.memory_resources == ("memory", "hugepages-1Gi")
    assert topo.numa_ids == (0, 1)


def test_missing_distances_default_to_local_and_remote() -> None:
    topo = Topology.build([CPUInfo(0, 0, 0, 0, 0), CPUInfo(1, 1, 0, 1, 0)])
    assert topo.distance(0, 0) == 10 and topo.distance(0, 1) == 20


def test_memory_only_node() -> None:
    topo = Topology.build([CPUInfo(0, 0, 0, 0, 0)], memory={0: {"memory": 1}, 1: {"memory": 2}})
    assert topo.num_numa_nodes == 2 and topo.numa_nodes[1].cpus == CPUSet()


@pytest.mark.parametrize(
    ("cpus", "fragment"),
    [
        ([], "no cpus provided"),
        ([CPUInfo(0, 0, 0, 0, 0), CPUInfo(0, 1, 0, 0, 0)], "listed twice"),
        ([CPUInfo(0, 0, 0, 0, 0), CPUInfo(1, 0, 1, 0, 0)], "a core belongs to one socket"),
        ([CPUInfo(0, -1, 0, 0, 0)], "core -1 must be an integer >= 0"),
    ],
)
def test_inconsistent_tables_are_refused(cpus: list[CPUInfo], fragment: str) -> None:
    with pytest.raises(TopologyError) as err:
        Topology.build(cpus)
    assert fragment in str(err.value)


def test_numa_ids_beyond_the_kernel_limit_are_refused() -> None:
    with pytest.raises(TopologyError, match="numa node 1024: node ids must be below 1024"):
        Topology.build([CPUInfo(0, 0, 0, 1024, 0)])


def test_negative_memory_is_refused() -> None:
    with pytest.raises(TopologyError, match="numa node 0: memory -1"):
        Topology.build([CPUInfo(0, 0, 0, 0, 0)], memory={0: {"memory": -1}})
