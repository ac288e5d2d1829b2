"""More Memory Manager Static-policy vectors, ported from the kubelet's unit tests as data.

Upstream file: kubernetes ``pkg/kubelet/cm/memorymanager/policy_static_test.go``. Cases here
(named after the upstream descriptions; the ones already in ``test_engine_memory_manager.py``
are not repeated):

- ``TestStaticPolicyStart``: 13 (every state-validation failure with its exact message, the
  cross-NUMA state that must validate; three of them on machines whose hugepages leave no
  memory, which we refuse earlier, see ``HUGEPAGES_OVER_MEMORY``);
- ``TestStaticPolicyAllocate``: 1 (container already in the state);
- ``TestStaticPolicyAllocateWithInitContainers``: 4 (init-container memory reuse);
- ``TestStaticPolicyAllocateWithRestartableInitContainers``: 2 (sidecars never donate);
- ``TestStaticPolicyRemoveContainer``: 2 (unknown container, single-NUMA release);
- ``Test_getPodRequestedResources``: 5 (init, sidecar and app aggregation).

Upstream sets a machine state directly (often one its own machine info would not produce, e.g.
hugepages not subtracted from ``memory``); here the same numbers are assigned to
``MemoryManager.machine_state``. The kubelet keeps assignments in Go maps: blocks are compared as
multisets, as upstream's ``areMemoryBlocksEqual`` does, and validation sums are order-free.

Also here: the restart regression the group-sum comparison fixed (a cross-NUMA release gives
memory back in node order, so the saved per-node split differs from charging the remaining
blocks afresh; the kubelet compares free/reserved summed over each node's group).
"""

from __future__ import annotations

import contextlib
from collections import Counter
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nri_plrm.engine.memory_manager import MemoryManager
from nri_plrm.engine.memory_state import (
    MemoryManagerConfig,
    MemoryManagerConfigError,
    MemoryStateError,
    MemoryTable,
    NodeState,
)
from nri_plrm.engine.spec import (
    ContainerKind,
    ContainerSpec,
    MemoryBlock,
    PodSpec,
    TopologyHint,
)
from nri_plrm.topology.model import CPUInfo, Topology

MB = 1024 * 1024
GB = 1024 * MB
MEM = "memory"
HP = "hugepages-1Gi"
HP2M = "hugepages-2Mi"
NO_HINT = TopologyHint(None, False)


def table(allocatable: int, free: int, reserved: int, system: int, total: int) -> MemoryTable:
    """A memory table in upstream's field order (Allocatable, Free, Reserved, SystemReserved,
    TotalMemSize)."""
    return MemoryTable(total, system, allocatable, reserved, free)


def numa(tables: dict[str, MemoryTable], cells: list[int], assignments: int = 0) -> NodeState:
    return NodeState(dict(tables), list(cells), assignments)


def machine(nodes: dict[int, tuple[int, int]]) -> Topology:
    """cadvisor machine info: node id -> (memory bytes, number of 1Gi pages)."""
    memory: dict[int, dict[str, int]] = {}
    for n, (mem, pages) in nodes.items():
        memory[n] = {MEM: mem, HP: pages * GB} if pages else {MEM: mem}
    return Topology.build(
        [CPUInfo(cpu=n, core=n, socket=0, numa=n, l3=n) for n in nodes], memory=memory
    )


def reserved(*nodes: int) -> MemoryManagerConfig:
    return MemoryManagerConfig(reserved={n: {MEM: 512 * MB} for n in nodes})


def block(nodes: list[int], kind: str, size: int) -> dict[str, Any]:
    return {"numaAffinity": nodes, "type": kind, "size": size}


def saved(state: dict[int, NodeState]) -> dict[str, Any]:
    return {str(n): s.to_dict() for n, s in state.items()}


def guaranteed(name: str, size: int, kind: ContainerKind = ContainerKind.APP) -> ContainerSpec:
    req = {"cpu": 1000, MEM: size, HP: size}
    return ContainerSpec(name, kind, req, dict(req))


def exclusive(name: str, size: int) -> ContainerSpec:
    req = {"cpu": 1000, MEM: size}
    return ContainerSpec(name, requests=req, limits=dict(req))


