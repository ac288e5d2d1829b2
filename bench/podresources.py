"""PodResources List/Get latency over the unix socket and /metrics exposition time, with
500 pods of 3 containers each (a busy node), on a 256-CPU machine.

``list`` figures are steady state (the reply is cached until the plugin publishes a new
snapshot); ``list_rebuild`` is the cost of building the reply after a change."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable

import grpc
from static_view import StaticView

from bench.common import main, percentile
from nri_plrm.base.cpuset import CPUSet
from nri_plrm.engine.spec import AssignmentType, ContainerAssignment, MemoryBlock
from nri_plrm.ledger.view import ContainerView, PodView
from nri_plrm.observability.metrics import Metrics
from nri_plrm.podresources import report
from nri_plrm.podresources.server import PodResourcesServer, PodResourcesService
from nri_plrm.topology.synthetic import synthetic_topology
from nri_plrm.util.ratelimit import TokenBucket

PODS = 500
ROUNDS = 200
SPEC = "sockets=2,numa_per_socket=4,cores_per_numa=16,threads_per_core=2,memory_per_numa=64Gi"


def _view() -> StaticView:
    pods = []
    for i in range(PODS):
        base = (i % 120) * 2
        exclusive = CPUSet([base + 1])
        pool = CPUSet([base + 2])
        block = MemoryBlock((base * 8 // 256,), "memory", 1 << 30)
        pods.append(
            PodView(
                uid=f"uid-{i}",
                namespace="bench",
                name=f"pod-{i}",
                containers=(
                    ContainerView(
                        "main",
                        ContainerAssignment(
                            AssignmentType.POD_EXCLUSIVE, exclusive, CPUSet([0]), (block,)
                        ),
                    ),
                    ContainerView(
                        "sidecar-a", ContainerAssignment(AssignmentType.POD_SHARED, pool, CPUSet())
                    ),
                    ContainerView(
                        "sidecar-b", ContainerAssignment(AssignmentType.POD_SHARED, pool, CPUSet())
                    ),
                ),
                cpus=exclusive | pool,
                memory=(block,),
            )
        )
    return StaticView(tuple(pods), CPUSet.from_range(1, 255))


def _timed(fn: Callable[[], object], rounds: int) -> list[float]:
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1000)
    return samples


def run() -> dict[str, float]:
    """Measure List, Get and the metrics exposition."""
    view = _view()
    with tempfile.TemporaryDirectory() as tmp:
        sock = f"{tmp}/pr.sock"
        service = PodResourcesService(view, TokenBucket(qps=1e9, burst=1_000_000))
        server = PodResourcesServer(service, sock)
        server.start()
        channel = grpc.insecure_channel(f"unix:{sock}")
        try:
            list_call = channel.unary_unary("/v1.PodResourcesLister/List")
            get_call = channel.unary_unary("/v1.PodResourcesLister/Get")
            get_request = b"\x0a\x07pod-499\x12\x05bench"
            list_call(b"", timeout=10)
            list_ms = _timed(lambda: list_call(b"", timeout=10), ROUNDS)
            get_ms = _timed(lambda: get_call(get_request, timeout=10), ROUNDS)
        finally:
            channel.close()
            server.stop()
    rebuild_ms = _timed(lambda: report.list_response(view), 20)
    metrics = Metrics()
    metrics.attach_view(view, synthetic_topology(SPEC))
    scrape_ms = _timed(metrics.exposition, 50)
    return {
        "podresources_list_500pods_p50_ms": percentile(list_ms, 50),
        "podresources_list_500pods_p99_ms": percentile(list_ms, 99),
        "podresources_get_500pods_p99_ms": percentile(get_ms, 99),
        "podresources_list_rebuild_500pods_p50_ms": percentile(rebuild_ms, 50),
        "metrics_exposition_500pods_p99_ms": percentile(scrape_ms, 99),
    }


if __name__ == "__main__":
    main(run)
