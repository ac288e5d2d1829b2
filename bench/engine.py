"""Engine latency: admit-and-allocate per container with 200 live pods, and state size.

Machines: the kubelet's 256-CPU / 8-NUMA EPYC layout (``topoDualSocketMultiNumaPerSocketHTLarge``
with 64Gi per NUMA node) and the 1,024-CPU / 16-NUMA synthetic machine. Topology policy
``restricted``, scope ``pod``, one reserved CPU. The workload keeps 200 pods alive and replaces
the oldest pod with a new one, the way the NRI plugin sees them: ``admit_sandbox`` with the
budget, then ``add_container`` per container. A quarter of the pods carry pod-level resources
(2-CPU budget: one 1-CPU exclusive container and one shared sidecar); the others are classic
Guaranteed 1-CPU pods with the aggregate as sandbox hint. Each sample is one container's
``add_container`` plus its share of the pod's ``admit_sandbox``, measured as CPU time of the
calling thread (``time.thread_time``) so that other processes on a busy CI machine do not
inflate it; the ``..._wall_...`` figures are the same samples in wall-clock time.
"""

from __future__ import annotations

import json
import time

from bench.common import main, percentile
from nri_plrm.base.cpuset import CPUSet
from nri_plrm.engine.cpu_options import CPUManagerConfig
from nri_plrm.engine.facade import Engine, EngineConfig
from nri_plrm.engine.memory_state import MemoryManagerConfig
from nri_plrm.engine.spec import ContainerSpec, PodSpec
from nri_plrm.engine.topology_manager import TopologyManagerConfig
from nri_plrm.topology.machines import MACHINES
from nri_plrm.topology.model import Topology
from nri_plrm.topology.synthetic import with_memory

GI = 1024**3
LIVE_PODS = 200
MEASURED_PODS = 300


def _config(topology: Topology) -> EngineConfig:
    return EngineConfig(
        topology_manager=TopologyManagerConfig(
            "restricted", "pod", max_allowable_numa_nodes=max(8, topology.num_numa_nodes)
        ),
        cpu_manager=CPUManagerConfig(reserved_cpus=CPUSet([0])),
        memory_manager=MemoryManagerConfig(reserved={0: {"memory": GI}}),
    )


def _pod(i: int) -> tuple[PodSpec, tuple[ContainerSpec, ...], dict[str, int] | None]:
    one = {"cpu": 1000, "memory": GI}
    if i % 4 == 0:
        budget = {"cpu": 2000, "memory": 2 * GI}
        pod = PodSpec(uid=f"pod-{i}", name=f"pod-{i}", requests=budget, limits=budget)
        containers = (ContainerSpec("sidecar"), ContainerSpec("main", requests=one, limits=one))
        return pod, containers, None
    pod = PodSpec(uid=f"pod-{i}", name=f"pod-{i}")
    return pod, (ContainerSpec("main", requests=one, limits=one),), one


def _place(engine: Engine, i: int, samples: list[tuple[float, float]] | None) -> None:
    pod, containers, aggregate = _pod(i)
    cpu, wall = time.thread_time(), time.perf_counter()
    engine.admit_sandbox(pod, aggregate)
    sandbox_cpu, sandbox_wall = time.thread_time() - cpu, time.perf_counter() - wall
    for c in containers:
        cpu, wall = time.thread_time(), time.perf_counter()
        engine.add_container(pod, c)
        took_cpu = time.thread_time() - cpu + sandbox_cpu / len(containers)
        took_wall = time.perf_counter() - wall + sandbox_wall / len(containers)
        if samples is not None:
            samples.append((took_cpu * 1000, took_wall * 1000))


def measure(topology: Topology) -> tuple[list[tuple[float, float]], Engine]:
    """Per-container (cpu, wall) latencies in ms, steady state with LIVE_PODS pods; the engine."""
    engine = Engine(topology, _config(topology))
    for i in range(LIVE_PODS):
        _place(engine, i, None)
    samples: list[tuple[float, float]] = []
    for i in range(LIVE_PODS, LIVE_PODS + MEASURED_PODS):
        engine.remove_pod(f"pod-{i - LIVE_PODS}")
        _place(engine, i, samples)
    return samples, engine


def run() -> dict[str, float]:
    """The figures of this benchmark."""
    epyc = with_memory(MACHINES["topoDualSocketMultiNumaPerSocketHTLarge"], {"memory": 64 * GI})
    samples_256, engine = measure(epyc)
    state_kb = len(json.dumps(engine.snapshot()).encode()) / 1024
    samples_1024, _ = measure(MACHINES["synthetic1024"])
    out: dict[str, float] = {}
    for label, samples in (("256cpu", samples_256), ("1024cpu", samples_1024)):
        cpu = [c for c, _ in samples]
        wall = [w for _, w in samples]
        out[f"engine_p50_ms_{label}"] = percentile(cpu, 50)
        out[f"engine_p99_ms_{label}"] = percentile(cpu, 99)
        out[f"engine_wall_p50_ms_{label}"] = percentile(wall, 50)
        out[f"engine_wall_p99_ms_{label}"] = percentile(wall, 99)
    out["engine_state_kb_200pods"] = state_kb
    return out


if __name__ == "__main__":
    main(run)
