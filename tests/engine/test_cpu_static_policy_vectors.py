"""Static policy conformance: cases ported from the kubelet's ``policy_static_test.go``.

Tests are named after the upstream test functions, cases after their descriptions. The
upstream tests drive a mock state; here the state is loaded unvalidated the same way.
"""

from __future__ import annotations

from collections.abc import Mapping

import pytest
from cpu_pods import make_multi_container_pod, make_pod

from nri_plrm.base.cpuset import CPUSet
from nri_plrm.engine.cpu_manager import CPUManager
from nri_plrm.engine.cpu_options import CPUManagerConfig, CPUManagerConfigError
from nri_plrm.engine.cpu_state import CPUStateError
from nri_plrm.engine.spec import (
    SMT_ALIGNMENT_ERROR,
    UNEXPECTED_ADMISSION_ERROR,
    AdmissionError,
    ContainerKind,
    PodSpec,
    TopologyHint,
)
from nri_plrm.topology.machines import MACHINES

P = CPUSet.parse
QUAD = MACHINES["topoQuadSocketFourWayHT"]
QUAD_ALL = QUAD.all_cpus
QUAD_SOCK0 = CPUSet(c for c, i in QUAD.cpu_info.items() if i.socket == 0)
QUAD_SOCK1 = CPUSet(c for c, i in QUAD.cpu_info.items() if i.socket == 1)


def _manager(
    machine: str,
    reserved: int = 0,
    options: Mapping[str, str] | None = None,
    explicit: CPUSet | None = None,
) -> CPUManager:
    config = CPUManagerConfig(
        reserved_cpus=explicit,
        reserved_cpu_count=reserved if explicit is None else len(explicit),
        options=dict(options or {}),
    )
    return CPUManager(MACHINES[machine], config)


class Case:
    """One ``staticPolicyTest`` row."""

    def __init__(
        self,
        description: str,
        machine: str,
        reserved: int,
        assignments: Mapping[str, CPUSet],
        default: CPUSet,
        pod: PodSpec,
        want: CPUSet | None,
        error: str = "",
        reason: str = UNEXPECTED_ADMISSION_ERROR,
        options: Mapping[str, str] | None = None,
        explicit: CPUSet | None = None,
        hint: TopologyHint | None = None,
    ) -> None:
        self.description = description
        self.machine = machine
        self.reserved = reserved
        self.assignments = assignments
        self.default = default
        self.pod = pod
        self.want = want
        self.error = error
        self.reason = reason
        self.options = options
        self.explicit = explicit
        self.hint = hint

    def __repr__(self) -> str:
        return self.description


