"""takeByTopology conformance: cases ported from the kubelet's ``cpu_assignment_test.go``.

Each case is named after the upstream test-case description.
"""

from __future__ import annotations

import pytest

from nri_plrm.base.cpuset import CPUSet
from nri_plrm.engine.cpu_assignment import (
    CPUAllocationError,
    SortingStrategy,
    TakeOptions,
    _Accumulator,
    take_by_topology,
    take_by_topology_numa_distributed,
    take_by_topology_numa_packed,
    topology_index,
)
from nri_plrm.topology.machines import MACHINES
from nri_plrm.topology.model import CPUInfo, Topology

P = CPUSet.parse

# (description, machine, available, n, expected error, expected result)
COMMON = [
    (
        "take more cpus than are available from single socket with HT",
        "topoSingleSocketHT",
        "0,2,4,6",
        5,
        "not enough cpus available to satisfy request: requested=5, available=4",
        "",
    ),
    ("take zero cpus from single socket with HT", "topoSingleSocketHT", "0-7", 0, "", ""),
    ("take one cpu from single socket with HT", "topoSingleSocketHT", "0-7", 1, "", "0"),
    (
        "take one cpu from single socket with HT, some cpus are taken",
        "topoSingleSocketHT",
        "1,3,5,6,7",
        1,
        "",
        "6",
    ),
    ("take two cpus from single socket with HT", "topoSingleSocketHT", "0-7", 2, "", "0,4"),
    ("take all cpus from single socket with HT", "topoSingleSocketHT", "0-7", 8, "", "0-7"),
    (
        "take two cpus from single socket with HT, only one core totally free",
        "topoSingleSocketHT",
        "0-3,6",
        2,
        "",
        "2,6",
    ),
    (
        "take a socket of cpus from dual socket with HT",
        "topoDualSocketHT",
        "0-11",
        6,
        "",
        "0,2,4,6,8,10",
    ),
    (
        "take a socket of cpus from dual socket with multi-numa-per-socket with HT",
        "topoDualSocketMultiNumaPerSocketHT",
        "0-79",
        40,
        "",
        "0-19,40-59",
    ),
    (
        "take a NUMA node of cpus from dual socket with multi-numa-per-socket with HT",
        "topoDualSocketMultiNumaPerSocketHT",
        "0-79",
        20,
        "",
        "0-9,40-49",
    ),
    (
        "take a NUMA node of cpus from dual socket with multi-numa-per-socket with HT, "
        "with 1 NUMA node already taken",
        "topoDualSocketMultiNumaPerSocketHT",
        "10-39,50-79",
        20,
        "",
        "10-19,50-59",
    ),
    (
        "take a socket and a NUMA node of cpus from dual socket with multi-numa-per-socket with HT",
        "topoDualSocketMultiNumaPerSocketHT",
        "0-79",
        60,
        "",
        "0-29,40-69",
    ),
    (
        "take a socket and a NUMA node of cpus from dual socket with multi-numa-per-socket with "
        "HT, a core taken",
        "topoDualSocketMultiNumaPerSocketHT",
        "1-39,41-79",
        60,
        "",
        "10-39,50-79",
    ),
]

# TestTakeByTopologyNUMAPacked: the common cases plus these (options: uncore flag).
PACKED_EXTRA = [
    (
        "take one cpu from dual socket with HT - core from Socket 0",
        "topoDualSocketHT",
        False,
        "1-5,7-11",
        1,
        "2",
    ),
    (
        "allocate 4 full cores with 3 coming from the first NUMA node (filling it up) and 1 "
        "coming from the second NUMA node",
        "topoDualSocketHT",
        False,
        "0-11",
        8,
        "0,6,2,8,4,10,1,7",
    ),
    (
        "allocate 32 full cores with 30 coming from the first 3 NUMA nodes (filling them up) "
        "and 2 coming from the fourth NUMA node",
        "topoDualSocketMultiNumaPerSocketHT",
        False,
        "0-79",
        64,
        "0-29,40-69,30,31,70,71",
    ),
    (
        "take one cpu from dual socket with HT - core from Socket 0 (prefer-align-by-uncorecache)",
        "topoDualSocketHT",
        True,
        "1-5,7-11",
        1,
        "1",
    ),
]

