"""The seed documents' example pods as engine ``PodSpec`` values, plus the machine they run on.

Tutorial (``seeds/001_*``): ``pod-scope-mixed``, ``empty-shared-pool``, ``container-scope-mixed``.
Blog (``seeds/002_*``): ``tightly-coupled-database``, ``ml-workload``. Containers are in spec
order; sidecars are restartable init containers, as in the manifests.

:func:`seed_config` gives the engine settings the tests use: ``reservedSystemCPUs`` count 1
(CPU 0) and 1Gi of reserved memory on NUMA node 0.
"""

from __future__ import annotations

from collections.abc import Callable

from nri_plrm.engine.cpu_options import CPUManagerConfig
from nri_plrm.engine.facade import EngineConfig
from nri_plrm.engine.memory_state import MemoryManagerConfig
from nri_plrm.engine.spec import ContainerKind, ContainerSpec, PodSpec
from nri_plrm.engine.topology_manager import TopologyManagerConfig
from nri_plrm.topology.model import Topology
from nri_plrm.topology.synthetic import DEFAULT_SPEC, synthetic_topology

GI = 1024**3
SIDECAR = ContainerKind.SIDECAR


def _exclusive(
    name: str, cpus: int, memory_gi: int, kind: ContainerKind = ContainerKind.APP
) -> ContainerSpec:
    res = {"cpu": cpus * 1000, "memory": memory_gi * GI}
    return ContainerSpec(name, kind, requests=res, limits=res)


def _budget(cpus: int, memory_gi: int) -> dict[str, int]:
    return {"cpu": cpus * 1000, "memory": memory_gi * GI}


def pod_scope_mixed(uid: str = "pod-scope-mixed", namespace: str = "default") -> PodSpec:
    """Budget 4 CPU / 4Gi; main-app 2 CPU / 2Gi exclusive; two shared sidecars."""
    return PodSpec(
        uid=uid,
        namespace=namespace,
        name="pod-scope-mixed",
        init_containers=(
            ContainerSpec("metrics-sidecar", SIDECAR),
            ContainerSpec("logging-sidecar", SIDECAR),
        ),
        containers=(_exclusive("main-app", 2, 2),),
        requests=_budget(4, 4),
        limits=_budget(4, 4),
    )


def empty_shared_pool(uid: str = "empty-shared-pool") -> PodSpec:
    """Budget 4 CPU / 4Gi; metrics-sidecar 1 and main-app 3 exclusive; logging-sidecar shared."""
    return PodSpec(
        uid=uid,
        name="empty-shared-pool",
        init_containers=(
            _exclusive("metrics-sidecar", 1, 1, SIDECAR),
            ContainerSpec("logging-sidecar", SIDECAR),
        ),
        containers=(_exclusive("main-app", 3, 3),),
        requests=_budget(4, 4),
        limits=_budget(4, 4),
    )


def container_scope_mixed(uid: str = "container-scope-mixed") -> PodSpec:
    """Budget 4 CPU / 4Gi; infrastructure-sidecar 2 CPU / 2Gi exclusive; two shared workers."""
    return PodSpec(
        uid=uid,
        name="container-scope-mixed",
        init_containers=(_exclusive("infrastructure-sidecar", 2, 2, SIDECAR),),
        containers=(ContainerSpec("worker-1"), ContainerSpec("worker-2")),
        requests=_budget(4, 4),
        limits=_budget(4, 4),
    )


def tightly_coupled_database(uid: str = "tightly-coupled-database") -> PodSpec:
    """Budget 8 CPU / 16Gi; database 6 CPU / 12Gi exclusive; two shared sidecars."""
    return PodSpec(
        uid=uid,
        name="tightly-coupled-database",
        init_containers=(
            ContainerSpec("metrics-exporter", SIDECAR),
            ContainerSpec("backup-agent", SIDECAR),
        ),
        containers=(_exclusive("database", 6, 12),),
        requests=_budget(8, 16),
        limits=_budget(8, 16),
    )


def ml_workload(uid: str = "ml-workload") -> PodSpec:
    """Budget 4 CPU / 8Gi; ml-training 3 CPU / 6Gi exclusive; a shared service-mesh sidecar."""
    return PodSpec(
        uid=uid,
        name="ml-workload",
        init_containers=(ContainerSpec("service-mesh-sidecar", SIDECAR),),
        containers=(_exclusive("ml-training", 3, 6),),
        requests=_budget(4, 8),
        limits=_budget(4, 8),
    )


SEED_PODS: dict[str, Callable[[], PodSpec]] = {
    "pod-scope-mixed": pod_scope_mixed,
    "empty-shared-pool": empty_shared_pool,
    "container-scope-mixed": container_scope_mixed,
    "tightly-coupled-database": tightly_coupled_database,
    "ml-workload": ml_workload,
}


def seed_topology() -> Topology:
    """The bundled default machine: 2 sockets, 4 NUMA nodes, 32 cores SMT2, 16Gi per node.

    CPU n and n+32 are siblings; NUMA node k holds CPUs 8k..8k+7 and 32+8k..32+8k+7.
    """
    return synthetic_topology(DEFAULT_SPEC)


def seed_config(policy: str, scope: str) -> EngineConfig:
    """Engine settings for the seed tests: 1 reserved CPU, 1Gi reserved memory on NUMA 0."""
    return EngineConfig(
        topology_manager=TopologyManagerConfig(policy, scope),
        cpu_manager=CPUManagerConfig(reserved_cpu_count=1),
        memory_manager=MemoryManagerConfig(reserved={0: {"memory": GI}}),
    )