def multiset(blocks: tuple[MemoryBlock, ...] | None) -> Counter[MemoryBlock]:
    assert blocks is not None
    return Counter(blocks)


def one_node(mem: MemoryTable, hp: MemoryTable | None = None, **kw: Any) -> dict[int, NodeState]:
    tables = {MEM: mem} if hp is None else {MEM: mem, HP: hp}
    return {0: numa(tables, kw.get("cells", [0]), kw.get("assignments", 0))}


# --- TestStaticPolicyStart --------------------------------------------------------------------

STANDARD = one_node(table(1536 * MB, 1536 * MB, 0, 512 * MB, 2 * GB), table(GB, GB, 0, 0, GB))
MACHINE_2G = {0: (2 * GB, 1)}

START_FAILURES: list[tuple[str, dict[int, tuple[int, int]], dict[str, Any], str]] = [
    (
        "should fail, if machine state is empty, but it has memory assignments",
        {0: (3 * GB, 1)},
        {
            "machineState": {},
            "entries": {"pod": {"container1": [block([0], MEM, 512 * MB)]}},
        },
        "[memorymanager] machine state can not be empty when it has memory assignments",
    ),
    (
        "should fail when machine state does not have all NUMA nodes",
        {0: (2 * GB, 1), 1: (2 * GB, 1)},
        {"machineState": saved(STANDARD)},
        "[memorymanager] the expected machine state is different from the real one",
    ),
    (
        "should fail when machine state does not have memory resource",
        MACHINE_2G,
        {"machineState": saved({0: numa({HP: table(GB, GB, 0, 0, GB)}, [0])})},
        "[memorymanager] the expected machine state is different from the real one",
    ),
    (
        "should fail when machine state has wrong size of total memory",
        MACHINE_2G,
        {"machineState": saved(one_node(table(1536 * MB, 1536 * MB, 0, 512 * MB, 1536 * MB)))},
        "[memorymanager] the expected machine state is different from the real one",
    ),
    (
        "should fail when machine state has wrong size of system reserved memory",
        MACHINE_2G,
        {"machineState": saved(one_node(table(1536 * MB, 1536 * MB, 0, 1024, 2 * GB)))},
        "[memorymanager] the expected machine state is different from the real one",
    ),
    (
        "should fail when machine state reserved memory is different from the memory of all "
        "containers memory assignments",
        MACHINE_2G,
        {
            "machineState": saved(
                one_node(table(1536 * MB, 1536 * MB, 0, 512 * MB, 2 * GB), assignments=1)
            ),
            "entries": {"pod": {"container1": [block([0], MEM, 512 * MB)]}},
        },
        "[memorymanager] the expected machine state is different from the real one",
    ),
    (
        "should fail when machine state does not have NUMA node that used under the memory "
        "assignment",
        MACHINE_2G,
        {
            "machineState": saved(STANDARD),
            "entries": {"pod1": {"container1": [block([1], MEM, GB)]}},
        },
        "[memorymanager] (pod: pod1, container: container1) the memory assignment uses the NUMA "
        "that does not exist",
    ),
    (
        "should fail when machine state does not have resource that used under the memory "
        "assignment",
        MACHINE_2G,
        {
            "machineState": saved({0: numa(dict(STANDARD[0].memory_map), [0], 2)}),
            "entries": {
                "pod1": {"container1": [block([0], MEM, GB), block([0], HP2M, GB)]},
            },
        },
        "[memorymanager] (pod: pod1, container: container1) the memory assignment uses memory "
        "resource that does not exist",
    ),
    (
        "should fail when machine state number of assignments is different from the expected one",
        MACHINE_2G,
        {
            "machineState": saved({0: numa(dict(STANDARD[0].memory_map), [0], 1)}),
            "entries": {"pod1": {"container1": [block([0], MEM, GB), block([0], HP, GB)]}},
        },
        "[memorymanager] the expected machine state is different from the real one",
    ),
]


