"""Memory Manager Static policy.

Ported upstream cases (kubernetes ``pkg/kubelet/cm/memorymanager/policy_static_test.go``):
``TestStaticPolicyNew`` 2, ``TestStaticPolicyStart`` 1 (default state), ``TestStaticPolicyAllocate``
7 (non-guaranteed, default hint, default hint failure, default preferred failure, extension
failure, extended preferred failure, multi-NUMA), ``TestStaticPolicyRemoveContainer`` 1 (cross
NUMA), ``TestStaticPolicyGetTopologyHints`` 7 = 18. Pod-level (KEP-5526) cases follow spec
§4.4/§4.6; ``calculate_hints`` is also checked against a literal transcription (hypothesis).
"""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nri_plrm.engine import memory_hints
from nri_plrm.engine.bitmask import bits, iterate_bitmasks, mask_of
from nri_plrm.engine.memory_manager import MemoryManager
from nri_plrm.engine.memory_state import (
    MemoryManagerConfig,
    MemoryManagerConfigError,
    MemoryStateError,
    MemoryTable,
    NodeState,
)
from nri_plrm.engine.spec import (
    EMPTY_POD_SHARED_POOL_ERROR,
    UNEXPECTED_ADMISSION_ERROR,
    AdmissionError,
    ContainerKind,
    ContainerSpec,
    MemoryBlock,
    PodSpec,
    TopologyHint,
)
from nri_plrm.topology.model import CPUInfo, Topology

MB = 1024 * 1024
GB = 1024 * MB
HP = "hugepages-1Gi"


def machine(nodes: int, memory: int = 3 * GB, pages: int = 1) -> Topology:
    return Topology.build(
        [CPUInfo(cpu=n, core=n, socket=0, numa=n, l3=n) for n in range(nodes)],
        memory={n: {"memory": memory, HP: pages * GB} for n in range(nodes)},
    )


def reserved(nodes: int, size: int = 512 * MB) -> MemoryManagerConfig:
    return MemoryManagerConfig(reserved={n: {"memory": size} for n in range(nodes)})


def node(
    mem: tuple[int, int, int],
    hp: tuple[int, int, int] = (GB, GB, 0),
    cells: tuple[int, ...] = (0,),
    assignments: int = 0,
    total: int = 2 * GB,
) -> NodeState:
    """mem/hp = (allocatable, free, reserved)."""
    return NodeState(
        {
            "memory": MemoryTable(total, 512 * MB, mem[0], mem[2], mem[1]),
            HP: MemoryTable(GB, 0, hp[0], hp[2], hp[1]),
        },
        list(cells),
        assignments,
    )


GUARANTEED = {"cpu": 1000, "memory": GB, HP: GB}


def pod(
    uid: str, name: str, requests: dict[str, int], limits: dict[str, int] | None = None
) -> PodSpec:
    return PodSpec(
        uid=uid, containers=(ContainerSpec(name, requests=requests, limits=limits or requests),)
    )


def allocate(mm: MemoryManager, p: PodSpec, hint: TopologyHint | None) -> None:
    mm.allocate(p, p.containers[0], hint)


# --- construction -------------------------------------------------------------------------------


def test_new_requires_system_reserved_memory() -> None:
    with pytest.raises(MemoryManagerConfigError, match="you should specify the system reserved"):
        MemoryManagerConfig()
    MemoryManagerConfig(reserved={0: {}, 1: {"memory": 512 * MB}})


def test_default_machine_state_subtracts_hugepages_from_memory() -> None:
    topo = Topology.build([CPUInfo(0, 0, 0, 0, 0)], memory={0: {"memory": 3 * GB, HP: GB}})
    mm = MemoryManager(topo, reserved(1))
    state = mm.machine_state[0]
    assert state.memory_map["memory"] == MemoryTable(3 * GB, 512 * MB, 1536 * MB, 0, 1536 * MB)
    assert state.memory_map[HP] == MemoryTable(GB, 0, GB, 0, GB)
    assert state.cells == [0] and state.number_of_assignments == 0


