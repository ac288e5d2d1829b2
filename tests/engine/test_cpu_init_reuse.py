"""Init-container CPU reuse: :meth:`CPUManager.reusable_cpus`, derived from the saved entries,
equals the kubelet's in-memory ``cpusToReuse`` whenever a pod's containers are allocated in spec
order (as the kubelet does), also when other pods allocate or the plugin restarts in between;
NRI's one-container-at-a-time order gets the exited container's CPUs in those cases too."""

from __future__ import annotations

import json

import pytest
from cpu_pods import container, pod_level
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from seed_pods import GI, seed_config, seed_topology

from nri_plrm.base.cpuset import EMPTY, CPUSet
from nri_plrm.engine.cpu_manager import CPUManager
from nri_plrm.engine.cpu_options import CPUManagerConfig
from nri_plrm.engine.facade import Engine
from nri_plrm.engine.spec import AdmissionError, ContainerKind, ContainerSpec, PodSpec, TopologyHint
from nri_plrm.topology.machines import MACHINES

MACHINE = MACHINES["topoDualSocketMultiNumaPerSocketHT"]  # 4 NUMA nodes, 80 CPUs
CONFIG = CPUManagerConfig(reserved_cpu_count=2)
KINDS = [ContainerKind.INIT, ContainerKind.SIDECAR, ContainerKind.APP]
CPUS = ["500m", "1", "2", "3", "5"]  # 500m: Guaranteed but shared (no entry)
HINTS = [None, TopologyHint(0b0001, True), TopologyHint(0b0010, True), TopologyHint(0b0011, False)]


def _literal_update(reuse: dict[str, CPUSet], pod: PodSpec, name: str, cpus: CPUSet) -> None:
    """``updateCPUsToReuse``, transcribed line by line: drop every other pod's entry; a regular
    init container adds its CPUs, any other container (sidecar, app) removes its own."""
    for uid in [u for u in reuse if u != pod.uid]:
        del reuse[uid]
    if pod.uid not in reuse:
        reuse[pod.uid] = EMPTY
    for init in pod.init_containers:
        if init.name == name:
            if not init.restartable:
                reuse[pod.uid] = reuse[pod.uid] | cpus
                return
            break
    reuse[pod.uid] = reuse[pod.uid] - cpus


def _restarted(cm: CPUManager) -> CPUManager:
    return CPUManager.restore(MACHINE, CONFIG, json.loads(json.dumps(cm.snapshot())))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    containers=st.lists(
        st.tuples(
            st.sampled_from(KINDS),
            st.sampled_from(CPUS),
            st.sampled_from(HINTS),
            st.sampled_from(["none", "other pod", "restart"]),
        ),
        min_size=1,
        max_size=7,
    )
)
def test_reusable_cpus_equal_the_kubelets_map_in_spec_order(
    containers: list[tuple[ContainerKind, str, TopologyHint | None, str]],
) -> None:
    specs = [container(f"c{i}", cpu, cpu, kind) for i, (kind, cpu, _, _) in enumerate(containers)]
    pod = PodSpec(
        uid="p",
        init_containers=tuple(c for c in specs if c.kind is not ContainerKind.APP),
        containers=tuple(c for c in specs if c.kind is ContainerKind.APP),
    )
    steps = {
        c.name: (hint, between) for c, (_, _, hint, between) in zip(specs, containers, strict=True)
    }
    cm = CPUManager(MACHINE, CONFIG)
    literal: dict[str, CPUSet] = {}
    others = 0
    for c in pod.all_containers():
        hint, between = steps[c.name]
        if between == "other pod":  # the kubelet never does this; NRI may
            other = PodSpec(uid=f"o{others}", containers=(container("x", "1", "1"),))
            cm.allocate(other, other.containers[0], None)
            others += 1
        elif between == "restart":
            cm = _restarted(cm)
        assert cm.reusable_cpus(pod, c.name) == literal.get("p", EMPTY), c.name
        try:
            cm.allocate(pod, c, hint)
        except AdmissionError:
            return
        cpus = cm.assignment("p", c.name)
        if cpus is not None:
            _literal_update(literal, pod, c.name, cpus)
        # every CPU is in the default set or held by one pod, never by two pods
        held = [EMPTY.union(*names.values()) for names in cm.entries().values()]
        assert sum(map(len, held)) + len(cm.default_cpuset) == len(MACHINE.all_cpus)
        assert EMPTY.union(cm.default_cpuset, *held) == MACHINE.all_cpus
    assert cm.reusable_cpus(pod) == literal.get("p", EMPTY)


def test_app_reuses_init_cpus_with_another_pod_and_a_restart_in_between() -> None:
    """Init 2 CPUs, sidecar 1, app 1: the sidecar reuses one of the init container's CPUs and
    the app the other one, as in the kubelet, although another pod (on another NUMA node, so
    as not to change the packing) allocated and the plugin restarted in between."""
    init = container("init", "2", "2", ContainerKind.INIT)
    side = container("side", "1", "1", ContainerKind.SIDECAR)
    app = container("app", "1", "1")
    pod = PodSpec(uid="p", init_containers=(init, side), containers=(app,))
    other = PodSpec(uid="o", containers=(container("x", "2", "2"),))
    numa3 = TopologyHint(0b1000, True)
    kubelet = CPUManager(MACHINE, CONFIG)
    kubelet.allocate(other, other.containers[0], numa3)
    for c in pod.all_containers():
        kubelet.allocate(pod, c, None)

    nri = CPUManager(MACHINE, CONFIG)
    nri.allocate(pod, init, None)
    nri.allocate(other, other.containers[0], numa3)
    nri = _restarted(nri)
    nri.allocate(pod, side, None)
    nri = _restarted(nri)
    init_cpus, side_cpus = nri.assignment("p", "init"), nri.assignment("p", "side")
    assert init_cpus is not None and side_cpus is not None and side_cpus <= init_cpus
    assert nri.reusable_cpus(pod, "app") == init_cpus - side_cpus
    nri.allocate(pod, app, None)
    for name in ("init", "side", "app"):
        assert nri.assignment("p", name) == kubelet.assignment("p", name), name
    assert nri.assignment("p", "app") == init_cpus - side_cpus
    assert nri.reusable_cpus(pod) == EMPTY
    # releasing the init container keeps the CPUs the app still holds
    nri.remove_container("p", "init")
    assert nri.assignment("p", "app") is not None
    assert nri.assignment("p", "app") & nri.default_cpuset == EMPTY  # type: ignore[operator]