HUGEPAGES_OVER_MEMORY = [
    (
        "should fail when machine state has wrong size of hugepages",
        {0: (2 * GB, 2)},
        {"machineState": saved(STANDARD)},
        "[memorymanager] the expected machine state is different from the real one",
    ),
    (
        "should fail when machine state has wrong size of system reserved hugepages",
        {0: (2 * GB, 2)},
        {
            "machineState": saved(
                one_node(
                    table(1536 * MB, 1536 * MB, 0, 512 * MB, 2 * GB),
                    table(GB, GB, 0, GB, 2 * GB),
                )
            )
        },
        "[memorymanager] the expected machine state is different from the real one",
    ),
    (
        "should fail when the hugepages reserved machine state is different from the hugepages "
        "of all containers memory assignments",
        {0: (2 * GB, 4)},
        {
            "machineState": saved(
                one_node(
                    table(1536 * MB, 1536 * MB, 0, 512 * MB, 2 * GB),
                    table(4 * GB, GB, 3 * GB, 0, 4 * GB),
                    assignments=2,
                )
            ),
            "entries": {
                "pod1": {"container1": [block([0], HP, GB)]},
                "pod2": {"container2": [block([0], HP, GB)]},
            },
        },
        "[memorymanager] the expected machine state is different from the real one",
    ),
]
"""Upstream cases whose machine has as many bytes of 1Gi pages as of memory or more. The
kubelet subtracts the pages from ``memory`` in uint64, wraps around, and then fails the state
comparison; we refuse the machine when the manager is built (the reservation exceeds the memory
left once hugepages are excluded). Both refuse to start."""


@pytest.mark.parametrize(
    ("description", "nodes", "data", "message"),
    HUGEPAGES_OVER_MEMORY,
    ids=[c[0] for c in HUGEPAGES_OVER_MEMORY],
)
def test_start_refuses_machines_whose_hugepages_leave_no_memory(
    description: str, nodes: dict[int, tuple[int, int]], data: dict[str, Any], message: str
) -> None:
    assert message == "[memorymanager] the expected machine state is different from the real one"
    with pytest.raises(MemoryManagerConfigError, match=r"numa node 0: reserved memory 536870912 "):
        MemoryManager.restore(machine(nodes), reserved(*sorted(nodes)), data)


@pytest.mark.parametrize(
    ("description", "nodes", "data", "message"), START_FAILURES, ids=[c[0] for c in START_FAILURES]
)
def test_start_state_validation_failures(
    description: str, nodes: dict[int, tuple[int, int]], data: dict[str, Any], message: str
) -> None:
    with pytest.raises(MemoryStateError) as err:
        MemoryManager.restore(machine(nodes), reserved(*sorted(nodes)), data)
    assert str(err.value) == message


def test_start_should_fill_the_state_with_default_values_when_the_state_is_empty() -> None:
    mm = MemoryManager.restore(machine({0: (3 * GB, 1)}), reserved(0), {"machineState": {}})
    assert mm.machine_state == one_node(
        table(1536 * MB, 1536 * MB, 0, 512 * MB, 3 * GB), table(GB, GB, 0, 0, GB)
    )
    assert mm.pods() == ()


def test_start_should_validate_cross_numa_reserved_memory_vs_container_assignments() -> None:
    group = {
        0: numa(
            {
                MEM: table(640 * MB, 0, 640 * MB, 512 * MB, 2176 * MB),
                HP: table(GB, 0, GB, 0, GB),
            },
            [0, 1],
            4,
        ),
        1: numa(
            {
                MEM: table(640 * MB, 256 * MB, 384 * MB, 512 * MB, 2176 * MB),
                HP: table(GB, 0, GB, 0, GB),
            },
            [0, 1],
            4,
        ),
    }
    entries = {
        "pod1": {"container1": [block([0, 1], MEM, 768 * MB), block([0, 1], HP, GB)]},
        "pod2": {"container2": [block([0, 1], MEM, 256 * MB), block([0, 1], HP, GB)]},
    }
    mm = MemoryManager.restore(
        machine({0: (2176 * MB, 1), 1: (2176 * MB, 1)}),
        reserved(0, 1),
        {"machineState": saved(group), "entries": entries},
    )
    assert mm.machine_state == group
    assert mm.container_blocks("pod1", "container1") == (
        MemoryBlock((0, 1), MEM, 768 * MB),
        MemoryBlock((0, 1), HP, GB),
    )
    assert mm.container_blocks("pod2", "container2") == (
        MemoryBlock((0, 1), MEM, 256 * MB),
        MemoryBlock((0, 1), HP, GB),
    )


