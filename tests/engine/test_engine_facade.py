"""Engine facade: idempotence, rollback, change reporting, stop/reuse, snapshot/restore, and a
random-operation fuzz that checks the invariants after every step."""

from __future__ import annotations

import json

import pytest
from cpu_pods import container
from hypothesis import example, given, settings
from hypothesis import strategies as st
from seed_pods import GI, pod_scope_mixed, seed_config, seed_topology

from nri_plrm.base.cpuset import CPUSet
from nri_plrm.engine.cpu_options import CPUManagerConfig
from nri_plrm.engine.facade import Engine, EngineConfig, EngineStateError
from nri_plrm.engine.memory_state import MemoryManagerConfig
from nri_plrm.engine.spec import (
    UNEXPECTED_ADMISSION_ERROR,
    AdmissionError,
    AssignmentType,
    ContainerKind,
    ContainerSpec,
    MemoryBlock,
    PodSpec,
)
from nri_plrm.engine.topology_manager import TopologyManagerConfig
from nri_plrm.topology.machines import MACHINES
from nri_plrm.topology.synthetic import with_memory

ONE = {"cpu": 1000, "memory": GI}
TWO = {"cpu": 2000, "memory": 2 * GI}
THREE = {"cpu": 3000, "memory": 3 * GI}


def engine(policy: str = "restricted", scope: str = "container") -> Engine:
    return Engine(seed_topology(), seed_config(policy, scope))


def classic(uid: str, *containers: ContainerSpec) -> PodSpec:
    return PodSpec(uid=uid, name=uid, containers=containers)


def test_admit_pod_is_idempotent() -> None:
    e = engine("single-numa-node", "pod")
    e.admit_pod(pod_scope_mixed())
    first = e.assignments()
    snap = e.snapshot()
    assert e.admit_pod(pod_scope_mixed()) == {}
    assert e.assignments() == first
    assert e.snapshot() == snap


def test_rejected_pod_holds_nothing() -> None:
    e = engine("best-effort", "container")
    pod = classic(
        "p",
        ContainerSpec("small", requests=ONE, limits=ONE),
        ContainerSpec(
            "huge",
            requests={"cpu": 1000, "memory": 200 * GI},
            limits={"cpu": 1000, "memory": 200 * GI},
        ),
    )
    with pytest.raises(AdmissionError) as err:
        e.admit_pod(pod)
    assert err.value.reason == UNEXPECTED_ADMISSION_ERROR
    assert "[memorymanager]" in err.value.message
    assert e.node_shared_pool() == CPUSet.from_range(0, 63)
    assert e.assignments() == {} and e.verify() == []
    assert e.memory_manager.pods() == () and e.cpu_manager.entries() == {}


def test_node_shared_containers_follow_the_node_pool() -> None:
    e = engine()
    shared_pod = classic("a", ContainerSpec("web"))
    with pytest.raises(KeyError, match="not admitted"):
        e.add_container(shared_pod, ContainerSpec("web"))
    assert e.admit_sandbox(shared_pod) == {}
    got, changes = e.add_container(shared_pod, ContainerSpec("web"))
    assert got.assignment is AssignmentType.NODE_SHARED and got.cpus == CPUSet.from_range(0, 63)
    assert changes == {}
    half = {"cpu": 500, "memory": GI}  # Guaranteed, not integral: the node shared pool
    pinned = classic("b", ContainerSpec("db", requests=TWO, limits=TWO))
    e.admit_sandbox(pinned)
    e.add_container(pinned, ContainerSpec("side", requests=half, limits=half))
    got, changes = e.add_container(pinned, ContainerSpec("db", requests=TWO, limits=TWO))
    assert got.cpus == CPUSet.parse("1,33") and got.exclusive
    # every node-shared container is reported, the placing pod's own ones too
    assert changes == {
        ("a", "web"): e.assignment("a", "web"),
        ("b", "side"): e.assignment("b", "side"),
    }
    assert changes[("a", "web")].cpus == CPUSet.from_range(0, 63) - CPUSet.parse("1,33")
    grown = e.remove_container("b", "db")
    assert set(grown) == {("a", "web"), ("b", "side")}
    assert grown[("b", "side")].cpus == CPUSet.from_range(0, 63)
    assert e.remove_pod("b") == {}
    assert e.remove_pod("b") == {}


