"""The kubelet's canonical test machines, checked against the facts of upstream's tables."""

from __future__ import annotations

import pytest

from nri_plrm.base.cpuset import CPUSet
from nri_plrm.topology.machines import MACHINES, SYNTHETIC_1024_SPEC
from nri_plrm.topology.model import Topology


def cores_of(topology: Topology) -> dict[int, CPUSet]:
    cores: dict[int, set[int]] = {}
    for info in topology.cpu_info.values():
        cores.setdefault(info.core, set()).add(info.cpu)
    return {core: CPUSet(cpus) for core, cpus in cores.items()}


def cpus_where(topology: Topology, **field: int) -> CPUSet:
    ((name, value),) = field.items()
    return CPUSet(c for c, i in topology.cpu_info.items() if getattr(i, name) == value)


@pytest.mark.parametrize(
    ("name", "cpus", "cores", "sockets", "numa"),
    [
        ("topoSingleSocketHT", 8, 4, 1, 1),
        ("topoDualSocketHT", 12, 6, 2, 2),
        ("topoDualSocketNoHT", 8, 8, 2, 2),
        ("topoTripleSocketHT", 18, 9, 3, 3),
        ("topoQuadSocketFourWayHT", 288, 72, 4, 4),
        ("topoDualSocketMultiNumaPerSocketHT", 80, 40, 2, 4),
        ("fakeTopoMultiSocketDualSocketPerNumaHT", 80, 40, 4, 2),
        ("topoDualSocketMultiNumaPerSocketHTLarge", 256, 128, 2, 8),
        ("topoSingleSocketSingleNumaPerSocketSMTSmallUncore", 128, 64, 1, 1),
        ("returnMachineInfo", 12, 6, 2, 2),
        ("default", 64, 32, 2, 4),
        ("synthetic1024", 1024, 512, 4, 16),
    ],
)
def test_machine_counts(name: str, cpus: int, cores: int, sockets: int, numa: int) -> None:
    topology = MACHINES[name]
    assert (topology.num_cpus, topology.num_cores) == (cpus, cores)
    assert (topology.num_sockets, topology.num_numa_nodes) == (sockets, numa)


def test_machines_are_built_once() -> None:
    assert MACHINES["topoDualSocketHT"] is MACHINES["topoDualSocketHT"]
    assert "topoDualSocketHT" in MACHINES
    assert "nope" not in MACHINES
    assert len(list(MACHINES)) == len(MACHINES) == 12


def test_unknown_machine_names_the_known_ones() -> None:
    with pytest.raises(KeyError, match=r"unknown test machine 'nope'.*topoDualSocketHT"):
        MACHINES["nope"]


def test_single_socket_ht_cores() -> None:
    cores = cores_of(MACHINES["topoSingleSocketHT"])
    assert cores == {0: CPUSet([0, 4]), 1: CPUSet([1, 5]), 2: CPUSet([2, 6]), 3: CPUSet([3, 7])}


def test_dual_socket_ht_layout() -> None:
    topology = MACHINES["topoDualSocketHT"]
    cores = cores_of(topology)
    assert cores[0] == CPUSet([0, 6]) and cores[5] == CPUSet([5, 11])
    assert topology.numa_nodes[0].cpus == CPUSet.parse("0,2,4,6,8,10")
    assert cpus_where(topology, socket=1) == CPUSet.parse("1,3,5,7,9,11")
    assert topology.cpus_per_core == 2
    assert {i.l3 for i in topology.cpu_info.values()} == {0}
    assert topology.distance(0, 1) == 20


def test_dual_socket_no_ht_layout() -> None:
    topology = MACHINES["topoDualSocketNoHT"]
    assert topology.numa_nodes[1].cpus == CPUSet.parse("4-7")
    assert all(i.core == i.cpu for i in topology.cpu_info.values())


def test_triple_socket_ht_layout() -> None:
    topology = MACHINES["topoTripleSocketHT"]
    assert cpus_where(topology, socket=1) == CPUSet.parse("0-5")
    assert cpus_where(topology, socket=0) == CPUSet.parse("6-11")
    assert cpus_where(topology, socket=2) == CPUSet.parse("12-17")
    assert cores_of(topology)[3] == CPUSet([6, 7])