def test_restart_after_cross_numa_release_keeps_the_saved_per_node_split() -> None:
    """Divergence fixed: the state was compared node by node, so a daemon restarted after a
    cross-NUMA container left refused its own state; the kubelet sums over the group."""
    topo = machine({0: (3 * GB, 1), 1: (3 * GB, 1)})
    cfg = reserved(0, 1)
    mm = MemoryManager(topo, cfg)
    first = PodSpec(uid="a", containers=(exclusive("c", GB),))
    second = PodSpec(uid="b", containers=(exclusive("c", GB),))
    for p in (first, second):
        mm.allocate(p, p.containers[0], TopologyHint(0b11, False))
    mm.remove_container("a", "c")
    split = [mm.machine_state[n].memory_map[MEM].reserved for n in (0, 1)]
    assert split == [512 * MB, 512 * MB]
    restored = MemoryManager.restore(topo, cfg, mm.snapshot())
    assert restored.machine_state == mm.machine_state
    restored.remove_container("b", "c")
    assert restored.machine_state == MemoryManager(topo, cfg).machine_state


def test_restart_refuses_group_sums_that_differ() -> None:
    topo = machine({0: (3 * GB, 1), 1: (3 * GB, 1)})
    cfg = reserved(0, 1)
    mm = MemoryManager(topo, cfg)
    p = PodSpec(uid="a", containers=(exclusive("c", GB),))
    mm.allocate(p, p.containers[0], TopologyHint(0b11, False))
    data = mm.snapshot()
    data["machineState"]["1"]["memoryMap"][MEM]["free"] -= MB
    data["machineState"]["1"]["memoryMap"][MEM]["reserved"] += MB
    with pytest.raises(MemoryStateError, match="expected machine state is different"):
        MemoryManager.restore(topo, cfg, data)


# --- TestStaticPolicyAllocate -----------------------------------------------------------------


def test_allocate_should_do_nothing_once_container_already_exists_under_the_state_file() -> None:
    mm = MemoryManager.restore(
        machine({0: (3 * GB, 1)}),
        reserved(0),
        {"entries": {"pod1": {"container1": [block([0], MEM, GB)]}}},
    )
    state = one_node(
        table(1536 * MB, 512 * MB, 1024 * MB, 512 * MB, 2 * GB), table(GB, GB, 0, 0, GB)
    )
    mm.machine_state = state
    before = saved(state)
    p = PodSpec(uid="pod1", containers=(guaranteed("container1", GB),))
    mm.allocate(p, p.containers[0], NO_HINT)
    assert saved(mm.machine_state) == before
    assert mm.container_blocks("pod1", "container1") == (MemoryBlock((0,), MEM, GB),)


# --- TestStaticPolicyAllocateWithInitContainers / ...WithRestartableInitContainers ----------

Sizes = list[tuple[str, int, ContainerKind]]

INIT = ContainerKind.INIT
SIDECAR = ContainerKind.SIDECAR
APP = ContainerKind.APP

