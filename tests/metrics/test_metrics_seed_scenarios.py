"""Acceptance: /metrics after the seed scenarios, with the kubelet's names, labels and counts.

The plugin runs behind the real wire stub against nrisim, in its kubelet-exact mode (full pod
specs known, as with the API pod cache), so admission and allocation happen as in the kubelet.
"""

from __future__ import annotations

import asyncio
import urllib.request
from pathlib import Path

import pytest
from plrm_harness import serve
from prometheus_client.parser import text_string_to_metric_families

from nri_plrm.config.file import parse_config
from nri_plrm.engine.facade import Engine
from nri_plrm.ledger import NodeLedger
from nri_plrm.observability.metrics import Metrics
from nri_plrm.observability.metrics_server import MetricsServer
from nri_plrm.plugin.handlers import Plugin
from nri_plrm.podsource.base import StaticPodSpecSource
from nri_plrm.topology.machines import load_topology
from nri_plrm.topology.synthetic import DEFAULT_SPEC
from nri_plrm.translate.manifest_to_pod import load_manifests

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(port: int) -> Samples:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
        text = reply.read().decode()
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def run_seeds(tmp: Path, scope: str, names: list[str]) -> tuple[Samples, dict[str, bool]]:
    config = parse_config(f'[topology_manager]\nscope = "{scope}"\n')
    topology = load_topology(DEFAULT_SPEC)
    pods = load_manifests([EXAMPLES / f"{n}.yaml" for n in names])
    metrics = Metrics()
    plugin = Plugin(
        NodeLedger(Engine(topology, config.engine_config()), observer=metrics),
        pod_specs=StaticPodSpecSource(pods),
        metrics=metrics,
    )
    metrics.attach_view(plugin.ledger, topology)
    http = MetricsServer(metrics, "127.0.0.1:0")
    http.start()
    admitted: dict[str, bool] = {}

    async def scenario() -> Samples:
        async with serve(plugin, str(tmp / "nri.sock")) as session:
            for pod in pods:
                try:
                    await session.runtime.launch(pod)
                    admitted[pod.name] = True
                except Exception:  # the plugin's NRI error, raised by the simulator
                    admitted[pod.name] = False
            return await asyncio.to_thread(scrape, http.port)

    try:
        return asyncio.run(scenario()), admitted
    finally:
        http.stop()


def seed_metrics(samples: Samples) -> dict[str, float]:
    """The three seed metrics, keyed ``name{label=value,...}`` (sorted labels) without the
    common ``resource_manager_`` prefix."""
    names = (
        "resource_manager_allocations_total",
        "resource_manager_allocation_errors_total",
        "resource_manager_container_assignments",
    )
    out = {}
    for (name, labels), v in samples.items():
        if name in names:
            short = name.removeprefix("resource_manager_")
            out[short + "{" + ",".join(f"{k}={v}" for k, v in sorted(labels)) + "}"] = v
    return out


@pytest.mark.timeout(120)
def test_pod_scope_seed_metrics(tmp_path: Path) -> None:
    samples, admitted = run_seeds(
        tmp_path, "pod", ["pod-scope-mixed", "tightly-coupled-database", "empty-shared-pool"]
    )
    assert admitted == {
        "pod-scope-mixed": True,
        "tightly-coupled-database": True,
        "empty-shared-pool": False,
    }
    # pod-scope-mixed: main-app exclusive + 2 sidecars in the pod shared pool; the database pod:
    # database exclusive + 2 sidecars; every assignment AllocatePod writes counts source=pod.
    # Memory: the two exclusive containers got NUMA blocks. empty-shared-pool is refused at
    # topology admission, before any allocation.
    assert seed_metrics(samples) == {
        "allocations_total{resource_name=cpu,source=pod}": 6,
        "allocations_total{resource_name=cpu,source=node}": 0,
        "allocations_total{resource_name=memory,source=pod}": 2,
        "allocations_total{resource_name=memory,source=node}": 0,
        "allocation_errors_total{resource_name=cpu,source=pod}": 0,
        "allocation_errors_total{resource_name=cpu,source=node}": 0,
        "allocation_errors_total{resource_name=memory,source=pod}": 0,
        "allocation_errors_total{resource_name=memory,source=node}": 0,
        "container_assignments{assignment_type=node_exclusive,resource_name=cpu}": 0,
        "container_assignments{assignment_type=pod_exclusive,resource_name=cpu}": 2,
        "container_assignments{assignment_type=pod_shared,resource_name=cpu}": 4,
    }
    assert samples[("topology_manager_admission_requests_total", frozenset())] == 3
    reason = frozenset({("reason", "TopologyAffinityError")})
    assert samples[("topology_manager_admission_errors_total", reason)] == 1
    assert samples[("nri_plrm_pod_shared_pools", frozenset())] == 2
    # 2 CPUs left in pod-scope-mixed's pool, 2 in the database pod's
    assert samples[("nri_plrm_pod_shared_pool_size_millicores", frozenset())] == 4000


@pytest.mark.timeout(120)
def test_container_scope_seed_metrics(tmp_path: Path) -> None:
    samples, admitted = run_seeds(tmp_path, "container", ["container-scope-mixed", "ml-workload"])
    assert admitted == {"container-scope-mixed": True, "ml-workload": True}
    # infrastructure-sidecar (2 CPUs) and ml-training (3 CPUs) are exclusive from the node pool;
    # the workers and the service mesh sidecar run in the node shared pool (not counted).
    assert seed_metrics(samples) == {
        "allocations_total{resource_name=cpu,source=pod}": 0,
        "allocations_total{resource_name=cpu,source=node}": 2,
        "allocations_total{resource_name=memory,source=pod}": 0,
        "allocations_total{resource_name=memory,source=node}": 2,
        "allocation_errors_total{resource_name=cpu,source=pod}": 0,
        "allocation_errors_total{resource_name=cpu,source=node}": 0,
        "allocation_errors_total{resource_name=memory,source=pod}": 0,
        "allocation_errors_total{resource_name=memory,source=node}": 0,
        "container_assignments{assignment_type=node_exclusive,resource_name=cpu}": 2,
        "container_assignments{assignment_type=pod_exclusive,resource_name=cpu}": 0,
        "container_assignments{assignment_type=pod_shared,resource_name=cpu}": 0,
    }
    assert samples[("cpu_manager_exclusive_cpu_allocation_count", frozenset())] == 5