def test_budget_reserved_at_sandbox_reports_the_node_shared_containers() -> None:
    e = engine("restricted", "pod")
    shared_pod = classic("a", ContainerSpec("web"))
    e.admit_sandbox(shared_pod)
    e.add_container(shared_pod, ContainerSpec("web"))
    budget = PodSpec(uid="p", requests=TWO, limits=TWO)
    changes = e.admit_sandbox(budget)
    assert changes == {("a", "web"): e.assignment("a", "web")}
    assert changes[("a", "web")].cpus == CPUSet.from_range(0, 63) - e.pod_cpus("p")  # type: ignore[operator]
    whole = pod_scope_mixed("whole")
    changes = e.admit_pod(whole)
    assert set(changes) == {("a", "web")}
    assert e.admit_pod(whole) == {} and e.admit_sandbox(budget) == {}


def test_pod_pool_shrink_is_reported_to_shared_containers() -> None:
    e = engine("restricted", "pod")
    pod = pod_scope_mixed()
    budget = PodSpec(uid=pod.uid, requests=pod.requests, limits=pod.limits)
    e.admit_sandbox(budget)
    m, _ = e.add_container(budget, ContainerSpec("metrics-sidecar"))
    assert m.assignment is AssignmentType.POD_SHARED and m.cpus == CPUSet.parse("1-2,33-34")
    _, changes = e.add_container(budget, ContainerSpec("logging-sidecar"))
    assert changes == {}
    main = pod.containers[0]
    got, changes = e.add_container(
        budget, ContainerSpec(main.name, requests=main.requests, limits=main.limits)
    )
    assert got.cpus == CPUSet.parse("1,33") and got.memory[0].size == 2 * GI
    assert set(changes) == {(pod.uid, "metrics-sidecar"), (pod.uid, "logging-sidecar")}
    assert all(a.cpus == CPUSet.parse("2,34") for a in changes.values())
    assert e.add_container(
        budget, ContainerSpec(main.name, requests=main.requests, limits=main.limits)
    ) == (got, {})
    assert e.verify() == []
    # main-app exits: its slice goes back to the pool, twice is harmless
    grown = e.stop_container(pod.uid, "main-app")
    assert {a.cpus for a in grown.values()} == {CPUSet.parse("1-2,33-34")}
    assert e.stop_container(pod.uid, "main-app") == {}
    # and a restart takes the same CPUs again
    again, shrunk = e.add_container(
        budget, ContainerSpec(main.name, requests=main.requests, limits=main.limits)
    )
    assert again.cpus == CPUSet.parse("1,33")
    assert {a.cpus for a in shrunk.values()} == {CPUSet.parse("2,34")}
    assert e.verify() == []


def test_shared_container_refused_on_an_empty_pod_pool() -> None:
    e = engine("restricted", "pod")
    budget = PodSpec(uid="p", requests=TWO, limits=TWO)
    e.admit_sandbox(budget)
    e.add_container(budget, ContainerSpec("all", requests=TWO, limits=TWO))
    with pytest.raises(AdmissionError) as err:
        e.add_container(budget, ContainerSpec("late"))
    assert err.value.message.startswith("pod rejected, sum of exclusive container cpu requests")
    with pytest.raises(AdmissionError, match="requests 3 cpus, but only 0 available"):
        three = {"cpu": 3000, "memory": GI}
        e.add_container(budget, ContainerSpec("big", requests=three, limits=three))


def test_pod_scope_sandbox_rejection_matches_kubelet() -> None:
    e = engine("single-numa-node", "pod")
    huge = {"cpu": 20000, "memory": GI}
    with pytest.raises(AdmissionError) as err:
        e.admit_sandbox(PodSpec(uid="p", requests=huge, limits=huge))
    assert err.value.reason == "TopologyAffinityError"
    assert err.value.message.startswith("Pod Scope pod with pod-level resources failed admission")
    assert e.pods() == () and e.node_shared_pool() == CPUSet.from_range(0, 63)