# TestTakeByTopologyWithSpreadPhysicalCPUsPreferredOption (distribute-cpus-across-cores).
SPREAD = [
    (
        "take a socket of cpus from single socket with HT, 3 cpus",
        "topoSingleSocketHT",
        "0-7",
        3,
        "0,1,2",
    ),
    (
        "take a socket of cpus from dual socket with HT, 2 cpus",
        "topoDualSocketHT",
        "0-11",
        2,
        "0,2",
    ),
    (
        "take a socket of cpus from dual socket with HT, 3 cpus",
        "topoDualSocketHT",
        "0-11",
        3,
        "0,2,4",
    ),
    (
        "take a socket of cpus from dual socket with HT, 6 cpus",
        "topoDualSocketHT",
        "0-11",
        6,
        "0,2,4,6,8,10",
    ),
    (
        "take cpus from dual socket with HT, 8 cpus",
        "topoDualSocketHT",
        "0-11",
        8,
        "0,2,4,6,8,10,1,3",
    ),
    (
        "take a socket of cpus from dual socket without HT, 2 cpus",
        "topoDualSocketNoHT",
        "0-7",
        2,
        "0,1",
    ),
    (
        "take a socket of cpus from dual socket with multi numa per socket and HT, 12 cpus",
        "topoDualSocketMultiNumaPerSocketHT",
        "0-79",
        8,
        "0-7",
    ),
    (
        "take a socket of cpus from quad socket four way with HT, 12 cpus",
        "topoQuadSocketFourWayHT",
        "0-287",
        12,
        "0-2,9-10,13-14,21-22,25-26,33",
    ),
]

# TestTakeByTopologyNUMADistributed: the common cases (group size 1) plus these.
M80 = "topoDualSocketMultiNumaPerSocketHT"
DISTRIBUTED_EXTRA = [
    (
        "allocate 4 full cores with 2 distributed across each NUMA node",
        "topoDualSocketHT",
        "0-11",
        8,
        1,
        "0,6,2,8,1,7,3,9",
    ),
    (
        "allocate 32 full cores with 8 distributed across each NUMA node",
        M80,
        "0-79",
        64,
        1,
        "0-7,10-17,20-27,30-37,40-47,50-57,60-67,70-77",
    ),
    (
        "allocate 24 full cores with 8 distributed across the first 3 NUMA nodes",
        M80,
        "0-79",
        48,
        1,
        "0-7,10-17,20-27,40-47,50-57,60-67",
    ),
    (
        "allocate 24 full cores with 8 distributed across the first 3 NUMA nodes (taking all but "
        "2 from the first NUMA node)",
        M80,
        "1-29,32-39,41-69,72-79",
        48,
        1,
        "1-8,10-17,20-27,41-48,50-57,60-67",
    ),
    (
        "allocate 24 full cores with 8 distributed across the last 3 NUMA nodes (even though all "
        "8 could be allocated from the first NUMA node)",
        M80,
        "2-29,31-39,42-69,71-79",
        48,
        1,
        "10-17,20-27,31-38,50-57,60-67,71-78",
    ),
    (
        "allocate 8 full cores with 2 distributed across each NUMA node",
        M80,
        "0-2,10-12,20-22,30-32,40-41,50-51,60-61,70-71",
        16,
        1,
        "0-1,10-11,20-21,30-31,40-41,50-51,60-61,70-71",
    ),
    (
        "take one cpu from dual socket with HT - core from Socket 0",
        "topoDualSocketHT",
        "1-5,7-11",
        1,
        1,
        "1",
    ),
    (
        "take one cpu from dual socket with HT - core from Socket 0 - cpuGroupSize 2",
        "topoDualSocketHT",
        "1-5,7-11",
        1,
        2,
        "2",
    ),
    (
        "allocate 13 full cores distributed across the first 2 NUMA nodes",
        M80,
        "0-79",
        26,
        1,
        "0-6,10-16,40-45,50-55",
    ),
    (
        "allocate 13 full cores distributed across the first 2 NUMA nodes (cpuGroupSize 2)",
        M80,
        "0-79",
        26,
        2,
        "0-6,10-15,40-46,50-55",
    ),
    (
        "allocate 31 full cores with 15 CPUs distributed across each NUMA node and 1 CPU "
        "spilling over to each of NUMA 0, 1",
        M80,
        "0-79",
        62,
        1,
        "0-7,10-17,20-27,30-37,40-47,50-57,60-66,70-76",
    ),
    (
        "allocate 31 full cores with 14 CPUs distributed across each NUMA node and 2 CPUs "
        "spilling over to each of NUMA 0, 1, 2 (cpuGroupSize 2)",
        M80,
        "0-79",
        62,
        2,
        "0-7,10-17,20-27,30-36,40-47,50-57,60-67,70-76",
    ),
    (
        "allocate 31 full cores with 15 CPUs distributed across each NUMA node and 1 CPU "
        "spilling over to each of NUMA 2, 3 (to keep balance)",
        M80,
        "0-8,10-18,20-39,40-48,50-58,60-79",
        62,
        1,
        "0-7,10-17,20-27,30-37,40-46,50-56,60-67,70-77",
    ),
    (
        "allocate 31 full cores with 14 CPUs distributed across each NUMA node and 2 CPUs "
        "spilling over to each of NUMA 0, 2, 3 (to keep balance with cpuGroupSize 2)",
        M80,
        "0-8,10-18,20-39,40-48,50-58,60-79",
        62,
        2,
        "0-7,10-16,20-27,30-37,40-47,50-56,60-67,70-77",
    ),
    (
        "ensure bestRemainder chosen with NUMA nodes that have enough CPUs to satisfy the request",
        M80,
        "0-3,10-13,20-23,30-36,40-43,50-53,60-63,70-76",
        34,
        1,
        "0-3,10-13,20-23,30-34,40-43,50-53,60-63,70-74",
    ),
    (
        "ensure previous failure encountered on live machine has been fixed (1/1)",
        "topoDualSocketMultiNumaPerSocketHTLarge",
        "0,128,30,31,158,159,43-47,171-175,62,63,190,191,75-79,203-207,94,96,222,223,"
        "101-111,229-239,126,127,254,255",
        28,
        1,
        "43-47,75-79,96,101-105,171-174,203-206,229-232",
    ),
]