def test_reserved_memory_on_unknown_node_is_refused() -> None:
    with pytest.raises(MemoryManagerConfigError, match="numa node 5"):
        MemoryManager(machine(2), MemoryManagerConfig(reserved={5: {"memory": MB}}))


# --- TestStaticPolicyAllocate ---------------------------------------------------------------------


def test_allocate_does_nothing_for_non_guaranteed_pods() -> None:
    mm = MemoryManager(machine(1), reserved(1))
    p = pod("pod1", "c1", {"cpu": 1000, "memory": GB}, {"cpu": 1000, "memory": 2 * GB})
    allocate(mm, p, TopologyHint(None, False))
    assert mm.container_blocks("pod1", "c1") is None


def test_allocate_memory_from_the_default_hint() -> None:
    mm = MemoryManager(machine(1), reserved(1))
    allocate(mm, pod("pod1", "container1", GUARANTEED), TopologyHint(None, False))
    assert mm.container_blocks("pod1", "container1") == (
        MemoryBlock((0,), "memory", GB),
        MemoryBlock((0,), HP, GB),
    )
    state = mm.machine_state[0]
    assert state.memory_map["memory"] == MemoryTable(3 * GB, 512 * MB, 1536 * MB, GB, 512 * MB)
    assert state.memory_map[HP] == MemoryTable(GB, 0, GB, GB, 0)
    assert state.number_of_assignments == 2 and state.cells == [0]


def _expect_error(mm: MemoryManager, hint: TopologyHint, message: str) -> None:
    with pytest.raises(AdmissionError) as err:
        allocate(mm, pod("pod2", "container2", GUARANTEED), hint)
    assert err.value.reason == UNEXPECTED_ADMISSION_ERROR
    assert err.value.message == f"Allocate failed due to {message}, which is unexpected"
    assert mm.container_blocks("pod2", "container2") is None


def test_allocate_fails_when_default_hint_cannot_be_calculated() -> None:
    mm = MemoryManager(machine(1), reserved(1))
    mm.machine_state = {0: node((1536 * MB, 512 * MB, GB), (GB, 0, GB), assignments=2)}
    _expect_error(
        mm,
        TopologyHint(None, False),
        "[memorymanager] failed to get the default NUMA affinity, no NUMA nodes with enough "
        "memory is available",
    )


def test_allocate_fails_when_default_hint_is_not_preferred() -> None:
    mm = MemoryManager(machine(3), reserved(3))
    mm.machine_state = {
        0: node((GB, 512 * MB, 512 * MB), assignments=1, total=1536 * MB),
        1: node((512 * MB, 512 * MB, 0), cells=(1,), total=1536 * MB),
        2: node((512 * MB, 512 * MB, 0), cells=(2,), total=1536 * MB),
    }
    _expect_error(
        mm, TopologyHint(None, True), "[memorymanager] failed to find the default preferred hint"
    )


def test_allocate_fails_when_hint_cannot_be_extended() -> None:
    mm = MemoryManager(machine(3), reserved(3))
    mm.machine_state = {
        0: node((512 * MB, 512 * MB, 0), total=GB),
        1: node((1536 * MB, 512 * MB, GB), cells=(1, 2), assignments=1),
        2: node((1536 * MB, 512 * MB, GB), cells=(1, 2), assignments=1),
    }
    _expect_error(
        mm,
        TopologyHint(mask_of([0]), False),
        "[memorymanager] failed to find NUMA nodes to extend the current topology hint",
    )


def test_allocate_fails_when_extended_hint_is_not_preferred() -> None:
    mm = MemoryManager(machine(3), reserved(3))
    mm.machine_state = {
        0: node((GB, 512 * MB, 512 * MB), assignments=1, total=1536 * MB),
        1: node((512 * MB, 512 * MB, 0), cells=(1,), total=1536 * MB),
        2: node((512 * MB, 512 * MB, 0), cells=(2,), total=1536 * MB),
    }
    _expect_error(
        mm,
        TopologyHint(mask_of([1]), True),
        "[memorymanager] failed to find the extended preferred hint",
    )