def test_classic_pod_scope_aggregate_hint_and_init_reuse() -> None:
    """A classic pod: init container 2 CPUs, app 2 CPUs. The kubelet gives the app the init
    container's CPUs; NRI-only gets the same by marking the exited init's CPUs reusable."""
    init = ContainerSpec("init", ContainerKind.INIT, TWO, TWO)
    app = ContainerSpec("app", requests=TWO, limits=TWO)
    pod = PodSpec(uid="c", init_containers=(init,), containers=(app,))
    whole = engine("restricted", "pod")
    whole.admit_pod(pod)
    inc = engine("restricted", "pod")
    inc.admit_sandbox(PodSpec(uid="c"), aggregate=TWO)
    as_app = ContainerSpec("init", requests=TWO, limits=TWO)
    inc.add_container(PodSpec(uid="c"), as_app)
    inc.stop_container("c", "init")
    inc.stop_container("c", "init")
    inc.add_container(PodSpec(uid="c"), app)
    assert inc.assignment("c", "app") == whole.assignment("c", "app")
    assert inc.assignment("c", "init").cpus == whole.assignment("c", "init").cpus  # type: ignore[union-attr]
    assert inc.node_shared_pool() == whole.node_shared_pool()
    assert inc.verify() == [] and whole.verify() == []


# --- TestStaticPolicyAllocatePod shapes: whole pod vs NRI order -------------------------------


def _plrm(uid: str, budget: int, init: list[ContainerSpec], apps: list[ContainerSpec]) -> PodSpec:
    res = {"cpu": budget * 1000, "memory": budget * GI}
    return PodSpec(
        uid=uid, init_containers=tuple(init), containers=tuple(apps), requests=res, limits=res
    )


R = ContainerKind.SIDECAR
I = ContainerKind.INIT  # noqa: E741

ALLOCATE_POD_CASES = {
    "gu only": _plrm("p1", 2, [], [container("container1", "1", memory="1Gi")]),
    "ngu only": _plrm("p2", 1, [], [container("ngu")]),
    "gu gu ngu": _plrm(
        "p3",
        3,
        [],
        [
            container("gu1", "1", memory="1Gi"),
            container("gu2", "1", memory="1Gi"),
            container("ngu"),
        ],
    ),
    "init reuse": _plrm(
        "p4",
        2,
        [
            container("init1", "1", kind=I, memory="1Gi"),
            container("init2", "1", kind=I, memory="1Gi"),
        ],
        [container("gu1", "1", memory="1Gi"), container("gu2", "1", memory="1Gi")],
    ),
    "shared inits around an exclusive sidecar": _plrm(
        "p5",
        3,
        [
            container("ngu-init-1", kind=I),
            container("gu-r", "1", kind=R, memory="1Gi"),
            container("ngu-init-3", kind=I),
        ],
        [container("gu", "1", memory="1Gi"), container("ngu")],
    ),
    "shared sidecar": _plrm(
        "p6",
        3,
        [
            container("ngu-init-1", kind=I),
            container("ngu-r", kind=R),
            container("ngu-init-3", kind=I),
        ],
        [container("gu", "1", memory="1Gi"), container("ngu")],
    ),
}


@pytest.mark.parametrize("name", sorted(ALLOCATE_POD_CASES))
@pytest.mark.parametrize("policy", ["best-effort", "single-numa-node"])
def test_allocate_pod_shapes_whole_equals_incremental(name: str, policy: str) -> None:
    topo = with_memory(MACHINES["topoDualSocketHT"], {"memory": 16 * GI})
    config = EngineConfig(
        TopologyManagerConfig(policy, "pod"),
        CPUManagerConfig(reserved_cpus=CPUSet([0])),
        MemoryManagerConfig(reserved={0: {"memory": GI}}),
    )
    pod = ALLOCATE_POD_CASES[name]
    whole = Engine(topo, config)
    whole.admit_pod(pod)
    inc = Engine(topo, config)
    budget = PodSpec(uid=pod.uid, requests=pod.requests, limits=pod.limits)
    inc.admit_sandbox(budget)
    for c in pod.init_containers:
        inc.add_container(budget, ContainerSpec(c.name, requests=c.requests, limits=c.limits))
        if c.kind is ContainerKind.INIT:
            inc.stop_container(pod.uid, c.name)
    for c in pod.containers:
        inc.add_container(budget, ContainerSpec(c.name, requests=c.requests, limits=c.limits))
    assert inc.pod_cpus(pod.uid) == whole.pod_cpus(pod.uid)
    for c in pod.all_containers():
        got, want = inc.assignment(pod.uid, c.name), whole.assignment(pod.uid, c.name)
        assert got is not None and want is not None
        assert got.cpus == want.cpus, c.name
        if c.kind is not ContainerKind.INIT:
            assert got == want, c.name
    assert inc.node_shared_pool() == whole.node_shared_pool()
    assert inc.verify() == [] and whole.verify() == []