def _ids(cases: list[tuple[object, ...]]) -> list[str]:
    return [str(case[0]) for case in cases]


@pytest.mark.parametrize(("desc", "machine", "avail", "n", "err", "want"), COMMON, ids=_ids(COMMON))
def test_take_by_topology_numa_packed_common(
    desc: str, machine: str, avail: str, n: int, err: str, want: str
) -> None:
    topology = MACHINES[machine]
    if err:
        with pytest.raises(CPUAllocationError) as info:
            take_by_topology_numa_packed(topology, P(avail), n)
        assert str(info.value) == err
    else:
        assert take_by_topology_numa_packed(topology, P(avail), n) == P(want)


@pytest.mark.parametrize(("desc", "machine", "avail", "n", "err", "want"), COMMON, ids=_ids(COMMON))
def test_take_by_topology_numa_distributed_common(
    desc: str, machine: str, avail: str, n: int, err: str, want: str
) -> None:
    topology = MACHINES[machine]
    if err:
        with pytest.raises(CPUAllocationError) as info:
            take_by_topology_numa_distributed(topology, P(avail), n, 1)
        assert str(info.value) == err
    else:
        assert take_by_topology_numa_distributed(topology, P(avail), n, 1) == P(want)


@pytest.mark.parametrize(
    ("desc", "machine", "uncore", "avail", "n", "want"), PACKED_EXTRA, ids=_ids(PACKED_EXTRA)
)
def test_take_by_topology_numa_packed(
    desc: str, machine: str, uncore: bool, avail: str, n: int, want: str
) -> None:
    got = take_by_topology_numa_packed(
        MACHINES[machine], P(avail), n, SortingStrategy.PACKED, uncore
    )
    assert got == P(want)


@pytest.mark.parametrize(("desc", "machine", "avail", "n", "want"), SPREAD, ids=_ids(SPREAD))
def test_take_by_topology_with_spread_physical_cpus_preferred_option(
    desc: str, machine: str, avail: str, n: int, want: str
) -> None:
    options = TakeOptions(distribute_cpus_across_cores=True)
    assert take_by_topology(MACHINES[machine], P(avail), n, options=options) == P(want)


@pytest.mark.parametrize(
    ("desc", "machine", "avail", "n", "group", "want"),
    DISTRIBUTED_EXTRA,
    ids=_ids(DISTRIBUTED_EXTRA),
)
def test_take_by_topology_numa_distributed(
    desc: str, machine: str, avail: str, n: int, group: int, want: str
) -> None:
    got = take_by_topology_numa_distributed(MACHINES[machine], P(avail), n, group)
    assert got == P(want)