def test_allocate_memory_from_multiple_numa_nodes() -> None:
    mm = MemoryManager(machine(4, memory=2 * GB), reserved(4))
    mm.machine_state = {n: node((512 * MB, 512 * MB, 0), cells=(n,), total=GB) for n in range(4)}
    allocate(mm, pod("pod1", "container1", GUARANTEED), TopologyHint(None, True))
    assert mm.container_blocks("pod1", "container1") == (
        MemoryBlock((0, 1), "memory", GB),
        MemoryBlock((0, 1), HP, GB),
    )
    for n in (0, 1):
        state = mm.machine_state[n]
        assert state.memory_map["memory"].free == 0
        assert state.memory_map["memory"].reserved == 512 * MB
        assert state.cells == [0, 1] and state.number_of_assignments == 2
    assert mm.machine_state[0].memory_map[HP].reserved == GB
    assert mm.machine_state[1].memory_map[HP].reserved == 0
    assert mm.machine_state[2].cells == [2] and mm.machine_state[2].number_of_assignments == 0


def test_allocate_is_idempotent_and_remove_restores_state() -> None:
    mm = MemoryManager(machine(2), reserved(2))
    before = mm.snapshot()["machineState"]
    p = pod("pod1", "c", GUARANTEED)
    allocate(mm, p, TopologyHint(mask_of([1]), True))
    snapshot = mm.snapshot()
    allocate(mm, p, TopologyHint(mask_of([0]), True))
    assert mm.snapshot() == snapshot
    assert mm.numa_nodes_for("pod1", "c") == (1,)
    mm.remove_container("pod1", "c")
    assert mm.snapshot()["machineState"] == before
    assert mm.container_blocks("pod1", "c") is None


def test_violating_single_and_cross_numa_rule() -> None:
    mm = MemoryManager(machine(2), reserved(2))
    allocate(mm, pod("a", "c", {"cpu": 1000, "memory": GB}), TopologyHint(mask_of([0]), True))
    with pytest.raises(AdmissionError, match="preferred hint violates NUMA node allocation"):
        allocate(
            mm, pod("b", "c", {"cpu": 1000, "memory": GB}), TopologyHint(mask_of([0, 1]), False)
        )


# --- hints ------------------------------------------------------------------------------------


def test_hints_prefer_narrowest_fitting_width_and_regenerate() -> None:
    mm = MemoryManager(machine(2), reserved(2))
    p = pod("p", "c", {"cpu": 1000, "memory": 2 * GB})
    hints = mm.get_topology_hints(p, p.containers[0])
    assert hints == {"memory": [TopologyHint(mask_of([0, 1]), True)]}
    small = pod("q", "c", {"cpu": 1000, "memory": GB})
    assert mm.get_topology_hints(small, small.containers[0]) == {
        "memory": [
            TopologyHint(1, True),
            TopologyHint(2, True),
            TopologyHint(3, False),
        ]
    }
    allocate(mm, small, TopologyHint(2, True))
    assert mm.get_topology_hints(small, small.containers[0]) == {"memory": [TopologyHint(2, True)]}


def test_hints_empty_map_when_nothing_fits_and_none_for_shared() -> None:
    mm = MemoryManager(machine(2), reserved(2))
    big = pod("p", "c", {"cpu": 1000, "memory": 100 * GB})
    assert mm.get_topology_hints(big, big.containers[0]) == {}
    plrm = PodSpec(
        uid="x",
        containers=(ContainerSpec("shared"),),
        requests={"cpu": 2000, "memory": GB},
        limits={"cpu": 2000, "memory": GB},
    )
    assert mm.get_topology_hints(plrm, plrm.containers[0]) is None


# --- pod-level resources (KEP-5526) ---------------------------------------------------------------


def plrm_pod(
    budget_mem: int,
    init: tuple[tuple[str, ContainerKind, int], ...] = (),
    apps: tuple[tuple[str, int], ...] = (),
) -> PodSpec:
    def spec(name: str, kind: ContainerKind, mem: int) -> ContainerSpec:
        if not mem:
            return ContainerSpec(name, kind)
        req = {"cpu": 1000, "memory": mem}
        return ContainerSpec(name, kind, requests=req, limits=req)

    return PodSpec(
        uid="plrm",
        init_containers=tuple(spec(n, k, m) for n, k, m in init),
        containers=tuple(spec(n, ContainerKind.APP, m) for n, m in apps),
        requests={"cpu": 4000, "memory": budget_mem},
        limits={"cpu": 4000, "memory": budget_mem},
    )


