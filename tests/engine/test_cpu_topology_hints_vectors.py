"""CPU topology hints: cases ported from the kubelet's ``topology_hints_test.go``."""

from __future__ import annotations

import itertools
from collections.abc import Mapping

import pytest
from cpu_pods import container, make_pod
from hypothesis import given, settings
from hypothesis import strategies as st

from nri_plrm.base.cpuset import CPUSet
from nri_plrm.engine import cpu_hints
from nri_plrm.engine.cpu_hints import generate_cpu_hints
from nri_plrm.engine.cpu_manager import CPUManager
from nri_plrm.engine.cpu_options import CPUManagerConfig
from nri_plrm.engine.spec import ContainerKind, PodSpec, TopologyHint
from nri_plrm.topology.machines import MACHINES

P = CPUSet.parse
T = True
F = False

# (name, request, assignments of fakeContainer, default set, expected hints as (mask, preferred))
CASES: list[tuple[str, str, str | None, str, list[tuple[int, bool]]]] = [
    (
        "Request 2 CPUs, 4 available on NUMA 0, 6 available on NUMA 1",
        "2",
        None,
        "2-11",
        [(0b01, T), (0b10, T), (0b11, F)],
    ),
    (
        "Request 5 CPUs, 4 available on NUMA 0, 6 available on NUMA 1",
        "5",
        None,
        "2-11",
        [(0b10, T), (0b11, F)],
    ),
    (
        "Request 7 CPUs, 4 available on NUMA 0, 6 available on NUMA 1",
        "7",
        None,
        "2-11",
        [(0b11, T)],
    ),
    ("Request 11 CPUs, 4 available on NUMA 0, 6 available on NUMA 1", "11", None, "2-11", []),
    ("Request 2 CPUs, 1 available on NUMA 0, 1 available on NUMA 1", "2", None, "0,3", [(0b11, F)]),
    ("Request more CPUs than available", "5", None, "0-3", []),
    (
        "Regenerate Single-Node NUMA Hints if already allocated 1/2",
        "2",
        "0,6",
        "",
        [(0b01, T), (0b11, F)],
    ),
    (
        "Regenerate Single-Node NUMA Hints if already allocated 2/2",
        "2",
        "3,9",
        "",
        [(0b10, T), (0b11, F)],
    ),
    ("Regenerate Cross-NUMA Hints if already allocated", "11", "0-10", "", [(0b11, T)]),
    ("Requested less than already allocated", "2", "0,3,6,9", "", []),
    ("Requested more than already allocated", "11", "0,3,6,9", "", []),
]


def _manager(machine: str, default: str, entries: Mapping[str, str], **options: str) -> CPUManager:
    manager = CPUManager(
        MACHINES[machine], CPUManagerConfig(reserved_cpu_count=0, options=dict(options))
    )
    state = {"fakePod": {k: P(v) for k, v in entries.items()}} if entries else {}
    manager.start_from_state(P(default), state, validate=False)
    return manager


def _hints(pairs: list[tuple[int, bool]]) -> list[TopologyHint]:
    return [TopologyHint(mask, preferred) for mask, preferred in pairs]


@pytest.mark.parametrize(
    ("name", "cpus", "held", "default", "want"), CASES, ids=[c[0] for c in CASES]
)
def test_get_topology_hints(
    name: str, cpus: str, held: str | None, default: str, want: list[tuple[int, bool]]
) -> None:
    pod = make_pod("fakePod", "fakeContainer", cpus, cpus)
    manager = _manager("returnMachineInfo", default, {"fakeContainer": held} if held else {})
    assert manager.get_topology_hints(pod, pod.containers[0]) == {"cpu": _hints(want)}


@pytest.mark.parametrize(
    ("name", "cpus", "held", "default", "want"), CASES, ids=[c[0] for c in CASES]
)
def test_get_pod_topology_hints(
    name: str, cpus: str, held: str | None, default: str, want: list[tuple[int, bool]]
) -> None:
    pod = make_pod("fakePod", "fakeContainer", cpus, cpus)
    manager = _manager("returnMachineInfo", default, {"fakeContainer": held} if held else {})
    assert manager.get_pod_topology_hints(pod) == {"cpu": _hints(want)}