def test_take_by_topology_dispatches_to_distributed_with_full_pcpus_group() -> None:
    options = TakeOptions(distribute_cpus_across_numa=True, full_pcpus_only=True)
    got = take_by_topology(MACHINES[M80], P("0-79"), 26, options=options)
    assert got == P("0-6,10-15,40-46,50-55")


# TestCPUAccumulatorFreeCPUs / FreeCores / FreeNUMANodes / FreeSockets (spec section 7.1).
FREE_CPUS = [
    ("single socket HT, 8 cpus free", "topoSingleSocketHT", "0-7", [0, 4, 1, 5, 2, 6, 3, 7]),
    ("single socket HT, 5 cpus free", "topoSingleSocketHT", "3-7", [4, 5, 6, 3, 7]),
    (
        "dual socket HT, 12 cpus free",
        "topoDualSocketHT",
        "0-11",
        [0, 6, 2, 8, 4, 10, 1, 7, 3, 9, 5, 11],
    ),
    (
        "dual socket HT, 11 cpus free",
        "topoDualSocketHT",
        "1-11",
        [6, 2, 8, 4, 10, 1, 7, 3, 9, 5, 11],
    ),
    (
        "dual socket HT, 10 cpus free",
        "topoDualSocketHT",
        "1-5,7-11",
        [2, 8, 4, 10, 1, 7, 3, 9, 5, 11],
    ),
    (
        "triple socket HT, 12 cpus free",
        "topoTripleSocketHT",
        "0-3,6-13",
        [12, 13, 0, 1, 2, 3, 6, 7, 8, 9, 10, 11],
    ),
]


@pytest.mark.parametrize(("desc", "machine", "avail", "want"), FREE_CPUS, ids=_ids(FREE_CPUS))
def test_cpu_accumulator_free_cpus(desc: str, machine: str, avail: str, want: list[int]) -> None:
    acc = _Accumulator(topology_index(MACHINES[machine]), P(avail).mask, 0)
    assert acc.sorted_cpus(SortingStrategy.PACKED) == want


FREE_CORES = [
    ("single socket HT, 4 cores free", "topoSingleSocketHT", "0-7", [0, 1, 2, 3]),
    ("single socket HT, 3 cores free", "topoSingleSocketHT", "0-2,4-6", [0, 1, 2]),
    (
        "single socket HT, 3 cores free (1 partially consumed)",
        "topoSingleSocketHT",
        "0-6",
        [0, 1, 2],
    ),
    ("single socket HT, 0 cores free", "topoSingleSocketHT", "", []),
    ("single socket HT, 0 cores free (4 partially consumed)", "topoSingleSocketHT", "0-3", []),
    ("dual socket HT, 6 cores free", "topoDualSocketHT", "0-11", [0, 2, 4, 1, 3, 5]),
    (
        "dual socket HT, 5 cores free (1 consumed from socket 0)",
        "topoDualSocketHT",
        "1-5,7-11",
        [2, 4, 1, 3, 5],
    ),
    (
        "dual socket HT, 4 cores free (1 consumed from each socket)",
        "topoDualSocketHT",
        "2-5,8-11",
        [2, 4, 3, 5],
    ),
]


@pytest.mark.parametrize(("desc", "machine", "avail", "want"), FREE_CORES, ids=_ids(FREE_CORES))
def test_cpu_accumulator_free_cores(desc: str, machine: str, avail: str, want: list[int]) -> None:
    acc = _Accumulator(topology_index(MACHINES[machine]), P(avail).mask, 0)
    assert acc.free_cores() == want


MULTI = "fakeTopoMultiSocketDualSocketPerNumaHT"
FREE_SOCKETS = [
    ("single socket HT, 1 socket free", "topoSingleSocketHT", "0-7", [0]),
    ("single socket HT, 0 sockets free", "topoSingleSocketHT", "1-7", []),
    ("dual socket HT, 2 sockets free", "topoDualSocketHT", "0-11", [0, 1]),
    ("dual socket HT, 1 socket free", "topoDualSocketHT", "0-9,11", [1]),
    ("dual socket HT, 0 sockets free", "topoDualSocketHT", "0,2-9,11", []),
    ("dual socket, multi numa per socket, HT, 2 sockets free", M80, "0-79", [0, 1]),
    ("dual socket, multi numa per socket, HT, 1 sockets free", M80, "1-79", [1]),
    ("dual socket, multi numa per socket, HT, 0 sockets free", M80, "1-78", []),
    ("dual numa, multi socket per per socket, HT, 4 sockets free", MULTI, "0-79", [0, 1, 2, 3]),
    ("dual numa, multi socket per per socket, HT, 3 sockets free", MULTI, "0-19,21-79", [0, 1, 3]),
    ("dual numa, multi socket per per socket, HT, 2 sockets free", MULTI, "0-59,61-78", [0, 1]),
    (
        "dual numa, multi socket per per socket, HT, 1 sockets free",
        MULTI,
        "1-19,21-38,41-60,61-78",
        [1],
    ),
    (
        "dual numa, multi socket per per socket, HT, 0 sockets free",
        MULTI,
        "0-40,42-49,51-68,71-79",
        [],
    ),
]