OPTIONS_INSENSITIVE = [
    Case(
        "GuPodMultipleCores, SingleSocketHT, ExpectAllocOneCore",
        "topoSingleSocketHT",
        1,
        {"fakeContainer100": P("2,3,6,7")},
        P("0,1,4,5"),
        make_pod("fakePod", "fakeContainer3", "2000m", "2000m"),
        P("1,5"),
    ),
    Case(
        "GuPodMultipleCores, DualSocketHT, ExpectAllocOneSocket",
        "topoDualSocketHT",
        1,
        {"fakeContainer100": P("2")},
        P("0,1,3-11"),
        make_pod("fakePod", "fakeContainer3", "6000m", "6000m"),
        P("1,3,5,7,9,11"),
    ),
    Case(
        "GuPodMultipleCores, DualSocketHT, ExpectAllocThreeCores",
        "topoDualSocketHT",
        1,
        {"fakeContainer100": P("1,5")},
        P("0,2,3,4,6-11"),
        make_pod("fakePod", "fakeContainer3", "6000m", "6000m"),
        P("2,3,4,8,9,10"),
    ),
    Case(
        "GuPodMultipleCores, DualSocketNoHT, ExpectAllocOneSocket",
        "topoDualSocketNoHT",
        1,
        {"fakeContainer100": P("")},
        P("0,1,3-7"),
        make_pod("fakePod", "fakeContainer1", "4000m", "4000m"),
        P("4-7"),
    ),
    Case(
        "GuPodMultipleCores, DualSocketNoHT, ExpectAllocFourCores",
        "topoDualSocketNoHT",
        1,
        {"fakeContainer100": P("4,5")},
        P("0,1,3,6,7"),
        make_pod("fakePod", "fakeContainer1", "4000m", "4000m"),
        P("1,3,6,7"),
    ),
    Case(
        "GuPodMultipleCores, DualSocketHT, ExpectAllocOneSocketOneCore",
        "topoDualSocketHT",
        1,
        {"fakeContainer100": P("2")},
        P("0,1,3-11"),
        make_pod("fakePod", "fakeContainer3", "8000m", "8000m"),
        P("1,3,4,5,7,9,10,11"),
    ),
    Case(
        "NonGuPod, SingleSocketHT, NoAlloc",
        "topoSingleSocketHT",
        1,
        {},
        P("0-7"),
        make_pod("fakePod", "fakeContainer1", "1000m", "2000m"),
        None,
    ),
    Case(
        "GuPodNonIntegerCore, SingleSocketHT, NoAlloc",
        "topoSingleSocketHT",
        1,
        {},
        P("0-7"),
        make_pod("fakePod", "fakeContainer4", "977m", "977m"),
        None,
    ),
    Case(
        "GuPodMultipleCores, topoQuadSocketFourWayHT, ExpectAllocSock0",
        "topoQuadSocketFourWayHT",
        0,
        {"fakeContainer100": P("3,4,5,6,7,11")},
        QUAD_ALL - P("3,4,5,6,7,11"),
        make_pod("fakePod", "fakeContainer5", "72000m", "72000m"),
        QUAD_SOCK0,
    ),
    Case(
        "GuPodMultipleCores, topoQuadSocketFourWayHT, ExpectAllocAllFullCoresFromThreeSockets",
        "topoQuadSocketFourWayHT",
        0,
        {"fakeContainer100": QUAD_ALL - P("1,25,13,38,2,9,11,35,23,48,12,51,53,173,113,233,54,61")},
        P("1,25,13,38,2,9,11,35,23,48,12,51,53,173,113,233,54,61"),
        make_pod("fakePod", "fakeCcontainer5", "12000m", "12000m"),
        P("1,25,13,38,11,35,23,48,53,173,113,233"),
    ),
    Case(
        "GuPodMultipleCores, topoQuadSocketFourWayHT, ExpectAllocAllSock1+FullCore",
        "topoQuadSocketFourWayHT",
        0,
        {
            "fakeContainer100": QUAD_ALL
            - (QUAD_SOCK1 | P("10,34,22,47,53,173,61,181,108,228,115,235"))
        },
        QUAD_SOCK1 | P("10,34,22,47,53,173,61,181,108,228,115,235"),
        make_pod("fakePod", "fakeContainer5", "76000m", "76000m"),
        QUAD_SOCK1 | P("10,34,22,47"),
    ),
]