REUSE_CASES: list[tuple[str, tuple[int, int, int], Sizes, dict[str, int], int]] = [
    # description, starting node (memory allocatable = free, memory total, 1Gi-page bytes),
    # containers (name, GiB of memory and of 1Gi pages, kind) in spec order, expected block
    # size per container (GiB), expected reserved GiB of each type afterwards
    (
        "should re-use init containers memory, init containers requests 1Gi and 2Gi, apps "
        "containers 3Gi and 4Gi",
        (7680 * MB, 8 * GB, 8 * GB),
        [
            ("initContainer1", 1, INIT),
            ("initContainer2", 2, INIT),
            ("container1", 3, APP),
            ("container2", 4, APP),
        ],
        {"initContainer1": 0, "initContainer2": 0, "container1": 3, "container2": 4},
        7,
    ),
    (
        "should re-use init containers memory, init containers requests 4Gi and 3Gi, apps "
        "containers 2Gi and 1Gi",
        (7680 * MB, 8 * GB, 8 * GB),
        [
            ("initContainer1", 4, INIT),
            ("initContainer2", 3, INIT),
            ("container1", 2, APP),
            ("container2", 1, APP),
        ],
        {"initContainer1": 0, "initContainer2": 1, "container1": 2, "container2": 1},
        4,
    ),
    (
        "should re-use init containers memory, init containers requests 7Gi and 4Gi, apps "
        "containers 4Gi and 3Gi",
        (7680 * MB, 8 * GB, 8 * GB),
        [
            ("initContainer1", 7, INIT),
            ("initContainer2", 4, INIT),
            ("container1", 4, APP),
            ("container2", 3, APP),
        ],
        {"initContainer1": 0, "initContainer2": 0, "container1": 4, "container2": 3},
        7,
    ),
    (
        "should re-use init containers memory, init containers requests 7Gi and 4Gi, apps "
        "containers 5Gi and 2Gi",
        (10240 * MB, 10 * GB, 10 * GB),
        [
            ("initContainer1", 7, INIT),
            ("initContainer2", 4, INIT),
            ("container1", 5, APP),
            ("container2", 2, APP),
        ],
        {"initContainer1": 0, "initContainer2": 0, "container1": 5, "container2": 2},
        7,
    ),
    (
        "should not re-use restartable init containers memory",
        (7 * GB, 7680 * MB, 7 * GB),
        [
            ("initContainer1", 1, INIT),
            ("restartableInitContainer2", 2, SIDECAR),
            ("initContainer3", 3, INIT),
            ("restartableInitContainer4", 4, SIDECAR),
            ("container1", 1, APP),
        ],
        {
            "initContainer1": 0,
            "restartableInitContainer2": 2,
            "initContainer3": 0,
            "restartableInitContainer4": 4,
            "container1": 1,
        },
        7,
    ),
]


@pytest.mark.parametrize(
    ("description", "start", "containers", "expected", "reserved_gigs"),
    REUSE_CASES,
    ids=[c[0] for c in REUSE_CASES],
)
def test_allocate_with_init_containers(
    description: str,
    start: tuple[int, int, int],
    containers: Sizes,
    expected: dict[str, int],
    reserved_gigs: int,
) -> None:
    mem_alloc, mem_total, pages = start
    taken = reserved_gigs * GB
    mm = MemoryManager(machine({0: (64 * GB, 1)}), reserved(0))
    mm.machine_state = one_node(
        table(mem_alloc, mem_alloc, 0, 512 * MB, mem_total), table(pages, pages, 0, 0, pages)
    )
    specs = [guaranteed(name, size * GB, kind) for name, size, kind in containers]
    p = PodSpec(
        uid="pod1",
        init_containers=tuple(c for c in specs if c.kind is not APP),
        containers=tuple(c for c in specs if c.kind is APP),
    )
    for c in p.all_containers():
        mm.allocate(p, c, NO_HINT)
    for name, size in expected.items():
        assert multiset(mm.container_blocks("pod1", name)) == Counter(
            [MemoryBlock((0,), MEM, size * GB), MemoryBlock((0,), HP, size * GB)]
        ), name
    assert mm.machine_state == one_node(
        table(mem_alloc, mem_alloc - taken, taken, 512 * MB, mem_total),
        table(pages, pages - taken, taken, 0, pages),
        assignments=2 * len(containers),
    )


def test_allocate_restartable_should_do_nothing_once_containers_already_exist() -> None:
    mm = MemoryManager.restore(
        machine({0: (3 * GB, 1)}),
        reserved(0),
        {
            "entries": {
                "pod1": {
                    "initContainer1": [block([0], MEM, GB)],
                    "container1": [block([0], MEM, GB)],
                }
            }
        },
    )
    state = one_node(
        table(2560 * MB, 512 * MB, 2048 * MB, 512 * MB, 3 * GB),
        table(2 * GB, 2 * GB, 0, 0, 2 * GB),
        cells=[],
    )
    mm.machine_state = state
    before = saved(state)
    p = PodSpec(
        uid="pod1",
        init_containers=(guaranteed("initContainer1", GB, SIDECAR),),
        containers=(guaranteed("container1", GB),),
    )
    for c in p.all_containers():
        mm.allocate(p, c, NO_HINT)
    assert saved(mm.machine_state) == before
    for name in ("initContainer1", "container1"):
        assert mm.container_blocks("pod1", name) == (MemoryBlock((0,), MEM, GB),)