@pytest.mark.parametrize(("desc", "machine", "avail", "want"), FREE_SOCKETS, ids=_ids(FREE_SOCKETS))
def test_cpu_accumulator_free_sockets(desc: str, machine: str, avail: str, want: list[int]) -> None:
    acc = _Accumulator(topology_index(MACHINES[machine]), P(avail).mask, 0)
    assert sorted(acc.free_sockets()) == want


FREE_NUMA_NODES = [
    ("single socket HT, 1 NUMA node free", "topoSingleSocketHT", "0-7", [0]),
    ("single socket HT, 0 NUMA Node free", "topoSingleSocketHT", "1-7", []),
    ("dual socket HT, 2 NUMA Node free", "topoDualSocketHT", "0-11", [0, 1]),
    ("dual socket HT, 1 NUMA Node free", "topoDualSocketHT", "0-9,11", [1]),
    ("dual socket HT, 0 NUMA node free", "topoDualSocketHT", "0,2-9,11", []),
    ("dual socket, multi numa per socket, HT, 4 NUMA Node free", M80, "0-79", [0, 1, 2, 3]),
    ("dual socket, multi numa per socket, HT, 3 NUMA node free", M80, "1-79", [1, 2, 3]),
    ("dual socket, multi numa per socket, HT, 2 NUMA node free", M80, "1-9,11-79", [2, 3]),
    ("dual socket, multi numa per socket, HT, 1 NUMA node free", M80, "1-9,11-59,61-79", [3]),
    ("dual socket, multi numa per socket, HT, 0 NUMA node free", M80, "1-9,11-59,61-78", []),
    ("dual numa, multi socket per per socket, HT, 2 NUMA node free", MULTI, "0-79", [0, 1]),
    ("dual numa, multi socket per per socket, HT, 1 NUMA node free", MULTI, "0-9,11-79", [1]),
    ("dual numa, multi socket per per socket, HT, 0 sockets free", MULTI, "0-9,11-59,61-79", []),
]


@pytest.mark.parametrize(
    ("desc", "machine", "avail", "want"), FREE_NUMA_NODES, ids=_ids(FREE_NUMA_NODES)
)
def test_cpu_accumulator_free_numa_nodes(
    desc: str, machine: str, avail: str, want: list[int]
) -> None:
    acc = _Accumulator(topology_index(MACHINES[machine]), P(avail).mask, 0)
    assert acc.free_numa_nodes() == want


@pytest.mark.parametrize(
    ("desc", "avail", "sockets", "nodes"),
    [
        (
            "dual socket, multi numa per socket, HT, 2 Socket/4 NUMA Node free",
            "0-79",
            [0, 1],
            [0, 1, 2, 3],
        ),
        (
            "dual socket, multi numa per socket, HT, 1 Socket/3 NUMA node free",
            "1-79",
            [1],
            [1, 2, 3],
        ),
        (
            "dual socket, multi numa per socket, HT, 1 Socket/ 2 NUMA node free",
            "1-9,11-79",
            [1],
            [2, 3],
        ),
        (
            "dual socket, multi numa per socket, HT, 0 Socket/ 2 NUMA node free",
            "1-59,61-79",
            [],
            [1, 3],
        ),
    ],
)
def test_cpu_accumulator_free_sockets_and_numa_nodes(
    desc: str, avail: str, sockets: list[int], nodes: list[int]
) -> None:
    acc = _Accumulator(topology_index(MACHINES[M80]), P(avail).mask, 0)
    assert acc.free_numa_nodes() == nodes
    assert acc.free_sockets() == sockets