def test_sidecar_does_not_reuse_a_later_init_container() -> None:
    """Only regular init containers listed before a container donate; the init container's
    own CPUs are not offered to it twice, and a sidecar's CPUs are never reusable."""
    first = container("first", "2", "2", ContainerKind.INIT)
    side = container("side", "2", "2", ContainerKind.SIDECAR)
    second = container("second", "3", "3", ContainerKind.INIT)
    app = container("app", "3", "3")
    pod = PodSpec(uid="p", init_containers=(first, side, second), containers=(app,))
    cm = CPUManager(MACHINE, CONFIG)
    cm.allocate(pod, first, None)
    assert cm.reusable_cpus(pod, "first") == EMPTY
    assert cm.reusable_cpus(pod, "side") == cm.assignment("p", "first")
    cm.allocate(pod, side, None)
    assert cm.assignment("p", "side") == cm.assignment("p", "first")
    assert cm.reusable_cpus(pod, "second") == EMPTY
    cm.allocate(pod, second, None)
    assert cm.assignment("p", "side") & cm.assignment("p", "second") == EMPTY  # type: ignore[operator]
    assert cm.reusable_cpus(pod, "app") == cm.assignment("p", "second")
    cm.allocate(pod, app, None)
    assert cm.assignment("p", "app") == cm.assignment("p", "second")


def _engine(scope: str) -> Engine:
    return Engine(seed_topology(), seed_config("best-effort", scope))


def _restored(e: Engine, scope: str) -> Engine:
    data = json.loads(json.dumps(e.snapshot()))
    return Engine.restore(seed_topology(), seed_config("best-effort", scope), data)


def _one(name: str, cpus: int = 1) -> ContainerSpec:
    res = {"cpu": cpus * 1000, "memory": cpus * GI}
    return ContainerSpec(name, requests=res, limits=res)


def _add(e: Engine, pod: PodSpec, c: ContainerSpec) -> CPUSet:
    if pod.uid not in e.pods():
        e.admit_sandbox(pod)
    got, _ = e.add_container(pod, c)
    return got.cpus


@pytest.mark.parametrize("between", ["nothing", "other pod", "restart", "both"])
@pytest.mark.parametrize("scope", ["container", "pod"])
@pytest.mark.parametrize("budget", [False, True], ids=["classic", "pod-level"])
def test_nri_next_container_gets_the_exited_containers_cpus(
    between: str, scope: str, budget: bool
) -> None:
    """Over NRI an exited container is the pod's init container: the pod's next container gets
    its CPUs whatever happened in between, as the kubelet gives an app its init container's
    CPUs. Classic pods reuse through :meth:`CPUManager.reusable_cpus`; pod-level pods reuse
    inside their bubble at pod scope and through the node pool at container scope."""
    e = _engine(scope)
    res = {"cpu": 2000, "memory": 2 * GI}
    pod = PodSpec(uid="p1", requests=res, limits=res) if budget else PodSpec(uid="p1")
    first = _add(e, pod, _one("c2", 2))
    e.stop_container("p1", "c2")
    if between in ("other pod", "both"):
        _add(e, PodSpec(uid="p0"), _one("c0", 2))
    if between in ("restart", "both"):
        e = _restored(e, scope)
    assert _add(e, pod, _one("c0", 2)) == first
    assert e.verify() == [] and _restored(e, scope).verify() == []
    for uid in e.pods():
        e.remove_pod(uid)
    assert e.node_shared_pool() == CPUSet.from_range(0, 63)


def test_pod_level_bubble_reuses_the_init_slice_after_a_restart() -> None:
    """A pod-level pod at pod scope: a regular init container's exclusive slice is not a pool
    consumer, so the app container that follows it takes the same CPUs from the bubble, from
    the saved pool bookkeeping, also after a restore; the CPU manager's container-path reuse is
    empty for such a pod."""
    init = container("init", "2", "2", ContainerKind.INIT)
    app = container("app", "2", "2")
    pod = pod_level("b", "2", init=[init], apps=[app])
    cm = CPUManager(MACHINE, CONFIG)
    bubble = cm.allocate_pod_bubble(pod, None)
    cm.take_from_pod("b", "init", 2)
    cm.release_container_slice("b", "init")  # the facade's stop of an exited container
    cm = _restarted(cm)
    assert cm.reusable_cpus(pod, "app") == EMPTY
    assert cm.take_from_pod("b", "app", 2) == bubble
    whole = CPUManager(MACHINE, CONFIG)
    whole.allocate_pod(pod, None)
    assert whole.assignment("b", "app") == whole.assignment("b", "init") == bubble