# --- stopped containers' memory: the kubelet's init-container reuse ----------------------------


def _gib(size: int) -> dict[str, int]:
    return {"cpu": 1000, "memory": size * GI}


def _add(e: Engine, pod: PodSpec, container: ContainerSpec) -> None:
    """NRI's order: the sandbox is admitted before its first container."""
    if pod.uid not in e.pods():
        e.admit_sandbox(pod)
    e.add_container(pod, container)


def _sized(name: str, size: int, kind: ContainerKind = ContainerKind.APP) -> ContainerSpec:
    return ContainerSpec(name, kind, _gib(size), _gib(size))


def _reserved_gib(e: Engine) -> int:
    return (
        sum(s.memory_map["memory"].reserved for s in e.memory_manager.machine_state.values()) // GI
    )


def _block_gib(e: Engine, uid: str, name: str) -> int:
    blocks = e.memory_manager.container_blocks(uid, name)
    assert blocks is not None
    return sum(b.size for b in blocks) // GI


def _restored(e: Engine, scope: str) -> Engine:
    data = json.loads(json.dumps(e.snapshot()))
    return Engine.restore(seed_topology(), seed_config("best-effort", scope), data)


@pytest.mark.parametrize("scope", ["container", "pod"])
def test_exited_containers_memory_is_reused_as_the_kubelet_reuses_init_memory(scope: str) -> None:
    """What an exited container held is reusable by its pod's next container, and the machine
    state stays the sum of the blocks (the kubelet's validateState) when another pod allocates
    in between, when the exited containers had run side by side, and across a restore. The
    end state equals the kubelet's for the pod with the exited containers as init containers."""
    # another pod allocates between the stop and the next container of the same pod
    e = Engine(seed_topology(), seed_config("best-effort", scope))
    p1 = PodSpec(uid="p1")
    _add(e, p1, _sized("c2", 1))
    e.stop_container("p1", "c2")
    _add(e, PodSpec(uid="p0"), _sized("c0", 1))
    _add(e, p1, _sized("c0", 1))
    assert (_block_gib(e, "p1", "c2"), _block_gib(e, "p1", "c0"), _reserved_gib(e)) == (0, 1, 2)
    assert e.verify() == [] and _restored(e, scope).verify() == []
    for uid in e.pods():
        e.remove_pod(uid)
    assert _reserved_gib(e) == 0

    # two containers exited after running side by side; the next one needs both
    inc = Engine(seed_topology(), seed_config("best-effort", scope))
    pod = PodSpec(uid="p")
    for name in ("a", "b"):
        _add(inc, pod, _sized(name, 1))
    for name in ("a", "b"):
        inc.stop_container("p", name)
    _add(inc, pod, _sized("c", 2))
    whole = Engine(seed_topology(), seed_config("best-effort", scope))
    whole.admit_pod(
        PodSpec(
            uid="p",
            init_containers=(
                _sized("a", 1, ContainerKind.INIT),
                _sized("b", 1, ContainerKind.INIT),
            ),
            containers=(_sized("c", 2),),
        )
    )
    for e in (inc, whole):
        assert [_block_gib(e, "p", n) for n in "abc"] == [0, 0, 2] and _reserved_gib(e) == 2
        assert e.verify() == []
    assert inc.memory_manager.machine_state == whole.memory_manager.machine_state

    # the plugin restarts between the stop and the next container
    e = Engine(seed_topology(), seed_config("best-effort", scope))
    _add(e, pod, _sized("a", 1))
    e.stop_container("p", "a")
    e = _restored(e, scope)
    _add(e, pod, _sized("c", 1))
    assert (_block_gib(e, "p", "a"), _block_gib(e, "p", "c"), _reserved_gib(e)) == (0, 1, 1)
    assert e.verify() == [] and _restored(e, scope).verify() == []
    e.remove_pod("p")
    assert _reserved_gib(e) == 0


