"""``simulate`` on the bundled examples: the documented outcome of every seed pod."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from nri_plrm.base.cpuset import CPUSet
from nri_plrm.cli.simulate import SimulatedPod, SimulationResult, engine_for, simulate
from nri_plrm.config.file import load_config, parse_config
from nri_plrm.config.settings import Config, ConfigError
from nri_plrm.engine.availability import free_per_numa, free_per_numa_to_dict
from nri_plrm.topology.synthetic import DEFAULT_SPEC, synthetic_topology
from nri_plrm.translate.manifest_to_pod import ManifestError, load_manifests

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
TOPOLOGY = synthetic_topology(DEFAULT_SPEC)
GI = 1 << 30
P = CPUSet.parse
EMPTY_POOL_TM = (
    "Pod Scope pod with pod-level resources failed admission under pod-scope topology manager"
)
EMPTY_POOL_CAUSE = (
    "exclusive containers request 4 CPUs = pod budget 4 CPUs, nothing left for the 1 shared "
    "container (logging-sidecar)"
)


def _run(*names: str, config: Config | None = None) -> SimulationResult:
    return simulate([EXAMPLES / f"{n}.yaml" for n in names], TOPOLOGY, config)


def _containers(pod: SimulatedPod) -> dict[str, tuple[str, CPUSet, CPUSet, int | None]]:
    return {c.name: (c.assignment, c.cpus, c.mems, c.cpu_quota) for c in pod.containers}


def test_pod_scope_mixed() -> None:
    (pod,) = _run("pod-scope-mixed").pods
    assert pod.admitted and pod.reason == ""
    # Bubble: the first two free whole cores of NUMA 0 (CPU 0 is reserved): cores 1 and 2.
    assert pod.cpu_ids == P("1-2,33-34")
    assert pod.memory == (("memory", 4 * GI, (0,)),)
    assert _containers(pod) == {
        "metrics-sidecar": ("pod_shared", P("2,34"), P("0"), 400000),
        "logging-sidecar": ("pod_shared", P("2,34"), P("0"), 400000),
        "main-app": ("pod_exclusive", P("1,33"), P("0"), -1),
    }
    assert [c.kind for c in pod.containers] == ["sidecar", "sidecar", "app"]


def test_empty_shared_pool_single_numa_node() -> None:
    result = _run("empty-shared-pool")
    (pod,) = result.pods
    assert not pod.admitted
    assert pod.reason == "TopologyAffinityError"
    assert pod.message == EMPTY_POOL_TM
    assert pod.containers == () and pod.cpu_ids == CPUSet()
    assert result.shared_pool == TOPOLOGY.all_cpus


def test_empty_shared_pool_best_effort_policy() -> None:
    config = parse_config('[topology_manager]\npolicy = "best-effort"\nscope = "pod"\n')
    (pod,) = _run("empty-shared-pool", config=config).pods
    assert not pod.admitted
    assert pod.reason == "EmptyPodSharedPoolError"
    assert pod.message == (
        "pod rejected, sum of exclusive container cpu requests equals pod budget, "
        "leaving no cpus for shared containers"
    )


def test_tightly_coupled_database_lands_on_numa_1() -> None:
    # 16Gi does not fit NUMA 0 (512Mi reserved there), so the whole pod goes to NUMA 1.
    (pod,) = _run("tightly-coupled-database").pods
    assert pod.cpu_ids == P("8-11,40-43")
    assert pod.memory == (("memory", 16 * GI, (1,)),)
    assert _containers(pod) == {
        "metrics-exporter": ("pod_shared", P("11,43"), P("1"), 800000),
        "backup-agent": ("pod_shared", P("11,43"), P("1"), 800000),
        "database": ("pod_exclusive", P("8-10,40-42"), P("1"), -1),
    }


def test_container_scope_examples() -> None:
    config = load_config(EXAMPLES / "container-scope.toml")
    result = _run("container-scope-mixed", config=config)
    (pod,) = result.pods
    assert pod.cpu_ids == CPUSet() and pod.memory == ()
    infra = _containers(pod)["infrastructure-sidecar"]
    assert infra == ("node_exclusive", P("1,33"), P("0"), -1)
    for worker in ("worker-1", "worker-2"):
        assignment, cpus, mems, quota = _containers(pod)[worker]
        assert (assignment, mems, quota) == ("node_shared", CPUSet(), 400000)
        assert cpus == result.shared_pool == P("0,2-32,34-63")

    result = _run("ml-workload", config=config)
    (pod,) = result.pods
    assignment, cpus, mems, quota = _containers(pod)["ml-training"]
    assert (assignment, cpus, mems, quota) == ("node_exclusive", P("1,32-33"), P("0"), -1)
    sidecar = _containers(pod)["service-mesh-sidecar"]
    assert sidecar[0] == "node_shared" and sidecar[1] == result.shared_pool == P("0,2-31,34-63")


def test_container_scope_examples_together_follow_the_node_pool() -> None:
    config = load_config(EXAMPLES / "container-scope.toml")
    result = _run("container-scope-mixed", "ml-workload", config=config)
    assert result.shared_pool == P("0,3-31,35-63")
    shared = [c for p in result.pods for c in p.containers if c.assignment == "node_shared"]
    assert [c.name for c in shared] == ["worker-1", "worker-2", "service-mesh-sidecar"]
    assert all(c.cpus == result.shared_pool for c in shared)


def test_container_scope_pods_under_pod_scope_config() -> None:
    (pod,) = _run("container-scope-mixed").pods
    assert pod.cpu_ids == P("1-2,33-34")
    assert _containers(pod)["infrastructure-sidecar"][:2] == ("pod_exclusive", P("1,33"))
    assert _containers(pod)["worker-1"][:2] == ("pod_shared", P("2,34"))


def test_classic_guaranteed_reuses_init_cpus() -> None:
    (pod,) = _run("classic-guaranteed").pods
    assert pod.cpu_ids == CPUSet()
    containers = _containers(pod)
    assert containers["migrate-schema"] == ("node_exclusive", P("1,33"), P("0"), -1)
    assert containers["web"] == ("node_exclusive", P("1,33"), P("0"), -1)
    assert containers["cache"] == ("node_exclusive", P("32"), P("0"), -1)
    assert [c.exited for c in pod.containers] == [True, False, False]


def test_besteffort_alone_runs_on_the_whole_machine() -> None:
    result = _run("besteffort")
    (pod,) = result.pods
    assert _containers(pod) == {"batch": ("node_shared", TOPOLOGY.all_cpus, CPUSet(), None)}


def test_all_examples_in_one_run() -> None:
    result = simulate(sorted(EXAMPLES.glob("*.yaml")), TOPOLOGY)
    by_name = {p.name: p for p in result.pods}
    assert [p.name for p in result.pods] == sorted(by_name)
    assert not by_name["empty-shared-pool"].admitted
    assert all(p.admitted for n, p in by_name.items() if n != "empty-shared-pool")
    exclusive: list[CPUSet] = []
    for p in result.pods:
        for c in p.containers:
            if c.assignment in ("pod_exclusive", "node_exclusive") and not c.exited:
                exclusive.append(c.cpus)
        for c in p.containers:
            if c.assignment == "node_shared":
                assert c.cpus == result.shared_pool, (p.name, c.name)
    union = CPUSet().union(*exclusive)
    assert len(union) == sum(len(c) for c in exclusive), "an exclusive CPU was handed out twice"
    assert union.is_disjoint(result.shared_pool)
    # NUMA 0 is used up by the earlier pods' memory, so pod-scope-mixed lands on NUMA 1.
    assert by_name["pod-scope-mixed"].memory == (("memory", 4 * GI, (1,)),)
    assert by_name["pod-scope-mixed"].cpu_ids == P("8-9,40-41")
    assert by_name["tightly-coupled-database"].cpu_ids == P("16-19,48-51")
    assert by_name["tightly-coupled-database"].memory == (("memory", 16 * GI, (2,)),)


def test_ml_workload_under_pod_scope() -> None:
    (pod,) = _run("ml-workload").pods
    assert pod.cpu_ids == P("1-2,33-34")
    assert _containers(pod) == {
        "service-mesh-sidecar": ("pod_shared", P("34"), P("0"), 400000),
        "ml-training": ("pod_exclusive", P("1-2,33"), P("0"), -1),
    }


def test_json_shape() -> None:
    doc = _run("pod-scope-mixed", "empty-shared-pool").to_json()
    json.dumps(doc)
    assert set(doc) == {"topology", "config", "shared_pool", "pods", "free_per_numa"}
    assert doc["shared_pool"] == "0,3-32,35-63"
    assert doc["topology"]["num_cpus"] == 64
    ok, rejected = doc["pods"]
    assert set(ok) == {
        "namespace",
        "name",
        "admitted",
        "reason",
        "message",
        "explanation",
        "cpu_ids",
        "memory",
        "containers",
    }
    assert ok["explanation"] == ""
    assert ok["cpu_ids"] == [1, 2, 33, 34]
    assert ok["memory"] == [{"memory_type": "memory", "size": 4 * GI, "numa": [0]}]
    assert ok["containers"][2] == {
        "name": "main-app",
        "assignment": "pod_exclusive",
        "cpus": "1,33",
        "mems": "0",
        "cpu_quota": -1,
    }
    assert rejected["admitted"] is False
    assert rejected["reason"] == "TopologyAffinityError"
    assert rejected["explanation"] == EMPTY_POOL_CAUSE
    assert rejected["containers"] == [] and rejected["cpu_ids"] == []


def test_table() -> None:
    table = _run("pod-scope-mixed", "empty-shared-pool").to_table()
    assert "scope pod" in table
    assert re.search(
        r"plrm-tutorial/pod-scope-mixed +main-app +app +pod_exclusive +1,33 +0 +-1", table
    )
    assert re.search(r"plrm-tutorial/empty-shared-pool +- +- +REJECTED", table)
    assert (
        f"rejected: TopologyAffinityError: {EMPTY_POOL_TM}\n  cause: {EMPTY_POOL_CAUSE}\n" in table
    )
    assert "pod memory 4Gi on NUMA 0" in table
    assert "node shared pool: 0,3-32,35-63" in table


def test_bad_inputs(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: Pod\nmetadata: {name: x}\nspec: {containers: []}\n")
    with pytest.raises(ManifestError, match=re.escape(str(bad))):
        simulate([bad], TOPOLOGY)
    config = parse_config('[cpu_manager]\nreserved_cpus = "100"\n')
    with pytest.raises(ConfigError):
        simulate([EXAMPLES / "besteffort.yaml"], TOPOLOGY, config)


def test_hugepages_pod_on_a_machine_with_hugepages(tmp_path: Path) -> None:
    manifest = tmp_path / "hp.yaml"
    manifest.write_text(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: hp}\nspec:\n"
        "  resources:\n    requests: {hugepages-2Mi: 64Mi}\n"
        "    limits: {cpu: 2, memory: 2Gi, hugepages-2Mi: 64Mi}\n"
        "  containers:\n  - name: app\n"
        "    resources: {limits: {cpu: 1, memory: 1Gi, hugepages-2Mi: 32Mi}}\n"
        "  - name: side\n"
    )
    topology = synthetic_topology(
        "sockets=1,numa_per_socket=2,cores_per_numa=4,threads_per_core=2,"
        "memory_per_numa=8Gi,hugepages_2Mi_per_numa=512"
    )
    (pod,) = simulate([manifest], topology).pods
    assert pod.admitted
    assert pod.cpu_ids == P("1,9")
    assert sorted(pod.memory) == [("hugepages-2Mi", 64 << 20, (0,)), ("memory", 2 * GI, (0,))]
    assert _containers(pod) == {
        "app": ("pod_exclusive", P("1"), P("0"), -1),
        "side": ("pod_shared", P("9"), P("0"), 200000),
    }


@pytest.mark.parametrize("config_name", ["pod-scope", "container-scope"])
def test_free_per_numa_is_the_engines_after_the_admitted_pods(config_name: str) -> None:
    """``free_per_numa`` (JSON and table) equals what an engine that admitted the same pods
    whole (the kubelet's way) has left per NUMA node: the NodeResourceTopology numbers."""
    config = load_config(EXAMPLES / f"{config_name}.toml")
    paths = sorted(EXAMPLES.glob("*.yaml"))
    result = simulate(paths, TOPOLOGY, config)
    want = engine_for(TOPOLOGY, config)
    admitted = {p.uid for p in result.pods if p.admitted}
    assert admitted  # the examples place most pods
    for pod in load_manifests(paths):
        if pod.uid in admitted:
            want.admit_pod(pod)
    assert result.free == free_per_numa(want)
    doc = result.to_json()
    assert list(doc) == ["topology", "config", "shared_pool", "pods", "free_per_numa"]
    assert doc["free_per_numa"] == free_per_numa_to_dict(free_per_numa(want))
    assert json.loads(json.dumps(doc))["free_per_numa"]["0"]["cpu"]["available"] == len(
        TOPOLOGY.numa_nodes[0].cpus & want.cpu_manager.available_cpus()
    )
    table = result.to_table()
    assert "\nfree per NUMA node:\nNUMA  RESOURCE  CAPACITY  ALLOCATABLE  AVAILABLE\n" in table
    for numa in result.free:
        cpu = numa.resource("cpu")
        assert cpu is not None
        row = f"{numa.node}     cpu       {cpu.capacity:<8}  {cpu.allocatable:<11}  {cpu.available}"
        assert row in table


def test_free_per_numa_on_an_empty_run() -> None:
    result = simulate([], TOPOLOGY, Config())
    doc = result.to_json()["free_per_numa"]
    assert sorted(doc) == ["0", "1", "2", "3"]
    assert doc["0"]["cpu"] == {"capacity": 16, "allocatable": 15, "available": 15}
    assert doc["1"]["memory"]["available"] == doc["1"]["memory"]["allocatable"] == 16 * GI


def test_free_per_numa_of_pod_scope_mixed_as_documented() -> None:
    """examples/README.md: NUMA 0 keeps 11 of 15 allocatable CPUs and 11776Mi of 15872Mi."""
    doc = _run("pod-scope-mixed").to_json()["free_per_numa"]
    mi = 1 << 20
    assert doc["0"]["cpu"] == {"capacity": 16, "allocatable": 15, "available": 11}
    assert doc["0"]["memory"] == {
        "capacity": 16 * GI,
        "allocatable": 15872 * mi,
        "available": 11776 * mi,
    }
    assert all(doc[n]["cpu"]["available"] == 16 for n in ("1", "2", "3"))