DEFAULT_OPTIONS = [
    Case(
        "GuPodSingleCore, SingleSocketHT, ExpectAllocOneCPU",
        "topoSingleSocketHT",
        1,
        {},
        P("0-7"),
        make_pod("fakePod", "fakeContainer2", "1000m", "1000m"),
        P("4"),
    ),
    Case(
        "GuPodMultipleCores, topoQuadSocketFourWayHT, ExpectAllocCPUs",
        "topoQuadSocketFourWayHT",
        0,
        {"fakeContainer100": QUAD_ALL - P("10,11,53,37,55,67,52")},
        P("10,11,53,67,52"),
        make_pod("fakePod", "fakeContainer5", "5000m", "5000m"),
        P("10,11,53,67,52"),
    ),
    Case(
        "GuPodSingleCore, SingleSocketHT, ExpectError",
        "topoSingleSocketHT",
        1,
        {},
        P("0-7"),
        make_pod("fakePod", "fakeContainer2", "8000m", "8000m"),
        None,
        "not enough cpus available to satisfy request: requested=8, available=7",
    ),
    Case(
        "GuPodMultipleCores, SingleSocketHT, ExpectSameAllocation",
        "topoSingleSocketHT",
        1,
        {"fakeContainer3": P("2,3,6,7")},
        P("0,1,4,5"),
        make_pod("fakePod", "fakeContainer3", "4000m", "4000m"),
        P("2,3,6,7"),
    ),
    Case(
        "GuPodMultipleCores, DualSocketHT, NoAllocExpectError",
        "topoDualSocketHT",
        1,
        {"fakeContainer100": P("1,2,3")},
        P("0,4-11"),
        make_pod("fakePod", "fakeContainer5", "10000m", "10000m"),
        None,
        "not enough cpus available to satisfy request: requested=10, available=8",
    ),
    Case(
        "GuPodMultipleCores, SingleSocketHT, NoAllocExpectError",
        "topoSingleSocketHT",
        1,
        {"fakeContainer100": P("1-6")},
        P("0,7"),
        make_pod("fakePod", "fakeContainer5", "2000m", "2000m"),
        None,
        "not enough cpus available to satisfy request: requested=2, available=1",
    ),
    Case(
        "GuPodMultipleCores, topoQuadSocketFourWayHT, NoAlloc",
        "topoQuadSocketFourWayHT",
        0,
        {"fakeContainer100": QUAD_ALL - P("10,11,53,37,55,67,52")},
        P("10,11,53,37,55,67,52"),
        make_pod("fakePod", "fakeContainer5", "76000m", "76000m"),
        None,
        "not enough cpus available to satisfy request: requested=76, available=7",
    ),
]

FULL = {"full-pcpus-only": "true"}
SMT_ALIGN = [
    Case(
        "GuPodSingleCore, SingleSocketHT, ExpectAllocOneCPU",
        "topoSingleSocketHT",
        1,
        {},
        P("0-7"),
        make_pod("fakePod", "fakeContainer2", "1000m", "1000m"),
        None,
        "SMT Alignment Error: requested 1 cpus not multiple cpus per core = 2",
        SMT_ALIGNMENT_ERROR,
        FULL,
    ),
    Case(
        "GuPodMultipleCores, topoQuadSocketFourWayHT, ExpectAllocOneCPUs",
        "topoQuadSocketFourWayHT",
        8,
        {},
        QUAD_ALL,
        make_pod("fakePod", "fakeContainer15", "15000m", "15000m"),
        None,
        "SMT Alignment Error: requested 15 cpus not multiple cpus per core = 4",
        SMT_ALIGNMENT_ERROR,
        FULL,
    ),
    Case(
        "GuPodManyCores, topoDualSocketHT, ExpectDoNotAllocPartialCPU",
        "topoDualSocketHT",
        2,
        {},
        P("0,2,3,4,5,7-11"),
        make_pod("fakePod", "fakeContainerBug113537_1", "10000m", "10000m"),
        None,
        "SMT Alignment Error: not enough free physical CPUs: available physical CPUs = 8, "
        "requested CPUs = 10, CPUs per core = 2",
        SMT_ALIGNMENT_ERROR,
        FULL,
        explicit=P("1,6"),
    ),
    Case(
        "GuPodManyCores, topoDualSocketHT, AutoReserve, ExpectAllocAllCPUs",
        "topoDualSocketHT",
        2,
        {},
        P("1-5,7-11"),
        make_pod("fakePod", "fakeContainerBug113537_2", "10000m", "10000m"),
        P("1-5,7-11"),
        options=FULL,
    ),
    Case(
        "GuPodManyCores, topoDualSocketHT, ExpectAllocAllCPUs",
        "topoDualSocketHT",
        2,
        {},
        P("1-5,7-11"),
        make_pod("fakePod", "fakeContainerBug113537_2", "10000m", "10000m"),
        P("1-5,7-11"),
        options=FULL,
        explicit=P("0,6"),
    ),
]