# --- snapshot / restore ------------------------------------------------------------------------


def test_snapshot_restore_round_trip() -> None:
    e = engine("restricted", "pod")
    e.admit_pod(pod_scope_mixed("whole"))
    budget = PodSpec(uid="inc", requests=THREE, limits=THREE)
    e.admit_sandbox(budget)
    e.add_container(budget, ContainerSpec("main", requests=ONE, limits=ONE))
    e.add_container(budget, ContainerSpec("side"))
    e.admit_sandbox(classic("cl"))
    e.add_container(classic("cl"), ContainerSpec("web"))
    data = json.loads(json.dumps(e.snapshot()))
    assert data["format"] == 1
    back = Engine.restore(seed_topology(), seed_config("restricted", "pod"), data)
    assert back.snapshot() == e.snapshot()
    assert back.assignments() == e.assignments()
    assert back.verify() == []
    assert back.topology_manager.get_affinity(
        "whole", "main-app"
    ) == e.topology_manager.get_affinity("whole", "main-app")
    # the restored engine keeps working where the old one left off
    _, changes = back.add_container(budget, ContainerSpec("second", requests=ONE, limits=ONE))
    assert (budget.uid, "side") in changes
    with pytest.raises(EngineStateError, match="format 99"):
        Engine.restore(seed_topology(), seed_config("restricted", "pod"), {**data, "format": 99})


def test_allocatable_and_pod_queries() -> None:
    e = engine("restricted", "pod")
    e.admit_pod(pod_scope_mixed())
    alloc = e.allocatable()
    assert alloc.cpus == CPUSet.from_range(1, 63)
    assert [b.size for b in alloc.memory] == [15 * GI, 16 * GI, 16 * GI, 16 * GI]
    assert e.pod_cpus("pod-scope-mixed") == CPUSet.parse("1-2,33-34")
    assert [b.size for b in e.pod_memory("pod-scope-mixed")] == [4 * GI]
    assert e.pod_memory("nope") == () and e.assignment("nope", "x") is None
    kinds = sorted(a.assignment.value for a in e.assignments().values())
    assert kinds == ["pod_exclusive", "pod_shared", "pod_shared"]
    assert e.pod_spec("pod-scope-mixed") == pod_scope_mixed() and e.pod_spec("nope") is None


# --- fuzz: random NRI operations keep the invariants --------------------------------------------

op_st = st.tuples(
    st.sampled_from(["sandbox", "add", "stop", "remove", "remove_pod"]),
    st.integers(0, 3),  # pod
    st.integers(0, 2),  # container
    st.integers(0, 3),  # cpus (0 = shared)
)


