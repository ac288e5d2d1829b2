"""Pod-level resource managers, CPU: ``TestStaticPolicyAllocatePod``,
``TestValidatePodScopeResources`` (``policy_static_test.go``), the KEP-5526 worked examples, and
the incremental API giving the same final state as ``AllocatePod``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest
from cpu_pods import container, pod_level

from nri_plrm.base.cpuset import CPUSet
from nri_plrm.engine.cpu_manager import CPUManager
from nri_plrm.engine.cpu_options import CPUManagerConfig
from nri_plrm.engine.spec import (
    EMPTY_POD_SHARED_POOL_ERROR,
    AdmissionError,
    AssignmentType,
    ContainerKind,
    ContainerSpec,
    PodSpec,
    TopologyHint,
)
from nri_plrm.topology.machines import MACHINES
from nri_plrm.topology.model import CPUInfo, Topology

P = CPUSet.parse
INIT = ContainerKind.INIT
SIDECAR = ContainerKind.SIDECAR
EMPTY_POOL = (
    "pod rejected, sum of exclusive container cpu requests equals pod budget, leaving no cpus "
    "for shared containers"
)


def gu(name: str, cpus: str, kind: ContainerKind = ContainerKind.APP) -> ContainerSpec:
    return container(name, cpus, cpus, kind)


def ngu(name: str, kind: ContainerKind = ContainerKind.APP) -> ContainerSpec:
    return container(name, kind=kind)


def dual_socket_ht() -> CPUManager:
    return CPUManager(MACHINES["topoDualSocketHT"], CPUManagerConfig(reserved_cpus=P("0")))


# (description, pod, expected entries, expected default, (allocs, exclusive, shared))
ALLOCATE_POD = [
    (
        "should successfully allocate CPUs for a guaranteed pod with pod-level resources",
        pod_level("pod1", "2", apps=[gu("container1", "1")]),
        {"container1": "2"},
        "0,1,3,4,5,6,7,9,10,11",
        (1, 1, 0),
    ),
    (
        "scope: pod, should allocate exclusive CPUs to a guaranteed pod with pod-level resources "
        "and guaranteed container, PodLevelResourceManagers enabled",
        pod_level("gu-pod-level-resources", "2", apps=[gu("gu-container", "1")]),
        {"gu-container": "2"},
        "0,1,3,4,5,6,7,9,10,11",
        (1, 1, 0),
    ),
    (
        "scope: pod, should allocate exclusive CPUs to a guaranteed pod with pod-level resources "
        "and non-guaranteed container, PodLevelResourceManagers enabled",
        pod_level("gu-pod-level-resources", "1", apps=[ngu("ngu-container")]),
        {"ngu-container": "6"},
        "0-5,7-11",
        (1, 0, 1),
    ),
    (
        "scope: pod, should allocate exclusive CPUs to a guaranteed pod with pod-level resources "
        "and mix of guaranteed and non-guaranteed containers, PodLevelResourceManagers enabled",
        pod_level(
            "gu-pod-level-mix-ctn",
            "3",
            apps=[gu("gu-container-1", "1"), gu("gu-container-2", "1"), ngu("ngu-container")],
        ),
        {"gu-container-1": "6", "gu-container-2": "2", "ngu-container": "8"},
        "0,1,3,4,5,7,9,10,11",
        (3, 2, 1),
    ),
    (
        "scope: pod, should allocate exclusive CPUs to a guaranteed pod with pod-level resources "
        "and mix of guaranteed standard and init containers, PodLevelResourceManagers enabled",
        pod_level(
            "gu-pod-level-gu-init-ctn",
            "2",
            init=[gu("gu-init-container-1", "1", INIT), gu("gu-init-container-2", "1", INIT)],
            apps=[gu("gu-container-1", "1"), gu("gu-container-2", "1")],
        ),
        {
            "gu-init-container-1": "2",
            "gu-init-container-2": "2",
            "gu-container-1": "2",
            "gu-container-2": "8",
        },
        "0,1,3,4,5,6,7,9,10,11",
        (4, 4, 0),
    ),
    (
        "scope: pod, should allocate exclusive CPUs to a guaranteed pod with pod-level resources "
        "and mix of guaranteed standard and guaranteed restartable and non-guaranteed standard "
        "init containers, PodLevelResourceManagers enabled",
        pod_level(
            "gu-pod-level-gu-init-ctn",
            "3",
            init=[
                ngu("ngu-init-container-1", INIT),
                gu("gu-init-restartable-2", "1", SIDECAR),
                ngu("ngu-init-container-3", INIT),
            ],
            apps=[gu("gu-container-1", "1"), ngu("ngu-container-2")],
        ),
        {
            "ngu-init-container-1": "2,6,8",
            "gu-init-restartable-2": "6",
            "ngu-init-container-3": "2,8",
            "gu-container-1": "2",
            "ngu-container-2": "8",
        },
        "0,1,3,4,5,7,9,10,11",
        (5, 2, 3),
    ),
    (
        "scope: pod, should allocate exclusive CPUs to a guaranteed pod with pod-level resources "
        "and mix of guaranteed standard and non-guaranteed restartable init containers, "
        "PodLevelResourceManagers enabled",
        pod_level(
            "gu-pod-level-gu-init-ctn",
            "3",
            init=[
                ngu("ngu-init-container-1", INIT),
                ngu("ngu-init-restartable-2", SIDECAR),
                ngu("ngu-init-container-3", INIT),
            ],
            apps=[gu("gu-container-1", "1"), ngu("ngu-container-2")],
        ),
        {
            "ngu-init-container-1": "2,6,8",
            "ngu-init-restartable-2": "2,8",
            "ngu-init-container-3": "2,6,8",
            "gu-container-1": "6",
            "ngu-container-2": "2,8",
        },
        "0,1,3,4,5,7,9,10,11",
        (5, 1, 4),
    ),
]


def _ids(cases: Sequence[tuple[object, ...]]) -> list[str]:
    return [str(case[0]) for case in cases]


@pytest.mark.parametrize(
    ("desc", "pod", "entries", "default", "metrics"), ALLOCATE_POD, ids=_ids(ALLOCATE_POD)
)
def test_static_policy_allocate_pod(
    desc: str,
    pod: PodSpec,
    entries: Mapping[str, str],
    default: str,
    metrics: tuple[int, int, int],
) -> None:
    manager = dual_socket_ht()
    manager.allocate_pod(pod, None)
    assert manager.entries() == {pod.uid: {k: P(v) for k, v in entries.items()}}
    assert manager.default_cpuset == P(default)
    # The kubelet's metric vectors, as the Prometheus metrics derive them from the state.
    kinds = [manager.assignment_type(pod.uid, c.name).value for c in pod.all_containers()]
    assert len(manager.entries().get(pod.uid, {})) == metrics[0]
    assert kinds.count("pod_exclusive") == metrics[1]
    assert kinds.count("pod_shared") == metrics[2]
    bubble = manager.pod_cpus(pod.uid)
    assert bubble is not None
    assert bubble | manager.default_cpuset == P("0-11")


def test_static_policy_allocate_pod_should_reject_a_pod_with_an_empty_pod_shared_pool() -> None:
    manager = dual_socket_ht()
    pod = pod_level(
        "gu-pod-level-empty-pod-shared-pool",
        "2",
        apps=[gu("gu-container-1", "1"), gu("gu-container-2", "1"), ngu("ngu-container")],
    )
    with pytest.raises(AdmissionError) as info:
        manager.allocate_pod(pod, TopologyHint(0b01, True))
    assert info.value.reason == EMPTY_POD_SHARED_POOL_ERROR
    assert info.value.message == EMPTY_POOL
    assert manager.entries() == {}
    assert manager.pod_entries() == {}
    assert manager.default_cpuset == P("0-11")


def test_static_policy_allocate_pod_should_not_allocate_to_a_non_guaranteed_pod() -> None:
    manager = dual_socket_ht()
    pod = pod_level(
        "ngu-pod-level-empty-pod-shared-pool", "2", apps=[gu("gu-container-1", "1")], cpu_limit="1"
    )
    manager.allocate_pod(pod, TopologyHint(0b01, True))
    assert manager.entries() == {}
    assert manager.default_cpuset == P("0-11")


VALIDATE = [
    (
        "Valid: Pod-level != Guaranteed containers, has podSharedPool containers",
        pod_level("p", "4", apps=[gu("c1", "2"), ngu("c2")]),
        None,
    ),
    (
        "Valid: Only Guaranteed containers",
        pod_level("p", "4", apps=[gu("c1", "2"), gu("c2", "2")]),
        None,
    ),
    (
        "Valid: Only podSharedPool containers",
        pod_level("p", "4", apps=[ngu("c1"), ngu("c2")]),
        None,
    ),
    (
        "Valid: Pod-level == Guaranteed containers, has podSharedPool containers with request",
        pod_level(
            "p",
            "6",
            apps=[gu("c1", "3"), gu("c2", "2"), container("c3", "500m", "1000m"), ngu("c4")],
        ),
        None,
    ),
    (
        "Failure: Pod-level == Guaranteed containers, has podSharedPool containers",
        pod_level("p", "5", apps=[gu("c1", "3"), gu("c2", "2"), ngu("c3")]),
        EMPTY_POOL,
    ),
    (
        "Valid: Pod-level resources with standard and restartable init containers",
        pod_level(
            "p",
            "2",
            init=[
                gu("init-container1", "1", INIT),
                gu("restartable-init-container1", "1", SIDECAR),
            ],
            apps=[ngu("container1")],
        ),
        None,
    ),
    (
        "Valid: Pod-level resources equal init and standard container resources",
        pod_level("p", "2", init=[gu("init-container1", "2", INIT)], apps=[gu("container1", "2")]),
        None,
    ),
    (
        "Failure: Pod-level resources with shared standard init container and no available pool",
        pod_level(
            "p",
            "2",
            init=[gu("restartable-init-container1", "2", SIDECAR), ngu("init-container1", INIT)],
        ),
        "pod rejected, pod has shared init containers but no cpus available for them",
    ),
    (
        "Valid: Pod-level resources with shared standard init container and no available pool",
        pod_level(
            "p",
            "2",
            init=[ngu("init-container1", INIT), gu("restartable-init-container1", "2", SIDECAR)],
        ),
        None,
    ),
    (
        "Failure: Pod-level == Restartable guaranteed init containers, has podSharedPool "
        "containers",
        pod_level(
            "p",
            "2",
            init=[
                gu("restartable-init-container1", "2", SIDECAR),
                ngu("restartable-init-container2", SIDECAR),
            ],
        ),
        EMPTY_POOL,
    ),
    (
        "Valid: Pod-level resources with only restartable one init container and one standard "
        "container",
        pod_level(
            "p",
            "2",
            init=[gu("restartable-init-container1", "1", SIDECAR)],
            apps=[gu("container1", "1")],
        ),
        None,
    ),
    (
        "Failure (spec 4.4): exclusive init container larger than the pool left by sidecars",
        pod_level(
            "p",
            "3",
            init=[gu("sidecar", "2", SIDECAR), gu("init", "2", INIT)],
            apps=[gu("app", "1")],
        ),
        "pod rejected, largest exclusive init container requests 2 cpus, but only 1 available",
    ),
]


@pytest.mark.parametrize(("desc", "pod", "want"), VALIDATE, ids=_ids(VALIDATE))
def test_validate_pod_scope_resources(desc: str, pod: PodSpec, want: str | None) -> None:
    manager = CPUManager(MACHINES["topoSingleSocketHT"], CPUManagerConfig(reserved_cpu_count=0))
    assert manager.validate_pod_scope_resources(pod) == want
    hints = manager.get_pod_topology_hints(pod)
    if want is None:
        assert hints.get("cpu") != []
    else:
        assert hints == {"cpu": []}


def _kep_machine() -> Topology:
    # One socket, one NUMA node, CPUs 0-7 without SMT; CPU 0 reserved, as in the KEP tables.
    return Topology.build(CPUInfo(cpu=c, core=c, socket=0, numa=0, l3=0) for c in range(8))


KEP_POD_SCOPE = [
    (
        "pod 5; c1 3, c2 1, c3 1 (all Guaranteed)",
        [gu("c1", "3"), gu("c2", "1"), gu("c3", "1")],
        {"c1": "1-3", "c2": "4", "c3": "5"},
    ),
    (
        "pod 5; c1 3; c2, c3 shared",
        [gu("c1", "3"), ngu("c2"), ngu("c3")],
        {"c1": "1-3", "c2": "4,5", "c3": "4,5"},
    ),
    (
        "pod 5; all shared",
        [ngu("c1"), ngu("c2"), ngu("c3")],
        {"c1": "1-5", "c2": "1-5", "c3": "1-5"},
    ),
]


@pytest.mark.parametrize(("desc", "apps", "want"), KEP_POD_SCOPE, ids=_ids(KEP_POD_SCOPE))
def test_kep_pod_scope_examples(
    desc: str, apps: list[ContainerSpec], want: Mapping[str, str]
) -> None:
    manager = CPUManager(_kep_machine(), CPUManagerConfig(reserved_cpus=P("0")))
    pod = pod_level("kep", "5", apps=apps)
    manager.allocate_pod(pod, TopologyHint(0b1, True))
    assert manager.entries()["kep"] == {k: P(v) for k, v in want.items()}
    assert manager.pod_cpus("kep") == P("1-5")


def test_kep_pod_scope_example_rejected_for_an_empty_pod_shared_pool() -> None:
    manager = CPUManager(_kep_machine(), CPUManagerConfig(reserved_cpus=P("0")))
    pod = pod_level("kep", "5", apps=[gu("c1", "3"), gu("c2", "2"), ngu("c3")])
    with pytest.raises(AdmissionError) as info:
        manager.allocate_pod(pod, TopologyHint(0b1, True))
    assert (info.value.reason, info.value.message) == (EMPTY_POD_SHARED_POOL_ERROR, EMPTY_POOL)


def test_kep_container_scope_example() -> None:
    manager = CPUManager(_kep_machine(), CPUManagerConfig(reserved_cpus=P("0")))
    pod = pod_level("kep", "5", apps=[gu("c1", "3"), ngu("c2"), ngu("c3")])
    for c in pod.containers:
        manager.allocate(pod, c, TopologyHint(0b1, True))
    assert manager.entries() == {"kep": {"c1": P("1-3")}}
    assert manager.default_cpuset == P("0,4-7")
    assert manager.assignment_type("kep", "c2") is AssignmentType.NODE_SHARED
    assert manager.assignment_type("kep", "c1") is AssignmentType.NODE_EXCLUSIVE
    assert manager.get_topology_hints(pod, pod.containers[1]) == {}


def _incremental(manager: CPUManager, pod: PodSpec) -> None:
    """Drive the incremental API as the NRI facade does: bubble first, containers in order."""
    manager.allocate_pod_bubble(pod, None)
    shared_long_running: list[str] = []
    for c in pod.all_containers():
        n = manager.guaranteed_cpus(pod, c)
        if n > 0:
            manager.take_from_pod(pod.uid, c.name, n)
            if c.kind is INIT:
                manager.release_container_slice(pod.uid, c.name)
        elif c.kind is INIT:
            manager.set_container_cpus(pod.uid, c.name, manager.pod_shared_pool(pod.uid))
        else:
            shared_long_running.append(c.name)
            manager.set_container_cpus(pod.uid, c.name, manager.pod_shared_pool(pod.uid))
    for name in shared_long_running:
        manager.set_container_cpus(pod.uid, name, manager.pod_shared_pool(pod.uid))


@pytest.mark.parametrize(
    ("desc", "pod", "entries", "default", "metrics"), ALLOCATE_POD, ids=_ids(ALLOCATE_POD)
)
def test_incremental_api_reaches_the_allocate_pod_state(
    desc: str,
    pod: PodSpec,
    entries: Mapping[str, str],
    default: str,
    metrics: tuple[int, int, int],
) -> None:
    whole = dual_socket_ht()
    whole.allocate_pod(pod, None)
    step = dual_socket_ht()
    _incremental(step, pod)
    assert step.entries() == whole.entries()
    assert step.pod_entries() == whole.pod_entries()
    assert step.default_cpuset == whole.default_cpuset
    for c in pod.all_containers():
        assert step.assignment_type(pod.uid, c.name) is whole.assignment_type(pod.uid, c.name) or (
            c.kind is INIT
        )


def test_allocate_pod_is_idempotent_when_a_pod_entry_exists() -> None:
    # kubernetes issue #140989: re-admission after a restart must keep the bubble.
    manager = CPUManager(
        Topology.build(CPUInfo(cpu=c, core=c, socket=0, numa=0, l3=0) for c in range(4)),
        CPUManagerConfig(reserved_cpu_count=1),
    )
    pod = pod_level("p", "2", apps=[ngu("app")])
    manager.allocate_pod(pod, None)
    before = manager.snapshot()
    restored = CPUManager.restore(manager.topology, manager.config, before)
    restored.allocate_pod(pod, None)
    assert restored.snapshot() == before


def test_remove_container_releases_the_bubble_only_with_the_last_entry() -> None:
    manager = dual_socket_ht()
    pod = pod_level("p", "3", apps=[gu("a", "1"), gu("b", "1"), ngu("c")])
    manager.allocate_pod(pod, None)
    bubble = manager.pod_cpus("p")
    assert bubble is not None
    manager.remove_container("p", "a")
    manager.remove_container("p", "b")
    assert manager.pod_cpus("p") == bubble
    assert manager.default_cpuset == P("0-11") - bubble
    manager.remove_container("p", "c")
    assert manager.pod_cpus("p") is None
    assert manager.default_cpuset == P("0-11")


def test_take_from_pod_rejects_a_slice_larger_than_the_pool() -> None:
    manager = dual_socket_ht()
    pod = pod_level("p", "2")
    manager.allocate_pod_bubble(pod, None)
    manager.take_from_pod("p", "a", 1)
    with pytest.raises(AdmissionError) as info:
        manager.take_from_pod("p", "b", 2)
    assert info.value.message == (
        "Allocate failed due to not enough cpus available to satisfy request: requested=2, "
        "available=1, which is unexpected"
    )
    assert manager.assignment("p", "b") is None


def test_restarted_container_gets_its_released_slice_back() -> None:
    manager = dual_socket_ht()
    manager.allocate_pod_bubble(pod_level("p", "4"), None)
    first = manager.take_from_pod("p", "a", 2)
    manager.release_container_slice("p", "a")
    manager.release_container_slice("p", "a")
    assert manager.pod_shared_pool("p") == manager.pod_cpus("p")
    assert manager.take_from_pod("p", "a", 2) == first
    assert manager.pod_shared_pool("p") == (manager.pod_cpus("p") or P("")) - first


def test_pod_topology_hints_for_a_pod_level_pod_use_the_budget() -> None:
    manager = dual_socket_ht()
    pod = pod_level("p", "4", apps=[gu("a", "2"), ngu("b")])
    hints = manager.get_pod_topology_hints(pod)
    assert hints == {
        "cpu": [TopologyHint(0b01, True), TopologyHint(0b10, True), TopologyHint(0b11, False)]
    }
    big = pod_level("q", "7", apps=[ngu("b")])
    assert manager.get_pod_topology_hints(big) == {"cpu": [TopologyHint(0b11, True)]}


def test_gate_off_pod_level_pods_get_nothing() -> None:
    manager = CPUManager(
        MACHINES["topoDualSocketHT"],
        CPUManagerConfig(reserved_cpus=P("0"), pod_level_resource_managers=False),
    )
    pod = pod_level("p", "2", apps=[gu("a", "1")])
    assert manager.get_pod_topology_hints(pod) == {}
    assert manager.get_topology_hints(pod, pod.containers[0]) == {}
    manager.allocate(pod, pod.containers[0], None)
    assert manager.entries() == {}


def test_isolation_levels() -> None:
    manager = dual_socket_ht()
    pod = pod_level("p", "3", apps=[gu("a", "1"), ngu("b")])
    manager.allocate_pod(pod, None)
    assert manager.isolation_level(pod, pod.containers[0]) == "container"
    assert manager.isolation_level(pod, pod.containers[1]) == "pod"
    other = pod_level("o", "1", apps=[ngu("x")])
    assert manager.isolation_level(other, other.containers[0]) == "host"