ALIGN_BY_SOCKET = [
    Case(
        "Align by socket: true, cpu's within same socket of numa in hint are part of allocation",
        "topoDualSocketMultiNumaPerSocketHT",
        1,
        {},
        P("2,11,21,22"),
        make_pod("fakePod", "fakeContainer2", "2000m", "2000m"),
        P("2,11"),
        options={"align-by-socket": "true"},
        hint=TopologyHint(0b101, True),
    ),
    Case(
        "Align by socket: false, cpu's are taken strictly from NUMA nodes in hint",
        "topoDualSocketMultiNumaPerSocketHT",
        1,
        {},
        P("2,11,21,22"),
        make_pod("fakePod", "fakeContainer2", "2000m", "2000m"),
        P("2,21"),
        options={"align-by-socket": "false"},
        hint=TopologyHint(0b101, True),
    ),
]

WITH_RESV_LIST = [
    Case(
        "GuPodSingleCore, SingleSocketHT, ExpectError (reserved list)",
        "topoSingleSocketHT",
        1,
        {},
        P("0-7"),
        make_pod("fakePod", "fakeContainer2", "8000m", "8000m"),
        None,
        "not enough cpus available to satisfy request: requested=8, available=7",
        explicit=P("0"),
    ),
    Case(
        "GuPodSingleCore, SingleSocketHT, ExpectAllocOneCPU (reserved list)",
        "topoSingleSocketHT",
        2,
        {},
        P("0-7"),
        make_pod("fakePod", "fakeContainer2", "1000m", "1000m"),
        P("4"),
        explicit=P("0,1"),
    ),
    Case(
        "GuPodMultipleCores, SingleSocketHT, ExpectAllocOneCore (reserved list)",
        "topoSingleSocketHT",
        2,
        {"fakeContainer100": P("2,3,6,7")},
        P("0,1,4,5"),
        make_pod("fakePod", "fakeContainer3", "2000m", "2000m"),
        P("4,5"),
        explicit=P("0,1"),
    ),
]


def _run(case: Case, options: Mapping[str, str] | None) -> None:
    manager = _manager(case.machine, case.reserved, options, case.explicit)
    manager.start_from_state(case.default, {"fakePod": dict(case.assignments)}, validate=False)
    container = case.pod.containers[0]
    if case.error:
        with pytest.raises(AdmissionError) as info:
            manager.allocate(case.pod, container, case.hint)
        assert info.value.reason == case.reason
        if case.reason == UNEXPECTED_ADMISSION_ERROR:
            assert info.value.message == f"Allocate failed due to {case.error}, which is unexpected"
        else:
            assert info.value.message == case.error
    else:
        manager.allocate(case.pod, container, case.hint)
    got = manager.assignment("fakePod", container.name)
    if case.want is None:
        assert got is None
        assert manager.default_cpuset == case.default
    else:
        assert got == case.want
        assert got.is_disjoint(manager.default_cpuset)


@pytest.mark.parametrize("options", [None, FULL], ids=["options=nil", "options=full-pcpus-only"])
@pytest.mark.parametrize("case", OPTIONS_INSENSITIVE, ids=repr)
def test_static_policy_add_options_insensitive(case: Case, options: Mapping[str, str]) -> None:
    _run(case, options)


@pytest.mark.parametrize("case", DEFAULT_OPTIONS + SMT_ALIGN + ALIGN_BY_SOCKET, ids=repr)
def test_static_policy_add(case: Case) -> None:
    _run(case, case.options)


@pytest.mark.parametrize("case", WITH_RESV_LIST, ids=repr)
def test_static_policy_add_with_resv_list(case: Case) -> None:
    _run(case, case.options)


