"""Topology manager policy ``none``: the engine admits as the kubelet's none scope does.

Ported vectors (numbers only):

- ``topologymanager/policy_none_test.go``: ``TestPolicyNoneName``, ``TestPolicyNoneMerge`` (3),
  ``TestPolicyNoneCanAdmitPodResult`` (2);
- ``cpumanager/cpu_manager_test.go``: ``TestCPUManagerAddWithInitContainers`` (9), which runs the
  static policy behind the fake topology manager, i.e. with no NUMA hint, as under ``none``;
- ``test/e2e_node/cpu_manager_test.go`` "SMT Alignment and distribution across NUMA" (2): the
  kubelet's e2e nodes run with its default topology policy ``none``; on the bundled 4-NUMA
  machine the distributed request is ``(cpus per NUMA - SMT level) * NUMA nodes`` = 56 CPUs, which
  no aligning policy can place on one node.

Pods with pod-level resources follow the KEP-5526 rule for ``none`` ("the Topology Manager is
idle"): the none scope calls each provider's container ``Allocate``, so an equivalent-Guaranteed
container gets exclusive CPUs and memory from the node without NUMA alignment, the others run
in the node shared pool, and no pod budget or pod shared pool exists.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import pytest
from cpu_pods import make_multi_container_pod
from seed_pods import GI, SEED_PODS, seed_config, seed_topology

from nri_plrm.base.cpuset import CPUSet
from nri_plrm.engine.cpu_options import CPUManagerConfig
from nri_plrm.engine.facade import Engine, EngineConfig
from nri_plrm.engine.memory_state import MemoryManagerConfig
from nri_plrm.engine.spec import (
    SMT_ALIGNMENT_ERROR,
    TOPOLOGY_AFFINITY_ERROR,
    AdmissionError,
    AssignmentType,
    ContainerAssignment,
    ContainerKind,
    ContainerSpec,
    HintMap,
    PodSpec,
    TopologyHint,
)
from nri_plrm.engine.topology_manager import (
    POLICY_NONE,
    UNSATISFIABLE,
    TopologyManager,
    TopologyManagerConfig,
)
from nri_plrm.topology.machines import MACHINES

P = CPUSet.parse


def admitted(engine: Engine, pod: PodSpec) -> dict[str, ContainerAssignment]:
    """Admit ``pod`` whole; its containers' assignments by name."""
    engine.admit_pod(pod)
    return {c.name: engine.assignment(pod.uid, c.name) for c in pod.all_containers()}  # type: ignore[misc]


def _cpu_only_engine(
    machine: str, reserved: int, options: dict[str, object] | None = None
) -> Engine:
    """CPU manager ``static`` behind topology policy ``none``, memory manager ``None``."""
    return Engine(
        MACHINES[machine],
        EngineConfig(
            topology_manager=TopologyManagerConfig(POLICY_NONE),
            cpu_manager=CPUManagerConfig(reserved_cpu_count=reserved, options=dict(options or {})),
            memory_manager=MemoryManagerConfig(policy="None"),
        ),
    )


# --- policy_none_test.go ------------------------------------------------------------------------


def test_policy_none_name() -> None:
    tm = TopologyManager(MACHINES["topoDualSocketHT"], TopologyManagerConfig(POLICY_NONE))
    assert tm.policy == "none"


def _mask(*nodes: int) -> int:
    return sum(1 << n for n in nodes)


@pytest.mark.parametrize(
    ("description", "providers"),
    [
        ("merged empty providers hints", []),
        (
            "merge with a single provider with a single preferred resource",
            [{"resource": [TopologyHint(_mask(0, 1), True)]}],
        ),
        (
            "merge with a single provider with a single non-preferred resource",
            [{"resource": [TopologyHint(_mask(0, 1), False)]}],
        ),
    ],
)
def test_policy_none_merge(description: str, providers: list[HintMap]) -> None:
    tm = TopologyManager(MACHINES["topoDualSocketHT"], TopologyManagerConfig(POLICY_NONE))
    assert tm.merge(providers) == (UNSATISFIABLE, True)
    assert tm.merge(providers)[0] == TopologyHint(None, False)  # the kubelet's TopologyHint{}