ALL_BUT_FIRST = [(0b0011, F), (0b0101, F), (0b1001, F), (0b0111, F), (0b1011, F), (0b1101, F)]


@pytest.mark.parametrize(
    ("description", "cpus", "default", "align", "want"),
    [
        (
            "AlignBySocket:false, Preferred hints does not contains socket aligned hints",
            "2",
            "2,3,11",
            "false",
            [(0b0001, T), *ALL_BUT_FIRST, (0b1111, F)],
        ),
        (
            "AlignBySocket:true Preferred hints contains socket aligned hints",
            "2",
            "2,3,11",
            "true",
            [(0b0001, T), (0b0011, T), *ALL_BUT_FIRST[1:], (0b1111, F)],
        ),
        (
            "AlignBySocket:true Preferred hints are spread across socket since 2 sockets are "
            "required",
            "41",
            "0-28,40-57",
            "true",
            [(0b0111, T), (0b1111, T)],
        ),
    ],
)
def test_get_pod_topology_hints_with_policy_options(
    description: str, cpus: str, default: str, align: str, want: list[tuple[int, bool]]
) -> None:
    pod = make_pod("fakePod", "fakeContainer", cpus, cpus)
    manager = _manager(
        "topoDualSocketMultiNumaPerSocketHT", default, {}, **{"align-by-socket": align}
    )
    assert manager.get_pod_topology_hints(pod) == {"cpu": _hints(want)}


def _pod(init: list[tuple[str, bool]], apps: list[str]) -> PodSpec:
    return PodSpec(
        uid="fakePod",
        init_containers=tuple(
            container(
                f"initContainer-{i}",
                cpu,
                cpu,
                ContainerKind.SIDECAR if sidecar else ContainerKind.INIT,
            )
            for i, (cpu, sidecar) in enumerate(init)
        ),
        containers=tuple(container(f"appContainer-{i}", c, c) for i, c in enumerate(apps)),
    )


@pytest.mark.parametrize(
    ("name", "pod", "want"),
    [
        ("TestCase01: if requestedCPU == 0, Pod is not Guaranteed Qos", _pod([("0", F)], ["0"]), 0),
        ("TestCase02: if requestedCPU == 0, Pod is not Guaranteed Qos", _pod([("0", F)], ["2"]), 0),
        ("TestCase03: if requestedCPU == 0, Pod is not Guaranteed Qos", _pod([("2", F)], ["0"]), 0),
        ("TestCase04: Guaranteed Pod requests 2 CPUs", _pod([("2", F)], ["2"]), 2),
        ("TestCase05: Guaranteed Pod requests 5 CPUs", _pod([("5", F)], ["5"]), 5),
        (
            "TestCase06: The number of CPUs requested By app is bigger than the number of CPUs "
            "requested by init",
            _pod([("2", F)], ["5"]),
            5,
        ),
        (
            "TestCase07: The number of CPUs requested By init is bigger than the number of CPUs "
            "requested by app",
            _pod([("5", F)], ["2"]),
            5,
        ),
        (
            "TestCase08: Sum of CPUs requested by multiple containers",
            _pod([("2", F), ("4", F)], ["2", "4"]),
            6,
        ),
        (
            "TestCase09: restartable init container + regular container",
            _pod([("1", T)], ["1"]),
            2,
        ),
        (
            "TestCase09: multiple restartable init containers",
            _pod([("5", F), ("1", T), ("2", T), ("3", T)], ["1"]),
            7,
        ),
        (
            "TestCase11: multiple restartable and regular init containers",
            _pod([("5", F), ("1", T), ("2", T), ("5", F), ("3", T)], ["1"]),
            8,
        ),
        (
            "TestCase12: restartable init, regular init and regular container",
            _pod([("10", T), ("200", F)], ["100"]),
            210,
        ),
    ],
)
def test_pod_guaranteed_cpus(name: str, pod: PodSpec, want: int) -> None:
    manager = CPUManager(MACHINES["returnMachineInfo"], CPUManagerConfig(reserved_cpu_count=0))
    assert manager.pod_guaranteed_cpus(pod) == want