@pytest.mark.parametrize(
    ("description", "default", "assignments", "options", "reserved", "error", "want"),
    [
        ("non-corrupted state", "1-11", {"0": "0"}, {}, 0, "", "1-11"),
        ("empty cpuset", "", {}, {}, 1, "", "0-11"),
        (
            "reserved cores 0 & 6 are not present in available cpuset",
            "0,1",
            {},
            {},
            2,
            'not all reserved cpus: "0,6" are present in defaultCpuSet: "0-1"',
            "",
        ),
        (
            "some of reserved cores are present in available cpuset (StrictCPUReservationOption)",
            "0,1",
            {},
            {"strict-cpu-reservation": "true"},
            2,
            'some of strictly reserved cpus: "0" are present in defaultCpuSet: "0-1"',
            "",
        ),
        (
            "assigned core 2 is still present in available cpuset",
            "2-11",
            {"0": "0-2"},
            {},
            0,
            'pod: fakePod, container: 0 cpuset: "0-2" overlaps with default cpuset "2-11"',
            "",
        ),
        (
            "assigned core 2 is still present in available cpuset (StrictCPUReservationOption)",
            "2-11",
            {"0": "0-2"},
            {"strict-cpu-reservation": "true"},
            0,
            'pod: fakePod, container: 0 cpuset: "0-2" overlaps with default cpuset "2-11"',
            "",
        ),
        (
            "core 12 is not present in topology but is in state cpuset",
            "5-12",
            {"0": "0-2", "1": "3-4"},
            {},
            0,
            'current set of available CPUs "0-11" doesn\'t match with CPUs in state "0-12"',
            "",
        ),
        (
            "core 11 is present in topology but is not in state cpuset",
            "5-10",
            {"0": "0-2", "1": "3-4"},
            {},
            0,
            'current set of available CPUs "0-11" doesn\'t match with CPUs in state "0-10"',
            "",
        ),
    ],
)
def test_static_policy_start(
    description: str,
    default: str,
    assignments: dict[str, str],
    options: dict[str, str],
    reserved: int,
    error: str,
    want: str,
) -> None:
    manager = _manager("topoDualSocketHT", reserved, options)
    entries = {"fakePod": {k: P(v) for k, v in assignments.items()}} if assignments else {}
    if error:
        with pytest.raises(CPUStateError) as info:
            manager.start_from_state(P(default), entries)
        assert str(info.value) == error
    else:
        manager.start_from_state(P(default), entries)
        assert manager.default_cpuset == P(want)


@pytest.mark.parametrize(
    ("description", "options", "default", "error", "want"),
    [
        ("empty cpuset", {}, "", "", "0-11"),
        (
            "empty cpuset with StrictCPUReservationOption enabled",
            {"strict-cpu-reservation": "true"},
            "",
            "",
            "2-11",
        ),
        (
            "reserved cores 0 & 1 are not present in available cpuset",
            {},
            "2-5",
            'not all reserved cpus: "0-1" are present in defaultCpuSet: "2-5"',
            "",
        ),
        (
            "reserved cores 0 & 1 are present in available cpuset with StrictCPUReservationOption "
            "enabled",
            {"strict-cpu-reservation": "true"},
            "0-5",
            'some of strictly reserved cpus: "0-1" are present in defaultCpuSet: "0-5"',
            "",
        ),
    ],
)
def test_static_policy_start_with_resv_list(
    description: str, options: dict[str, str], default: str, error: str, want: str
) -> None:
    manager = _manager("topoDualSocketHT", options=options, explicit=P("0,1"))
    if error:
        with pytest.raises(CPUStateError) as info:
            manager.start_from_state(P(default), {})
        assert str(info.value) == error
    else:
        manager.start_from_state(P(default), {})
        assert manager.default_cpuset == P(want)