# --- TestStaticPolicyRemoveContainer ----------------------------------------------------------


def test_remove_should_do_nothing_when_the_container_does_not_exist_under_the_state() -> None:
    mm = MemoryManager(machine({0: (3 * GB, 1)}), reserved(0))
    state = one_node(
        table(1536 * MB, 1536 * MB, 0, 512 * MB, 2 * GB), table(GB, GB, 0, 0, GB), cells=[]
    )
    mm.machine_state = state
    before = saved(state)
    mm.remove_container("pod1", "container1")
    assert saved(mm.machine_state) == before
    assert mm.pods() == ()


def test_remove_should_delete_the_container_assignment_and_update_the_machine_state() -> None:
    mm = MemoryManager.restore(
        machine({0: (3 * GB, 1)}),
        reserved(0),
        {"entries": {"pod1": {"container1": [block([0], MEM, GB), block([0], HP, GB)]}}},
    )
    mm.machine_state = one_node(
        table(1536 * MB, 512 * MB, 1024 * MB, 512 * MB, 2 * GB),
        table(GB, 0, GB, 0, GB),
        assignments=2,
    )
    mm.remove_container("pod1", "container1")
    assert mm.pods() == ()
    assert mm.machine_state == one_node(
        table(1536 * MB, 1536 * MB, 0, 512 * MB, 2 * GB), table(GB, GB, 0, 0, GB)
    )


# --- Test_getPodRequestedResources ------------------------------------------------------------

# description, init containers (name, memory GiB, 1Gi pages GiB, kind), app containers
# (memory GiB, pages GiB), expected (memory GiB, pages GiB)
POD_REQUESTS: list[
    tuple[str, list[tuple[str, int, int, ContainerKind]], list[tuple[int, int]], tuple[int, int]]
] = [
    (
        "maximum resources of init containers > total resources of containers",
        [("initContainer1", 1, 1, INIT), ("initContainer2", 4, 4, INIT)],
        [(1, 1), (2, 2)],
        (4, 4),
    ),
    (
        "maximum resources of init containers < total resources of containers",
        [("initContainer1", 1, 1, INIT), ("initContainer2", 3, 3, INIT)],
        [(2, 2), (3, 3)],
        (5, 5),
    ),
    (
        "calculate different resources independently",
        [("initContainer1", 1, 1, INIT), ("initContainer2", 3, 4, INIT)],
        [(2, 1), (3, 2)],
        (5, 4),
    ),
    (
        "maximum resources of init containers > total resources of long running containers, "
        "including restartable init containers",
        [("restartableInit1", 2, 2, SIDECAR), ("initContainer2", 4, 4, INIT)],
        [(1, 1), (2, 2)],
        (6, 6),
    ),
    (
        "maximum resources of init containers < total resources of long running containers, "
        "including restartable init containers",
        [("restartableInit1", 2, 2, SIDECAR), ("initContainer2", 4, 4, INIT)],
        [(2, 2), (3, 3)],
        (7, 7),
    ),
]


@pytest.mark.parametrize(
    ("description", "inits", "apps", "expected"), POD_REQUESTS, ids=[c[0] for c in POD_REQUESTS]
)
def test_get_pod_requested_resources(
    description: str,
    inits: list[tuple[str, int, int, ContainerKind]],
    apps: list[tuple[int, int]],
    expected: tuple[int, int],
) -> None:
    p = PodSpec(
        uid="",
        init_containers=tuple(
            ContainerSpec(name, kind, {MEM: mem * GB, HP: pages * GB})
            for name, mem, pages, kind in inits
        ),
        containers=tuple(
            ContainerSpec(f"container{i + 1}", APP, {MEM: mem * GB, HP: pages * GB})
            for i, (mem, pages) in enumerate(apps)
        ),
    )
    mm = MemoryManager(machine({0: (3 * GB, 1)}), reserved(0))
    assert mm.pod_requests(p) == {MEM: expected[0] * GB, HP: expected[1] * GB}