@pytest.mark.parametrize(
    ("description", "hint"),
    [
        ("Preferred is set to false in topology hints", TopologyHint(None, False)),
        ("Preferred is set to true in topology hints", TopologyHint(None, True)),
    ],
)
def test_policy_none_can_admit_pod_result(description: str, hint: TopologyHint) -> None:
    tm = TopologyManager(MACHINES["topoDualSocketHT"], TopologyManagerConfig(POLICY_NONE))
    assert tm.merge([{"resource": [hint]}])[1] is True


# --- cpu_manager_test.go: TestCPUManagerAddWithInitContainers ---------------------------------

# (description, init (request, limit) pairs, app pairs, expected init cpusets, expected app
# cpusets); topoSingleSocketHT (CPU n and n+4 are siblings), no reserved CPUs, state 0-7.
ADD_WITH_INIT: list[
    tuple[str, list[tuple[str, str]], list[tuple[str, str]], list[str], list[str]]
] = [
    ("No Guaranteed Init CPUs", [("100m", "100m")], [("4000m", "4000m")], [""], ["0-1,4-5"]),
    ("Equal Number of Guaranteed CPUs", [("4", "4")], [("4", "4")], ["0-1,4-5"], ["0-1,4-5"]),
    ("More Init Container Guaranteed CPUs", [("6", "6")], [("4", "4")], ["0-2,4-6"], ["0-1,4-5"]),
    ("Less Init Container Guaranteed CPUs", [("2", "2")], [("4", "4")], ["0,4"], ["0-1,4-5"]),
    (
        "Multi Init Container Equal CPUs",
        [("2", "2"), ("2", "2")],
        [("2", "2")],
        ["0,4", "0,4"],
        ["0,4"],
    ),
    (
        "Multi Init Container Less CPUs",
        [("4", "4"), ("4", "4")],
        [("2", "2")],
        ["0-1,4-5", "0-1,4-5"],
        ["0,4"],
    ),
    (
        "Multi Init Container More CPUs",
        [("2", "2"), ("2", "2")],
        [("4", "4")],
        ["0,4", "0,4"],
        ["0-1,4-5"],
    ),
    (
        "Multi Init Container Increasing CPUs",
        [("2", "2"), ("4", "4")],
        [("6", "6")],
        ["0,4", "0-1,4-5"],
        ["0-2,4-6"],
    ),
    (
        "Multi Init, Multi App Container Split CPUs",
        [("2", "2"), ("4", "4")],
        [("2", "2"), ("2", "2")],
        ["0,4", "0-1,4-5"],
        ["0,4", "1,5"],
    ),
]


def _check_add_with_init(
    engine: Engine, pod: PodSpec, exp_init: Sequence[str], exp_apps: Sequence[str]
) -> None:
    union = CPUSet()
    for spec, want in zip(pod.all_containers(), [*exp_init, *exp_apps], strict=True):
        got = engine.cpu_manager.assignment(pod.uid, spec.name)
        assert (got or CPUSet()) == P(want), spec.name
        union = union | (got or CPUSet())
    assert engine.node_shared_pool() == P("0-7") - union


@pytest.mark.parametrize(
    ("description", "init", "apps", "exp_init", "exp_apps"),
    ADD_WITH_INIT,
    ids=[row[0] for row in ADD_WITH_INIT],
)
def test_cpu_manager_add_with_init_containers(
    description: str,
    init: list[tuple[str, str]],
    apps: list[tuple[str, str]],
    exp_init: list[str],
    exp_apps: list[str],
) -> None:
    pod = make_multi_container_pod(init, apps)
    whole = _cpu_only_engine("topoSingleSocketHT", 0)
    whole.admit_pod(pod)
    _check_add_with_init(whole, pod, exp_init, exp_apps)


@pytest.mark.parametrize(
    ("description", "init", "apps", "exp_init", "exp_apps"),
    ADD_WITH_INIT,
    ids=[row[0] for row in ADD_WITH_INIT],
)
def test_cpu_manager_add_with_init_containers_over_nri(
    description: str,
    init: list[tuple[str, str]],
    apps: list[tuple[str, str]],
    exp_init: list[str],
    exp_apps: list[str],
) -> None:
    """The same rows container by container, as NRI shows them: each regular init container
    has exited before the next container is created."""
    pod = make_multi_container_pod(init, apps)
    engine = _cpu_only_engine("topoSingleSocketHT", 0)
    engine.admit_sandbox(PodSpec(uid=pod.uid, name=pod.name))
    for spec in pod.all_containers():
        engine.add_container(pod, spec)
        if spec.kind is ContainerKind.INIT:
            engine.stop_container(pod.uid, spec.name)
    _check_add_with_init(engine, pod, exp_init, exp_apps)


