"""Cold Synchronize benchmark: a plugin without state meets a full node (issue 12, finding 7;
issue 28, finding 8).

- ``synchronize_cold_5000_ms``: the Synchronize (every page) a plugin started with an empty
  state directory answers for 1,000 pods and 5,000 containers on a 256-CPU machine: 100
  pod-level pods (a 2-CPU budget, one exclusive container and four sidecars on the pod shared
  pool) and 900 BestEffort pods of five containers. Target: under 500 ms on 2 cores.
- ``synchronize_cold_20000_ms``: the same for 10,000 pods and 20,000 containers: 100 pod-level
  pods (one exclusive container and one sidecar) and 9,900 BestEffort pods of two containers.
  Target: at most 1,500 ms on 2 cores, so a restart on a full node never meets containerd's
  2 s deadline.

Every container runs with the cpuset a previous life of the plugin gave it (so the plugin adopts
them all). The plugin runs in its own process behind the wire stub, as in production; each
figure is the median of three cold starts.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import tempfile
from dataclasses import dataclass, replace
from typing import Any

from bench.common import main
from bench.plugin import CONFIG, SPEC_256, PluginChild, _connect, best_effort, pod_level

RUNS = 3


@dataclass(frozen=True)
class Node:
    """A full node: ``pod_level`` pods of one exclusive container and ``sidecars`` sidecars,
    ``best_effort`` pods of ``containers`` containers each."""

    figure: str
    pod_level: int
    sidecars: int
    best_effort: int
    containers: int

    @property
    def total_containers(self) -> int:
        return self.pod_level * (1 + self.sidecars) + self.best_effort * self.containers


NODES = (
    Node("synchronize_cold_5000_ms", pod_level=100, sidecars=4, best_effort=900, containers=5),
    Node("synchronize_cold_20000_ms", pod_level=100, sidecars=1, best_effort=9900, containers=2),
)


class _Direct:
    """The runtime side of ``FakeRuntime`` calling an in-process plugin (no wire), to put the
    node in the state a previous life of the plugin left it in quickly."""

    def __init__(self, plugin: Any) -> None:
        self.plugin = plugin
        self.unsolicited: list[Any] = []

    async def run_pod_sandbox(self, pod: Any) -> None:
        await self.plugin.run_pod_sandbox(pod)

    async def create_container(self, pod: Any, ctr: Any) -> Any:
        from nri_plrm.proto import nri_api_pb2 as api

        adjust, updates = await self.plugin.create_container(pod, ctr)
        return api.CreateContainerResponse(adjust=adjust, update=updates)

    async def start_container(self, pod: Any, ctr: Any) -> None:
        return None

    async def post_start_container(self, pod: Any, ctr: Any) -> None:
        self.plugin.post_start_container(pod, ctr)


async def _node(node: Node) -> tuple[list[Any], list[Any]]:
    """What Synchronize reports on ``node``."""
    from plrm_runtime import FakeRuntime

    from nri_plrm.config.file import parse_config
    from nri_plrm.engine.facade import Engine
    from nri_plrm.ledger import NodeLedger
    from nri_plrm.plugin.handlers import Plugin
    from nri_plrm.proto import nri_api_pb2 as api
    from nri_plrm.topology.synthetic import synthetic_topology

    engine = Engine(synthetic_topology(SPEC_256), parse_config(CONFIG).engine_config())
    rt = FakeRuntime(_Direct(Plugin(NodeLedger(engine))))
    for i in range(node.pod_level):
        await rt.launch(pod_level(i, node.sidecars))
    for i in range(node.best_effort):
        spec = best_effort(i)
        pod = await rt.run_pod(spec)
        for k in range(node.containers):
            ctr = replace(spec.containers[0], name=f"c{k}")
            await rt.create(pod, replace(spec, containers=(ctr,)), ctr)
    for rc in rt.containers.values():
        rc.msg.state = api.CONTAINER_RUNNING
    pods, ctrs = rt.sync_lists()
    expected = (node.pod_level + node.best_effort, node.total_containers)
    assert (len(pods), len(ctrs)) == expected, (len(pods), len(ctrs))
    return pods, ctrs


async def _cold(tmp: str, pods: list[Any], ctrs: list[Any]) -> list[float]:
    from nrisim import NRISimulator

    sock = os.path.join(tmp, "cold.sock")
    sim = await NRISimulator.start(sock, request_timeout=10.0, pods=pods, containers=ctrs)
    figures = []
    try:
        old = None
        for run in range(RUNS):
            start = len(sim.records)
            state = os.path.join(tmp, f"state-{run}")
            plugin = PluginChild(sock, state, serve="serve_logged", quiet=True)
            try:
                old = await _connect(sim, plugin, old)
            finally:
                plugin.kill()
            pages = [r for r in sim.records[start:] if r.method == "Synchronize"]
            assert pages and all(r.error is None for r in pages), pages
            figures.append(sum(r.seconds for r in pages))
    finally:
        await sim.close()
    return figures


def run() -> dict[str, float]:
    """Measure and return the figures (milliseconds)."""
    results: dict[str, float] = {}
    for node in NODES:
        pods, ctrs = asyncio.run(_node(node))
        with tempfile.TemporaryDirectory(prefix="nri-plrm-bench-") as tmp:
            figures = asyncio.run(_cold(tmp, pods, ctrs))
        results[node.figure] = statistics.median(figures) * 1000
    return results


if __name__ == "__main__":
    main(run)