SIDE = ContainerKind.SIDECAR
INIT = ContainerKind.INIT


@pytest.mark.parametrize(
    ("p", "message"),
    [
        (plrm_pod(4 * GB, apps=(("main", 2 * GB), ("side", 0))), None),
        (
            plrm_pod(4 * GB, init=(("m", SIDE, GB), ("l", SIDE, 0)), apps=(("main", 3 * GB),)),
            "pod rejected, sum of exclusive container memory requests equals pod budget, leaving "
            "no memory for shared containers",
        ),
        (
            plrm_pod(2 * GB, init=(("s", SIDE, 2 * GB), ("i", INIT, 0))),
            "pod rejected, pod has shared init containers but no memory available for them",
        ),
        (
            plrm_pod(2 * GB, init=(("s", SIDE, GB), ("i", INIT, 2 * GB)), apps=(("a", GB),)),
            "pod rejected, largest exclusive init container requests 2147483648 of memory, but "
            "only 1073741824 available",
        ),
        (plrm_pod(2 * GB, init=(("i", INIT, 0), ("s", SIDE, 2 * GB))), None),
        (plrm_pod(4 * GB, apps=(("a", 2 * GB), ("b", 2 * GB))), None),
    ],
)
def test_validate_pod_scope_resources(p: PodSpec, message: str | None) -> None:
    mm = MemoryManager(machine(2, memory=16 * GB), reserved(2))
    assert mm.validate_pod_scope_resources(p) == message
    hints = mm.get_pod_topology_hints(p)
    if message is not None:
        assert hints == {"memory": []}
        with pytest.raises(AdmissionError) as err:
            mm.allocate_pod(p, TopologyHint(mask_of([0]), True))
        assert err.value.reason == EMPTY_POD_SHARED_POOL_ERROR and err.value.message == message
        assert mm.pods() == ()


def test_allocate_pod_charges_budget_once_and_splits_views() -> None:
    mm = MemoryManager(machine(2, memory=16 * GB), reserved(2))
    p = plrm_pod(
        4 * GB,
        init=(("i", INIT, 0), ("m", SIDE, GB), ("l", SIDE, 0)),
        apps=(("main", 2 * GB), ("x", 0)),
    )
    hints = mm.get_pod_topology_hints(p)
    assert hints is not None and TopologyHint(1, True) in (hints["memory"] or [])
    mm.allocate_pod(p, TopologyHint(1, True))
    assert mm.pod_blocks("plrm") == (MemoryBlock((0,), "memory", 4 * GB),)
    blocks = {c.name: mm.container_blocks("plrm", c.name) for c in p.all_containers()}
    assert blocks == {
        "i": (MemoryBlock((0,), "memory", 4 * GB),),
        "m": (MemoryBlock((0,), "memory", GB),),
        "l": (MemoryBlock((0,), "memory", GB),),
        "main": (MemoryBlock((0,), "memory", 2 * GB),),
        "x": (MemoryBlock((0,), "memory", GB),),
    }
    table = mm.machine_state[0].memory_map["memory"]
    assert table.reserved == 4 * GB and mm.machine_state[0].number_of_assignments == 1
    mm.allocate_pod(p, TopologyHint(2, True))
    assert mm.pod_blocks("plrm") == (MemoryBlock((0,), "memory", 4 * GB),)
    for c in p.all_containers()[:-1]:
        mm.remove_container("plrm", c.name)
        assert mm.machine_state[0].memory_map["memory"].reserved == 4 * GB
    mm.remove_container("plrm", "x")
    assert mm.machine_state[0].memory_map["memory"].reserved == 0
    assert mm.pods() == ()


