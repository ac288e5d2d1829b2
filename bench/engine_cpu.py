"""CPU manager decision latency: ``allocate`` (hint-aligned takeByTopology + state update),
``allocate_pod`` (bubble + exclusive slice + pod shared pool) and
``get_topology_hints`` with 200 live pods, on the kubelet's 256-CPU/8-NUMA EPYC machine and on
the 1,024-CPU/16-NUMA synthetic machine. Each measured admission is removed again, so the node
stays at 200 live pods. Figures are wall-clock milliseconds per call; the first hints call on a
machine also builds its NUMA-mask tables (65,535 masks on 16 NUMA nodes) and is reported apart.
"""

from __future__ import annotations

import gc
import time

from bench.common import main, percentile
from nri_plrm.engine.cpu_manager import CPUManager
from nri_plrm.engine.cpu_options import CPUManagerConfig
from nri_plrm.engine.spec import ContainerSpec, PodSpec, TopologyHint
from nri_plrm.topology.machines import MACHINES
from nri_plrm.topology.model import Topology

LIVE_PODS = 200
SAMPLES = 400
HINT_SAMPLES = 40


def _pod(uid: str, cpus: int) -> PodSpec:
    resources = {"cpu": cpus * 1000, "memory": 1 << 30}
    return PodSpec(uid=uid, containers=(ContainerSpec("c", requests=resources, limits=resources),))


def _pod_level(uid: str, budget: int) -> PodSpec:
    exclusive = {"cpu": (budget // 2) * 1000, "memory": 1 << 30}
    return PodSpec(
        uid=uid,
        containers=(
            ContainerSpec("main", requests=exclusive, limits=exclusive),
            ContainerSpec("sidecar"),
        ),
        requests={"cpu": budget * 1000, "memory": 2 << 30},
        limits={"cpu": budget * 1000, "memory": 2 << 30},
    )


def _numa_hint(topology: Topology, i: int) -> TopologyHint:
    nodes = sorted({info.numa for info in topology.cpu_info.values()})
    return TopologyHint(1 << nodes[i % len(nodes)], True)


def _measure(
    topology: Topology, live_cpus: int, new_cpus: int
) -> tuple[list[float], list[float], float, list[float]]:
    manager = CPUManager(topology, CPUManagerConfig(reserved_cpu_count=2))
    first = _pod("first", new_cpus)
    started = time.perf_counter()
    manager.get_topology_hints(first, first.containers[0])
    first_hints_ms = (time.perf_counter() - started) * 1000
    for i in range(LIVE_PODS):
        pod = _pod(f"live-{i}", live_cpus)
        manager.allocate(pod, pod.containers[0], _numa_hint(topology, i))
    gc.collect()
    allocate_ms: list[float] = []
    for i in range(SAMPLES):
        pod = _pod(f"new-{i}", new_cpus)
        hint = _numa_hint(topology, i)
        started = time.perf_counter()
        manager.allocate(pod, pod.containers[0], hint)
        allocate_ms.append((time.perf_counter() - started) * 1000)
        manager.remove_pod(pod.uid)
    hints_ms: list[float] = []
    for i in range(HINT_SAMPLES):
        pod = _pod(f"hint-{i}", new_cpus)
        started = time.perf_counter()
        manager.get_topology_hints(pod, pod.containers[0])
        hints_ms.append((time.perf_counter() - started) * 1000)
    pod_ms: list[float] = []
    for i in range(SAMPLES):
        pod = _pod_level(f"plrm-{i}", new_cpus)
        hint = _numa_hint(topology, i)
        started = time.perf_counter()
        manager.allocate_pod(pod, hint)
        pod_ms.append((time.perf_counter() - started) * 1000)
        manager.remove_pod(pod.uid)
    return allocate_ms, hints_ms, first_hints_ms, pod_ms


def run() -> dict[str, float]:
    """Latency figures (ms) for 256 and 1,024 CPUs."""
    results: dict[str, float] = {}
    for label, name, live, new in (
        ("256cpu", "topoDualSocketMultiNumaPerSocketHTLarge", 1, 4),
        ("1024cpu", "synthetic1024", 4, 8),
    ):
        allocate_ms, hints_ms, first_hints_ms, pod_ms = _measure(MACHINES[name], live, new)
        results[f"cpu_allocate_p50_ms_{label}"] = percentile(allocate_ms, 50)
        results[f"cpu_allocate_p99_ms_{label}"] = percentile(allocate_ms, 99)
        results[f"cpu_allocate_pod_p50_ms_{label}"] = percentile(pod_ms, 50)
        results[f"cpu_allocate_pod_p99_ms_{label}"] = percentile(pod_ms, 99)
        results[f"cpu_hints_p50_ms_{label}"] = percentile(hints_ms, 50)
        results[f"cpu_hints_p99_ms_{label}"] = percentile(hints_ms, 99)
        results[f"cpu_hints_first_call_ms_{label}"] = first_hints_ms
    return results


if __name__ == "__main__":
    main(run)