def test_static_policy_start_with_resv_list_inconsistency_between_num_reserved_and_reserved() -> (
    None
):
    config = CPUManagerConfig(reserved_cpus=P("0,1"), reserved_cpu_count=1)
    with pytest.raises(CPUManagerConfigError) as info:
        CPUManager(MACHINES["topoDualSocketHT"], config)
    assert str(info.value) == (
        "[cpumanager] unable to reserve the required amount of CPUs (size of 0-1 did not equal 1)"
    )


@pytest.mark.parametrize(
    ("description", "affinity", "n", "want"),
    [
        ("Request 2 CPUs, No BitMask", None, 2, "0,6"),
        ("Request 2 CPUs, BitMask on Socket 0", 0b01, 2, "0,6"),
        ("Request 2 CPUs, BitMask on Socket 1", 0b10, 2, "1,7"),
        ("Request 8 CPUs, BitMask on Socket 0", 0b01, 8, "0,6,2,8,4,10,1,7"),
        ("Request 8 CPUs, BitMask on Socket 1", 0b10, 8, "1,7,3,9,5,11,0,6"),
    ],
)
def test_topology_aware_allocate_cpus(
    description: str, affinity: int | None, n: int, want: str
) -> None:
    manager = _manager("topoDualSocketHT")
    assert manager.allocate_cpus(n, affinity) == P(want)
    assert manager.default_cpuset == P("0-11") - P(want)


@pytest.mark.parametrize(
    ("description", "container", "assignments", "default", "want"),
    [
        (
            "SingleSocketHT, DeAllocOneContainer",
            "fakeContainer1",
            {"fakeContainer1": "1-3"},
            "4-7",
            "1-7",
        ),
        (
            "SingleSocketHT, DeAllocOneContainer, BeginEmpty",
            "fakeContainer1",
            {"fakeContainer1": "1-3", "fakeContainer2": "4-7"},
            "",
            "1-3",
        ),
        (
            "SingleSocketHT, DeAllocTwoContainer",
            "fakeContainer1",
            {"fakeContainer1": "1,3,5", "fakeContainer2": "2,4"},
            "6,7",
            "1,3,5,6,7",
        ),
        (
            "SingleSocketHT, NoDeAlloc",
            "fakeContainer2",
            {"fakeContainer1": "1,3,5"},
            "2,4,6,7",
            "2,4,6,7",
        ),
    ],
)
def test_static_policy_remove(
    description: str, container: str, assignments: dict[str, str], default: str, want: str
) -> None:
    manager = _manager("topoSingleSocketHT")
    entries = {"fakePod": {k: P(v) for k, v in assignments.items()}}
    manager.start_from_state(P(default), entries, validate=False)
    manager.remove_container("fakePod", container)
    assert manager.default_cpuset == P(want)
    assert manager.assignment("fakePod", container) is None


def test_static_policy_reuse_cpus_single_socket_ht_de_alloc_one_init_container() -> None:
    manager = _manager("topoSingleSocketHT")
    pod = make_multi_container_pod([("4000m", "4000m")], [("2000m", "2000m")])
    for container in pod.all_containers():
        manager.allocate(pod, container, None)
    assert manager.default_cpuset == P("2,3,6,7")
    manager.remove_container("fakePod", "initContainer-0")
    assert manager.default_cpuset == P("1,2,3,5,6,7")
    assert manager.assignment("fakePod", "initContainer-0") is None


def test_static_policy_do_not_reuse_cpus_of_a_restartable_init_container() -> None:
    manager = _manager("topoSingleSocketHT")
    pod = make_multi_container_pod([("4000m", "4000m")], [("2000m", "2000m")])
    sidecar = pod.init_containers[0]
    pod = PodSpec(
        uid=pod.uid,
        init_containers=(
            type(sidecar)(sidecar.name, ContainerKind.SIDECAR, sidecar.requests, sidecar.limits),
        ),
        containers=pod.containers,
    )
    for container in pod.all_containers():
        manager.allocate(pod, container, None)
    assert manager.default_cpuset == P("3,7")