def test_incremental_pod_pool() -> None:
    mm = MemoryManager(machine(2, memory=16 * GB), reserved(2))
    p = plrm_pod(4 * GB)
    assert mm.allocate_pod_budget(p, TopologyHint(2, True)) == (1,)
    assert mm.allocate_pod_budget(p, TopologyHint(1, True)) == (1,)
    assert mm.share_pod_pool("plrm", "side") == [MemoryBlock((1,), "memory", 4 * GB)]
    assert mm.take_from_pod("plrm", "main", {"memory": GB}) == [MemoryBlock((1,), "memory", GB)]
    mm.refresh_shared("plrm")
    assert mm.container_blocks("plrm", "side") == (MemoryBlock((1,), "memory", 3 * GB),)
    assert mm.pod_pool("plrm") == {"memory": 3 * GB}
    mm.remove_pod("plrm")
    assert mm.machine_state[1].memory_map["memory"].reserved == 0


# --- state round trip -----------------------------------------------------------------------------

ops_st = st.lists(
    st.tuples(
        st.integers(0, 5), st.integers(1, 6), st.sampled_from([None, 1, 2, 3]), st.booleans()
    ),
    max_size=12,
)


@settings(max_examples=60, deadline=None)
@given(ops=ops_st)
def test_state_round_trip_and_release(ops: list[tuple[int, int, int | None, bool]]) -> None:
    topo = machine(2, memory=8 * GB, pages=2)
    cfg = reserved(2)
    mm = MemoryManager(topo, cfg)
    empty = mm.snapshot()
    for pod_no, gigs, mask, hugepages in ops:
        req: dict[str, Any] = {"cpu": 1000, "memory": gigs * GB}
        if hugepages:
            req[HP] = GB
        p = pod(f"p{pod_no}", "c", req)
        try:
            allocate(mm, p, TopologyHint(mask, mask is not None and mask != 3))
        except AdmissionError:
            assert mm.container_blocks(p.uid, "c") is None
        restored = MemoryManager.restore(topo, cfg, mm.snapshot())
        assert restored.snapshot() == mm.snapshot()
    for uid in mm.pods():
        mm.remove_pod(uid)
    assert mm.snapshot() == empty


def test_from_dict_rejects_mismatching_machine_state() -> None:
    topo = machine(1)
    cfg = reserved(1)
    mm = MemoryManager(topo, cfg)
    allocate(mm, pod("p", "c", GUARANTEED), None)
    data = mm.snapshot()
    data["machineState"]["0"]["memoryMap"]["memory"]["free"] += 1
    with pytest.raises(MemoryStateError, match="expected machine state is different"):
        MemoryManager.restore(topo, cfg, data)
    data = mm.snapshot()
    data["policyName"] = "None"
    with pytest.raises(MemoryStateError, match='differs from state checkpoint policy "None"'):
        MemoryManager.restore(topo, cfg, data)


def test_allocatable_lists_every_node_and_type() -> None:
    mm = MemoryManager(machine(2), reserved(2))
    assert mm.allocatable() == [
        MemoryBlock((0,), "memory", 1536 * MB),
        MemoryBlock((0,), HP, GB),
        MemoryBlock((1,), "memory", 1536 * MB),
        MemoryBlock((1,), HP, GB),
    ]


# --- calculate_hints equals the kubelet's literal walk ---------------------------------------


def literal_hints(
    mm: MemoryManager, requests: dict[str, int], reusable: dict[int, dict[str, int]]
) -> dict[str, list[TopologyHint]]:
    """``calculateHints`` transcribed step by step over every mask."""
    ms = mm.machine_state
    ids = sorted(ms)
    min_affinity = len(ids)
    found: list[int] = []
    for mask in iterate_bitmasks(ids):
        nodes = bits(mask)
        table = {n: ms[n].memory_map for n in nodes}
        if any(
            sum(table[n][t].allocatable if t in table[n] else 0 for n in nodes) < s
            for t, s in requests.items()
        ):
            continue
        min_affinity = min(min_affinity, len(nodes))
        if len(nodes) == 1 and len(ms[nodes[0]].cells) > 1:
            continue
        if len(nodes) > 1 and any(
            ms[n].number_of_assignments > 0
            and (len(ms[n].cells) == 1 or sorted(ms[n].cells) != list(nodes))
            for n in nodes
        ):
            continue
        if any(
            sum(table[n][t].free if t in table[n] else 0 for n in nodes)
            + reusable.get(mask, {}).get(t, 0)
            < s
            for t, s in requests.items()
        ):
            continue
        found.append(mask)
    if not found:
        return {}
    return {t: [TopologyHint(m, m.bit_count() == min_affinity) for m in found] for t in requests}