# Socket lists copied from the hwloc KNL SNC4 picture the upstream table was built from.
KNL_SOCKETS = [
    "0-2,9-10,13-14,21-22,25-26,33-34,38-39,46-47,50,57-58,71-72,79-80,87-88,95-96,103-104,"
    "109-110,117-118,131-132,139-140,147-148,155-156,163-164,169-170,177-178,191-192,199-200,"
    "207-208,215-216,223-224,229-230,237-238,251-252,259-260,267-268,275-276,283-284",
    "3-4,11-12,15-16,23-24,27-28,35-36,40-41,48-49,51-52,59-60,65-66,73-74,81-82,89-90,97-98,"
    "111-112,119-120,125-126,133-134,141-142,149-150,157-158,171-172,179-180,185-186,193-194,"
    "201-202,209-210,217-218,231-232,239-240,245-246,253-254,261-262,269-270,277-278",
    "5-6,17-18,29-30,42-43,53-54,61-62,67-68,75-76,83-84,91-92,99-100,105-106,113-114,121-122,"
    "127-128,135-136,143-144,151-152,159-160,165-166,173-174,181-182,187-188,195-196,203-204,"
    "211-212,219-220,225-226,233-234,241-242,247-248,255-256,263-264,271-272,279-280,285-286",
    "7-8,19-20,31-32,37,44-45,55-56,63-64,69-70,77-78,85-86,93-94,101-102,107-108,115-116,"
    "123-124,129-130,137-138,145-146,153-154,161-162,167-168,175-176,183-184,189-190,197-198,"
    "205-206,213-214,221-222,227-228,235-236,243-244,249-250,257-258,265-266,273-274,281-282,287",
]


def test_quad_socket_four_way_ht_matches_the_hwloc_socket_lists() -> None:
    topology = MACHINES["topoQuadSocketFourWayHT"]
    for socket, text in enumerate(KNL_SOCKETS):
        assert cpus_where(topology, socket=socket) == CPUSet.parse(text)
        assert topology.numa_nodes[socket].cpus == CPUSet.parse(text)
    cores = cores_of(topology)
    assert all(len(cpus) == 4 for cpus in cores.values())
    assert cores[0] == CPUSet([0, 109, 169, 229])
    assert cores[64] == CPUSet([1, 13, 25, 38])
    assert cores[62] == CPUSet([107, 167, 227, 287])


@pytest.mark.parametrize(
    ("name", "node_lists"),
    [
        ("topoDualSocketMultiNumaPerSocketHT", ["0-9,40-49", "10-19,50-59", "20-29,60-69"]),
        (
            "topoDualSocketMultiNumaPerSocketHTLarge",
            [
                "0-15,128-143",
                "16-31,144-159",
                "32-47,160-175",
                "48-63,176-191",
                "64-79,192-207",
                "80-95,208-223",
                "96-111,224-239",
                "112-127,240-255",
            ],
        ),
    ],
)
def test_multi_numa_machines_match_lscpu(name: str, node_lists: list[str]) -> None:
    topology = MACHINES[name]
    for node, text in enumerate(node_lists):
        assert topology.numa_nodes[node].cpus == CPUSet.parse(text)
    half = topology.num_cpus // 2
    assert all(
        topology.cpu_info[c].core == topology.cpu_info[c + half].core == c for c in range(half)
    )


def test_epyc_sockets() -> None:
    topology = MACHINES["topoDualSocketMultiNumaPerSocketHTLarge"]
    assert cpus_where(topology, socket=1) == CPUSet.parse("64-127,192-255")


def test_fake_multi_socket_per_numa_swaps_sockets_and_cells() -> None:
    topology = MACHINES["fakeTopoMultiSocketDualSocketPerNumaHT"]
    assert topology.numa_nodes[0].cpus == CPUSet.parse("0-19,40-59")
    assert cpus_where(topology, socket=1) == CPUSet.parse("10-19,50-59")


def test_small_uncore_machine() -> None:
    topology = MACHINES["topoSingleSocketSingleNumaPerSocketSMTSmallUncore"]
    assert topology.num_uncore_caches == 16 and topology.cpus_per_uncore == 8
    assert cpus_where(topology, l3=0) == CPUSet.parse("0-3,64-67")


def test_return_machine_info_uses_platform_unique_core_ids() -> None:
    cores = cores_of(MACHINES["returnMachineInfo"])
    assert cores == {c: CPUSet([c, c + 6]) for c in range(6)}
    assert MACHINES["returnMachineInfo"].numa_nodes[1].cpus == CPUSet.parse("3-5,9-11")


def test_synthetic_1024_machine() -> None:
    topology = MACHINES["synthetic1024"]
    assert "hugepages_1Gi_per_numa=2" in SYNTHETIC_1024_SPEC
    assert topology.cpu_info[512].core == 0
    assert topology.numa_nodes[15].cpus == CPUSet.parse("480-511,992-1023")
    assert topology.memory_of(3, "hugepages-2Mi") == 512 * 2 * 1024 * 1024
    assert topology.memory_of(3, "hugepages-1Gi") == 2 << 30
    assert topology.distance(0, 3) == 11 and topology.distance(0, 4) == 21