@pytest.mark.parametrize(
    ("desc", "avail", "takes", "n", "satisfied", "failed"),
    [
        ("take 0 cpus from a single socket HT, require 1", "0-7", [""], 1, False, False),
        (
            "take 0 cpus from a single socket HT, require 1, none available",
            "",
            [""],
            1,
            False,
            True,
        ),
        ("take 1 cpu from a single socket HT, require 1", "0-7", ["0"], 1, True, False),
        ("take 1 cpu from a single socket HT, require 2", "0-7", ["0"], 2, False, False),
        (
            "take 2 cpu from a single socket HT, require 4, expect failed",
            "0-2",
            ["0", "1"],
            4,
            False,
            True,
        ),
        (
            "take all cpus one at a time from a single socket HT, require 8",
            "0-7",
            [str(c) for c in range(8)],
            8,
            True,
            False,
        ),
    ],
)
def test_cpu_accumulator_take(
    desc: str, avail: str, takes: list[str], n: int, satisfied: bool, failed: bool
) -> None:
    acc = _Accumulator(topology_index(MACHINES["topoSingleSocketHT"]), P(avail).mask, n)
    taken = 0
    for cpus in takes:
        acc.take(P(cpus).mask)
        taken += len(P(cpus))
    assert acc.satisfied() is satisfied
    assert acc.failed() is failed
    for cpus in takes:
        assert P(cpus).mask & acc.free == 0
        assert P(cpus).mask & ~acc.result == 0
    assert acc.need == n - taken


def test_not_enough_reports_the_size_of_the_given_set_as_the_kubelet_does() -> None:
    # CPU 99 is not on the machine: only 2 usable CPUs, but Go prints availableCPUs.Size().
    with pytest.raises(CPUAllocationError, match="requested=3, available=3"):
        take_by_topology(MACHINES["topoDualSocketHT"], P("0,1,99"), 3)


def _uncore_machine(core: int, socket: int, numa: int, l3: int, smt: bool = False) -> Topology:
    """16-CPU uncore machines; shapes inferred from the upstream vectors (the tables that
    define ``topoUncore*`` live in a file not available here)."""
    return Topology.build(
        CPUInfo(
            cpu=c,
            core=(c % 8) if smt else c // core,
            socket=c // socket,
            numa=c // numa,
            l3=((c % 8) if smt else c) // l3,
        )
        for c in range(16)
    )


UNCORE_MACHINES = {
    "topoUncoreSingleSocketNoSMT": _uncore_machine(1, 16, 16, 4),
    "topoUncoreDualSocketNoSMT": _uncore_machine(1, 8, 8, 4),
    "topoUncoreSingleSocketMultiNuma": _uncore_machine(1, 16, 8, 4),
    "topoUncoreSingleSocketSMT": _uncore_machine(1, 16, 16, 4, smt=True),
}

UNCORE_PACKED = [
    (
        "take cpus from two full UncoreCaches and partial from a single UncoreCache",
        "topoUncoreSingleSocketNoSMT",
        "1-15",
        10,
        "1,2,4-11",
    ),
    (
        "take first available UncoreCache from first socket",
        "topoUncoreDualSocketNoSMT",
        "0-15",
        4,
        "0-3",
    ),
    (
        "take all available UncoreCache from first socket",
        "topoUncoreDualSocketNoSMT",
        "2-15",
        6,
        "2-7",
    ),
    (
        "take first available UncoreCache from second socket",
        "topoUncoreDualSocketNoSMT",
        "8-15",
        4,
        "8-11",
    ),
    (
        "take first available UncoreCache from available NUMA",
        "topoUncoreSingleSocketMultiNuma",
        "3,4-8,12",
        2,
        "4,5",
    ),
    (
        "take cpus from best available UncoreCache group of multi uncore cache single socket - "
        "SMT enabled",
        "topoUncoreSingleSocketSMT",
        "2-3,10-11,4-7,12-15",
        6,
        "4,5,6,12,13,14",
    ),
    (
        "take cpus from multiple UncoreCache of single socket - SMT enabled",
        "topoUncoreSingleSocketSMT",
        "1-7,9-15",
        10,
        "4-7,12-15,1,9",
    ),
]


@pytest.mark.parametrize(
    ("desc", "machine", "avail", "n", "want"), UNCORE_PACKED, ids=_ids(UNCORE_PACKED)
)
def test_take_by_topology_numa_packed_prefer_align_by_uncore_cache(
    desc: str, machine: str, avail: str, n: int, want: str
) -> None:
    topology = UNCORE_MACHINES[machine]
    got = take_by_topology_numa_packed(topology, P(avail), n, SortingStrategy.PACKED, True)
    assert got == P(want)