@settings(max_examples=80, deadline=None)
@given(
    ops=st.lists(op_st, max_size=25),
    scope=st.sampled_from(["pod", "container"]),
    pod_level=st.lists(st.booleans(), min_size=4, max_size=4),
)
# a stopped container's memory reused by its pod after another pod allocated in between
@example(
    ops=[("add", 1, 2, 1), ("stop", 1, 2, 0), ("add", 0, 0, 1), ("add", 1, 0, 1)],
    scope="pod",
    pod_level=[False] * 4,
)
# a node-shared container that exited comes back with exclusive resources
@example(
    ops=[("add", 0, 1, 0), ("stop", 0, 1, 0), ("add", 0, 1, 1)],
    scope="container",
    pod_level=[True, False, False, False],
)
def test_random_operations_keep_invariants(
    ops: list[tuple[str, int, int, int]], scope: str, pod_level: list[bool]
) -> None:
    e = engine("best-effort", scope)
    exited: set[tuple[str, str]] = set()
    for op, p, c, n in ops:
        uid = f"p{p}"
        budget = {"cpu": 4000, "memory": 4 * GI}
        pod = PodSpec(uid=uid, requests=budget, limits=budget) if pod_level[p] else PodSpec(uid=uid)
        res = {"cpu": n * 1000, "memory": n * GI}
        spec = ContainerSpec(f"c{c}", requests=res, limits=res) if n else ContainerSpec(f"c{c}")
        before = e.assignments()
        placed = None
        try:
            if op == "sandbox":
                changes = e.admit_sandbox(pod)
            elif op == "add":
                if uid not in e.pods():
                    e.admit_sandbox(pod)
                    before = e.assignments()
                got, changes = e.add_container(pod, spec)
                placed = (uid, spec.name)
                exited.discard(placed)
                assert e.assignment(uid, spec.name) == got
            elif op == "stop":
                changes = e.stop_container(uid, spec.name)
                exited.add((uid, spec.name))
            elif op == "remove":
                changes = e.remove_container(uid, spec.name)
            else:
                changes = e.remove_pod(uid)
        except AdmissionError:
            assert e.assignments() == before
            continue
        after = e.assignments()
        for key, value in changes.items():
            assert after[key] == value
        # every live container whose cpuset or mems moved is reported
        moved = {
            k
            for k, a in after.items()
            if k in before
            and k != placed
            and k not in exited
            and (a.cpus, a.mems) != (before[k].cpus, before[k].mems)
        }
        assert moved <= set(changes)
        assert e.verify() == []
    config = seed_config("best-effort", scope)
    back = Engine.restore(seed_topology(), config, json.loads(json.dumps(e.snapshot())))
    assert back.snapshot() == e.snapshot() and back.verify() == []
    for uid in e.pods():
        e.remove_pod(uid)
    assert e.node_shared_pool() == CPUSet.from_range(0, 63)
    assert all(
        t.free == t.allocatable
        for s in e.memory_manager.machine_state.values()
        for t in s.memory_map.values()
    )


def test_budget_released_with_last_container_is_reserved_again() -> None:
    e = engine("restricted", "pod")
    budget = PodSpec(uid="p", requests=TWO, limits=TWO)
    e.admit_sandbox(budget)
    bubble = e.pod_cpus("p")
    e.add_container(budget, ContainerSpec("only", requests=ONE, limits=ONE))
    e.remove_container("p", "only")
    assert e.pod_cpus("p") is None and e.pod_memory("p") == ()
    assert e.remove_container("p", "never-added") == {}
    got, _ = e.add_container(budget, ContainerSpec("next"))
    assert got.assignment is AssignmentType.POD_SHARED and got.cpus == bubble == e.pod_cpus("p")
    assert e.verify() == []


def test_non_integral_cpu_container_shares_cpus_but_pins_memory() -> None:
    e = engine("restricted", "pod")
    budget = PodSpec(uid="p", requests=TWO, limits=TWO)
    e.admit_sandbox(budget)
    half = {"cpu": 500, "memory": GI}
    got, _ = e.add_container(budget, ContainerSpec("half", requests=half, limits=half))
    assert got.assignment is AssignmentType.POD_SHARED and got.cpus == e.pod_cpus("p")
    assert got.memory == () and got.mems == CPUSet([0])
    assert e.memory_manager.container_blocks("p", "half") == (MemoryBlock((0,), "memory", GI),)
    assert e.memory_manager.pod_pool("p") == {"memory": GI}
    assert e.verify() == []


def test_budget_reserved_again_follows_the_node_not_the_stale_hint() -> None:
    e = engine("single-numa-node", "pod")
    budget = PodSpec(uid="p", requests=TWO, limits=TWO)
    e.admit_sandbox(budget)
    assert e.pod_memory("p")[0].numa_nodes == (0,)
    e.add_container(budget, ContainerSpec("init", requests=ONE, limits=ONE))
    e.stop_container("p", "init")
    e.remove_container("p", "init")
    big = {"cpu": 1000, "memory": 14 * GI}
    e.admit_pod(classic("hog", ContainerSpec("hog", requests=big, limits=big)))
    got, _ = e.add_container(budget, ContainerSpec("web", requests=ONE, limits=ONE))
    assert got.mems == CPUSet([1]) and e.pod_memory("p")[0].numa_nodes == (1,)
    assert e.verify() == []