def _naive_hints(
    machine: str, available: CPUSet, reusable: CPUSet, request: int, align: bool
) -> list[TopologyHint]:
    """A direct transcription of the kubelet's loop, to check the table-driven version."""
    topology = MACHINES[machine]
    ids = sorted({i.numa for i in topology.cpu_info.values()})
    numa_of = {c: i.numa for c, i in topology.cpu_info.items()}
    masks: list[tuple[int, ...]] = [
        combo for k in range(1, len(ids) + 1) for combo in itertools.combinations(ids, k)
    ]
    min_affinity = len(ids)
    hints: list[tuple[int, ...]] = []
    for combo in masks:
        if sum(1 for c in topology.cpu_info if numa_of[c] in combo) >= request:
            min_affinity = min(min_affinity, len(combo))
        if any(numa_of.get(c, 0) not in combo for c in reusable):
            continue
        matching = len(reusable) + sum(1 for c in available if numa_of[c] in combo)
        if matching >= request:
            hints.append(combo)
    per_socket = len(ids) // topology.num_sockets
    out = []
    for combo in hints:
        preferred = len(combo) == min_affinity
        if align and per_socket:
            sockets = {i.socket for i in topology.cpu_info.values() if i.numa in combo}
            if len(sockets) == (min_affinity + per_socket - 1) // per_socket:
                preferred = True
        out.append(TopologyHint(sum(1 << n for n in combo), preferred))
    return out


@settings(max_examples=150, deadline=None)
@given(
    machine=st.sampled_from(["topoDualSocketMultiNumaPerSocketHT", "topoDualSocketHT"]),
    available=st.sets(st.integers(0, 79)),
    reusable=st.sets(st.integers(0, 79), max_size=4),
    request=st.integers(1, 80),
    align=st.booleans(),
)
def test_generated_hints_equal_the_kubelet_loop(
    machine: str, available: set[int], reusable: set[int], request: int, align: bool
) -> None:
    topology = MACHINES[machine]
    avail = CPUSet(available) & topology.all_cpus
    reuse = CPUSet(reusable) & topology.all_cpus
    got = generate_cpu_hints(topology, avail, reuse, request, align_by_socket=align)
    assert got == _naive_hints(machine, avail, reuse, request, align)


def test_an_answer_asked_again_is_the_kept_one() -> None:
    topology = MACHINES["topoDualSocketMultiNumaPerSocketHT"]
    available = CPUSet.parse("1-9,40-49")
    first = generate_cpu_hints(topology, available, CPUSet(), 4)
    assert generate_cpu_hints(topology, available, CPUSet(), 4) is first
    assert generate_cpu_hints(topology, available, CPUSet(), 5) is not first
    assert generate_cpu_hints(topology, available, CPUSet.parse("1"), 4) is not first


@settings(max_examples=60, deadline=None)
@given(
    questions=st.lists(
        st.tuples(
            st.sets(st.integers(0, 79), max_size=12),
            st.sets(st.integers(0, 79), max_size=2),
            st.integers(1, 12),
            st.booleans(),
        ),
        min_size=1,
        max_size=12,
    ),
)
def test_kept_answers_equal_the_kubelet_loop_over_a_sequence(
    questions: list[tuple[set[int], set[int], int, bool]],
) -> None:
    """Questions asked in turn (repeats, near-repeats, more than are kept) are each answered as
    the kubelet's loop answers them."""
    machine = "topoDualSocketMultiNumaPerSocketHT"
    topology = MACHINES[machine]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(cpu_hints, "RECENT_ANSWERS", 3)
        for available, reusable, request, align in questions * 2:
            avail = CPUSet(available) & topology.all_cpus
            reuse = CPUSet(reusable) & topology.all_cpus
            got = generate_cpu_hints(topology, avail, reuse, request, align_by_socket=align)
            assert got == _naive_hints(machine, avail, reuse, request, align)