@settings(max_examples=150, deadline=None)
@given(
    placements=st.lists(
        st.tuples(st.integers(1, 12), st.integers(1, 15), st.booleans()), max_size=8
    ),
    request=st.integers(1, 20),
    hugepages=st.booleans(),
)
def test_calculate_hints_equals_literal_walk(
    placements: list[tuple[int, int, bool]], request: int, hugepages: bool
) -> None:
    mm = MemoryManager(machine(4, memory=6 * GB, pages=2), reserved(4))
    for i, (gigs, mask, hp) in enumerate(placements):
        req: dict[str, int] = {"cpu": 1000, "memory": gigs * GB}
        if hp:
            req[HP] = GB
        with contextlib.suppress(AdmissionError):
            allocate(mm, pod(f"p{i}", "c", req), TopologyHint(mask, False))
    requests = {"memory": request * GB // 2}
    if hugepages:
        requests[HP] = GB
    probe = pod("probe", "c", {"cpu": 1000, **requests})
    assert mm.calculate_hints(probe, requests) == literal_hints(mm, requests, {})


# --- TestStaticPolicyRemoveContainer / TestStaticPolicyGetTopologyHints ---------------------------

HP2M = "hugepages-2Mi"


def _with_entries(entries: dict[str, list[dict[str, Any]]], pages_2m: int = 0) -> MemoryManager:
    """A manager on 2 nodes (3Gi, 1Gi of 1Gi pages, optionally 2Mi pages) holding ``entries``
    for pod1, restored through ``from_dict`` so the machine state follows the blocks."""
    memory = {n: {"memory": 3 * GB, HP: GB, HP2M: pages_2m * 2 * MB} for n in range(2)}
    topo = Topology.build([CPUInfo(n, n, 0, n, n) for n in range(2)], memory=memory)
    cfg = reserved(2)
    return MemoryManager.restore(topo, cfg, {"entries": {"pod1": entries}})


def test_remove_cross_numa_container_restores_nodes() -> None:
    mm = MemoryManager(machine(2, memory=2 * GB), reserved(2))
    mm.machine_state = {n: node((512 * MB, 512 * MB, 0), cells=(n,), total=GB) for n in range(2)}
    p = pod("pod1", "container1", GUARANTEED)
    allocate(mm, p, TopologyHint(mask_of([0, 1]), False))
    assert mm.machine_state[0].cells == [0, 1] and mm.machine_state[1].number_of_assignments == 2
    mm.remove_container("pod1", "container1")
    for n in range(2):
        state = mm.machine_state[n]
        assert state.cells == [n] and state.number_of_assignments == 0
        assert state.memory_map["memory"].free == 512 * MB
        assert state.memory_map[HP].free == GB


def test_hints_not_provided_for_non_guaranteed_pods() -> None:
    mm = MemoryManager(machine(1), reserved(1))
    burstable = pod(
        "pod1", "container1", {"cpu": 1000, "memory": GB}, {"cpu": 1000, "memory": 2 * GB}
    )
    assert mm.get_topology_hints(burstable, burstable.containers[0]) is None


def test_hints_regenerated_from_existing_assignment() -> None:
    mm = _with_entries(
        {
            "container1": [
                {"numaAffinity": [0], "type": "memory", "size": GB},
                {"numaAffinity": [0], "type": HP, "size": GB},
            ]
        }
    )
    p = pod("pod1", "container1", GUARANTEED)
    assert mm.get_topology_hints(p, p.containers[0]) == {
        "memory": [TopologyHint(1, True)],
        HP: [TopologyHint(1, True)],
    }


@pytest.mark.parametrize(
    "blocks",
    [
        [{"numaAffinity": [0], "type": "memory", "size": GB}],
        [
            {"numaAffinity": [0], "type": "memory", "size": GB},
            {"numaAffinity": [0], "type": HP2M, "size": GB},
        ],
        [
            {"numaAffinity": [0], "type": "memory", "size": 512 * MB},
            {"numaAffinity": [0], "type": HP, "size": GB},
        ],
    ],
    ids=["different number of types", "different types", "different size"],
)
def test_hints_none_when_existing_assignment_differs(blocks: list[dict[str, Any]]) -> None:
    mm = _with_entries({"container1": blocks}, pages_2m=512)
    p = pod("pod1", "container1", GUARANTEED)
    assert mm.get_topology_hints(p, p.containers[0]) is None


def test_hints_calculated_for_new_container_skip_grouped_nodes() -> None:
    mm = MemoryManager(machine(4, memory=2 * GB), reserved(4))
    mm.machine_state = {
        0: node((1536 * MB, 0, 1536 * MB), (GB, 0, GB), cells=(0, 1), assignments=2),
        1: node((1536 * MB, GB, 512 * MB), (GB, 0, GB), cells=(0, 1), assignments=2),
        2: node((1536 * MB, 1536 * MB, 0), cells=(2,)),
        3: node((1536 * MB, 1536 * MB, 0), cells=(3,)),
    }
    p = pod("pod2", "container2", GUARANTEED)
    expected = [TopologyHint(4, True), TopologyHint(8, True), TopologyHint(12, False)]
    assert mm.get_topology_hints(p, p.containers[0]) == {"memory": expected, HP: expected}


def test_no_preferred_multi_numa_hint_when_one_node_could_hold_it() -> None:
    mm = MemoryManager(machine(2, memory=2 * GB), reserved(2))
    mm.machine_state = {
        0: NodeState(
            {
                "memory": MemoryTable(2 * GB, 512 * MB, 1536 * MB, 1536 * MB, 0),
                HP2M: MemoryTable(20 * MB, 0, 20 * MB, 20 * MB, 0),
            },
            [0, 1],
            2,
        ),
        1: NodeState(
            {
                "memory": MemoryTable(2 * GB, 512 * MB, 1536 * MB, 512 * MB, GB),
                HP2M: MemoryTable(20 * MB, 0, 20 * MB, 4 * MB, 16 * MB),
            },
            [0, 1],
            2,
        ),
    }
    req = {"cpu": 1000, "memory": GB, HP2M: 16 * MB}
    p = pod("pod2", "container2", req)
    expected = [TopologyHint(3, False)]
    assert mm.get_topology_hints(p, p.containers[0]) == {"memory": expected, HP2M: expected}


@settings(max_examples=80, deadline=None)
@given(
    steps=st.lists(
        st.tuples(st.booleans(), st.integers(1, 8), st.integers(1, 15), st.integers(1, 12)),
        min_size=1,
        max_size=14,
    ),
    hugepages=st.booleans(),
)
def test_kept_hints_follow_every_change_of_the_machine_state(
    steps: list[tuple[bool, int, int, int]], hugepages: bool
) -> None:
    """Containers placed and removed in turn, the same requests asked after each step: every
    answer (kept or computed) equals the literal walk over the state of that moment."""
    mm = MemoryManager(machine(4, memory=6 * GB, pages=2), reserved(4))
    live: list[str] = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(memory_hints, "_RECENT_ANSWERS", 4)
        for i, (place, gigs, mask, request) in enumerate(steps):
            if place or not live:
                req: dict[str, int] = {"cpu": 1000, "memory": gigs * GB}
                with contextlib.suppress(AdmissionError):
                    allocate(mm, pod(f"p{i}", "c", req), TopologyHint(mask, False))
                    live.append(f"p{i}")
            else:
                mm.remove_container(live.pop(0), "c")
            for size in (request, 3):
                requests = {"memory": size * GB // 2}
                if hugepages:
                    requests[HP] = GB
                probe = pod("probe", "c", {"cpu": 1000, **requests})
                assert mm.calculate_hints(probe, requests) == literal_hints(mm, requests, {})