# --- the saved machine state: decoder fuzz and restart round trip -------------------------------

JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)


def _valid_saved() -> dict[str, Any]:
    return saved(
        MemoryManager(machine({0: (3 * GB, 1), 1: (3 * GB, 1)}), reserved(0, 1)).machine_state
    )


@settings(max_examples=300, deadline=None)
@given(
    garbage=JSON,
    path=st.lists(
        st.sampled_from(
            ["0", "1", "memoryMap", MEM, HP, "cells", "free", "total", "numberOfAssignments"]
        ),
        max_size=4,
    ),
)
def test_saved_machine_state_decoder_refuses_garbage_cleanly(garbage: Any, path: list[str]) -> None:
    """Any JSON in place of (a part of) the saved machine state either restores or raises
    ``MemoryStateError``; nothing else escapes."""
    data: Any = _valid_saved()
    if path:
        node = data
        for key in path[:-1]:
            if not isinstance(node, dict) or key not in node:
                break
            node = node[key]
        if isinstance(node, dict):
            node[path[-1]] = garbage
    else:
        data = garbage
    topo = machine({0: (3 * GB, 1), 1: (3 * GB, 1)})
    with contextlib.suppress(MemoryStateError):
        MemoryManager.restore(topo, reserved(0, 1), {"machineState": data})


@settings(max_examples=150, deadline=None)
@given(
    ops=st.lists(
        st.tuples(st.booleans(), st.integers(0, 5), st.integers(0, 3), st.integers(1, 6)),
        max_size=12,
    )
)
def test_state_restores_after_any_allocate_and_remove_sequence(
    ops: list[tuple[bool, int, int, int]],
) -> None:
    """After any mix of single- and cross-NUMA allocations (each on one of the hints the memory
    manager offers, as a topology manager with this provider alone would pick) and removals,
    the saved state restores to the same machine state (the restart refusal fixed with the
    group-sum comparison).

    Hints from other providers are left out on purpose: a merged single-node hint on a node
    that sits in a cross-NUMA group is allowed by ``Allocate`` but leaves that node's group
    different from what the remaining blocks give, and the kubelet's ``validateState`` (and so
    ours) then refuses the state."""
    topo = machine({0: (3 * GB, 1), 1: (3 * GB, 1)})
    cfg = reserved(0, 1)
    mm = MemoryManager(topo, cfg)
    for add, uid, pick, half_gigs in ops:
        if add:
            p = PodSpec(uid=f"p{uid}", containers=(exclusive("c", half_gigs * GB // 2),))
            hints = mm.get_topology_hints(p, p.containers[0])
            offered = hints.get(MEM) if hints else None
            if not offered:
                continue
            mm.allocate(p, p.containers[0], offered[pick % len(offered)])
        else:
            mm.remove_container(f"p{uid}", "c")
        restored = MemoryManager.restore(topo, cfg, mm.snapshot())
        assert restored.machine_state == mm.machine_state


def test_single_node_hint_inside_a_cross_numa_group_is_refused_on_restart_like_the_kubelet() -> (
    None
):
    """Kubelet-exact hazard, kept: ``Allocate`` accepts a single-node hint on a node of a
    cross-NUMA group (its violation check looks at multi-node hints only); once that container
    leaves, the node keeps the single-node group while the remaining cross-NUMA block says
    otherwise, and ``validateState`` refuses the state."""
    topo = machine({0: (3 * GB, 1), 1: (3 * GB, 1)})
    cfg = reserved(0, 1)
    mm = MemoryManager(topo, cfg)
    wide = PodSpec(uid="wide", containers=(exclusive("c", 512 * MB),))
    narrow = PodSpec(uid="narrow", containers=(exclusive("c", 512 * MB),))
    mm.allocate(wide, wide.containers[0], TopologyHint(0b11, False))
    mm.allocate(narrow, narrow.containers[0], TopologyHint(0b01, False))
    assert mm.machine_state[0].cells == [0] and mm.machine_state[1].cells == [0, 1]
    mm.remove_container("narrow", "c")
    with pytest.raises(MemoryStateError, match="expected machine state is different"):
        MemoryManager.restore(topo, cfg, mm.snapshot())