# --- e2e_node cpu_manager_test.go: SMT alignment and distribution across NUMA ------------------


def _cpu_pod(uid: str, cpus: int) -> PodSpec:
    res = {"cpu": cpus * 1000, "memory": 100 << 20}
    return PodSpec(uid=uid, name=uid, containers=(ContainerSpec("c", requests=res, limits=res),))


def test_distribute_cpus_across_numa_with_full_pcpus_only_under_none() -> None:
    machine = MACHINES["default"]
    smt = machine.cpus_per_core
    per_numa = len(machine.cpus_in_numa(0))
    request = (per_numa - smt) * machine.num_numa_nodes
    assert request == 56
    options: dict[str, object] = {"full-pcpus-only": True, "distribute-cpus-across-numa": True}
    engine = _cpu_only_engine("default", 1, options)
    got = admitted(engine, _cpu_pod("distributed", request))["c"]
    assert got.assignment is AssignmentType.NODE_EXCLUSIVE and len(got.cpus) == request
    cores = {machine.cpu_info[c].core for c in got.cpus}
    assert got.cpus == CPUSet(c for c, i in machine.cpu_info.items() if i.core in cores)
    assert [len(got.cpus & machine.cpus_in_numa(n)) for n in machine.numa_ids] == [14] * 4

    aligned = Engine(
        machine,
        EngineConfig(
            topology_manager=TopologyManagerConfig("single-numa-node"),
            cpu_manager=CPUManagerConfig(reserved_cpu_count=1, options=options),
            memory_manager=MemoryManagerConfig(policy="None"),
        ),
    )
    with pytest.raises(AdmissionError) as err:
        aligned.admit_pod(_cpu_pod("distributed", request))
    assert err.value.reason == TOPOLOGY_AFFINITY_ERROR


def test_packed_cpus_with_distribution_disabled_and_full_pcpus_only_under_none() -> None:
    options: dict[str, object] = {"full-pcpus-only": True, "distribute-cpus-across-numa": False}
    engine = _cpu_only_engine("default", 1, options)
    got = admitted(engine, _cpu_pod("packed", 2))["c"]
    assert got.cpus == P("1,33")  # one whole core, the first after the reserved one


def test_allocation_errors_still_reject_under_none() -> None:
    engine = _cpu_only_engine("default", 1, {"full-pcpus-only": True})
    with pytest.raises(AdmissionError) as err:
        engine.admit_pod(_cpu_pod("odd", 3))
    assert err.value.reason == SMT_ALIGNMENT_ERROR
    assert (
        err.value.message == "SMT Alignment Error: requested 3 cpus not multiple cpus per core = 2"
    )
    assert engine.assignments() == {} and engine.node_shared_pool() == P("0-63")


# --- whole engine under none: no alignment, memory from the default hint ----------------------


def _none_engine() -> Engine:
    return Engine(seed_topology(), seed_config(POLICY_NONE, "container"))


def test_none_admits_what_single_numa_node_rejects_without_aligning() -> None:
    res = {"cpu": 20_000, "memory": 20 * GI}
    pod = PodSpec(uid="wide", containers=(ContainerSpec("c", requests=res, limits=res),))
    aligned = Engine(seed_topology(), seed_config("single-numa-node", "container"))
    with pytest.raises(AdmissionError) as err:
        aligned.admit_pod(pod)
    assert err.value.reason == TOPOLOGY_AFFINITY_ERROR

    engine = _none_engine()
    got = admitted(engine, pod)["c"]
    assert got.assignment is AssignmentType.NODE_EXCLUSIVE
    # takeByTopology with no hint: the whole free NUMA node 1 first (node 0 holds the reserved
    # CPU), then two whole cores of node 0.
    assert got.cpus == P("1-2,8-15,33-34,40-47")
    # Memory: the Static policy's default hint, the narrowest preferred mask that holds 20Gi.
    assert got.mems == P("0-1")
    assert {(b.resource, b.size, b.numa_nodes) for b in got.memory} == {("memory", 20 * GI, (0, 1))}
    assert engine.verify() == []


def test_cpus_and_memory_are_not_aligned_with_each_other_under_none() -> None:
    engine = _none_engine()
    full = {"cpu": 1000, "memory": 14 * GI}
    engine.admit_pod(
        PodSpec(uid="fill", containers=(ContainerSpec("c", requests=full, limits=full),))
    )
    res = {"cpu": 2000, "memory": 2 * GI}
    got = admitted(
        engine, PodSpec(uid="p", containers=(ContainerSpec("c", requests=res, limits=res),))
    )["c"]
    # The first pod took CPU 32 (beside the reserved CPU 0) and 14Gi of NUMA 0's 15Gi. The
    # second one's CPUs still come from NUMA 0, while the memory manager's default hint puts its
    # 2Gi on NUMA 1: no topology manager ties the two together.
    assert got.cpus == P("1,33")
    assert got.mems == P("1")


@pytest.mark.parametrize("name", sorted(SEED_PODS))
def test_pod_level_pods_get_the_container_path_under_none(name: str) -> None:
    pod = SEED_PODS[name]()
    engine = _none_engine()
    got = admitted(engine, pod)
    assert engine.pod_cpus(pod.uid) is None and engine.pod_memory(pod.uid) == ()
    exclusive = CPUSet()
    for spec in pod.all_containers():
        a = got[spec.name]
        if spec.requests:
            assert a.assignment is AssignmentType.NODE_EXCLUSIVE, spec.name
            assert len(a.cpus) == spec.requests["cpu"] // 1000
            assert sum(b.size for b in a.memory) == spec.requests["memory"]
            exclusive = exclusive | a.cpus
        else:
            assert a.assignment is AssignmentType.NODE_SHARED, spec.name
            assert a.memory == () and a.mems == CPUSet()
    for spec in pod.all_containers():
        if not spec.requests:
            assert got[spec.name].cpus == P("0-63") - exclusive
    assert engine.verify() == []


SEED_UNDER_NONE: dict[str, dict[str, tuple[str, str]]] = {
    # container: (cpus, mems) on the bundled machine alone, CPU 0 and 1Gi on NUMA 0 reserved.
    "pod-scope-mixed": {"main-app": ("1,33", "0")},
    "empty-shared-pool": {"metrics-sidecar": ("32", "0"), "main-app": ("1-2,33", "0")},
    "container-scope-mixed": {"infrastructure-sidecar": ("1,33", "0")},
    "tightly-coupled-database": {"database": ("1-3,33-35", "0")},
    "ml-workload": {"ml-training": ("1,32-33", "0")},
}


@pytest.mark.parametrize("name", sorted(SEED_UNDER_NONE))
def test_pod_level_seed_pods_under_none_whole_and_over_nri(name: str) -> None:
    pod = SEED_PODS[name]()
    whole = _none_engine()
    got = admitted(whole, pod)
    for cname, (cpus, mems) in SEED_UNDER_NONE[name].items():
        assert (got[cname].cpus, got[cname].mems) == (P(cpus), P(mems)), cname

    nri = _none_engine()
    assert nri.admit_sandbox(pod) == {}
    assert nri.pod_cpus(pod.uid) is None  # no budget reserved under none
    for spec in pod.all_containers():
        nri.add_container(pod, spec)
    assert nri.assignments() == whole.assignments()
    assert nri.node_shared_pool() == whole.node_shared_pool()


def test_state_survives_a_restart_under_none() -> None:
    engine = _none_engine()
    for name in sorted(SEED_PODS):
        engine.admit_pod(SEED_PODS[name]())
    snapshot = json.loads(json.dumps(engine.snapshot()))
    assert snapshot["affinity"] == {}  # the none scope stores no hint
    restored = Engine.restore(seed_topology(), seed_config(POLICY_NONE, "container"), snapshot)
    assert restored.assignments() == engine.assignments()
    assert restored.node_shared_pool() == engine.node_shared_pool()
    assert restored.verify() == []
    for name in sorted(SEED_PODS):  # admitted pods keep their state
        assert restored.admit_pod(SEED_PODS[name]()) == {}
    assert restored.assignments() == engine.assignments()
