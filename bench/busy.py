"""Busy-node benchmark (issue 25): pod starts on a node with 100 and 300 running BestEffort
containers, with containerd's cost of applying updates modelled.

containerd serializes NRI events node-wide and applies the ``update`` entries of an event's
reply (a runc update each) before the event returns; a plugin's ``UpdateContainers`` is applied
under the same lock. The runtime simulator models that (``NRISimulator(update_cost=...)``,
``CONTAINERD_UPDATE_COST``: 23 ms per update, calibrated on real containerd, see
``tests/support/nrisim/sim.py``). The plugin runs in its own process on the 256-CPU machine of
``bench.plugin`` (``BENCH_PLUGIN_CODE=DIR`` runs another checkout's ``nri_plrm``, as there).

Each sample starts a Guaranteed pod of one 1-CPU container the way the kubelet does
(RunPodSandbox, CreateContainer, PostCreateContainer, StartContainer, PostStartContainer; every
event waits for the lock), then removes it (StopContainer, RemoveContainer, StopPodSandbox,
RemovePodSandbox) and waits until the node settled: every BestEffort container back on the
whole shared pool, no ``UpdateContainers`` for ``QUIET`` seconds. Each pod start thus finds
every BestEffort container on the CPU it takes. The pool's growth after the removal (and, on
samples that do not measure the lag, the rest of the shrink) is applied at no cost: nothing
measured overlaps with it, and at 23 ms per update it would only make the run longer.

- ``create_container_p50_ms_busy_100`` / ``..._p99_...`` (``_busy_300``): the CreateContainer
  as the runtime lives it: waiting for the lock, the plugin's reply, applying the reply's
  updates (``Record.runtime_seconds``); ``SAMPLES`` pod starts per node size.
- ``pod_start_p50_ms_busy_100`` / ``..._p99_...``: from CreateContainer sent until
  PostStartContainer returned (what ``crictl create`` + ``start`` measured on real containerd).
- ``pool_isolation_lag_p50_ms_busy_100`` / ``..._p99_...``: from the CreateContainer reply until
  every BestEffort container's applied cpuset excludes the new container's CPU, on every
  ``LAG_EVERY``-th sample of the 100-container node (each one costs about 100 x 23 ms).
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
from typing import Any

from bench.common import main, percentile
from bench.plugin import PluginChild, _connect, _runtime_collector_held, best_effort

SAMPLES = {100: 48, 300: 16}
"""Pod starts per node size (BestEffort containers running)."""
LAG_EVERY = 8
"""Every this many samples of the 100-container node (6 of 48) the lag is measured at full
cost; the others measure the create and the pod start only."""
QUIET = 0.2
"""Seconds without an ``UpdateContainers`` after which the node counts as settled."""
WAIT_LIMIT = 60.0
"""Seconds a settle or a lag may take before the benchmark gives up."""
MI = 1 << 20


def guaranteed(i: int) -> Any:
    """A Guaranteed pod with one container of one exclusive CPU."""
    from nri_plrm.engine.spec import ContainerSpec, PodSpec

    one = {"cpu": 1000, "memory": 256 * MI}
    return PodSpec(
        uid=f"busy-g-{i}",
        name=f"busy-g-{i}",
        containers=(ContainerSpec("main", requests=one, limits=one),),
    )


class Node:
    """The simulator and its container table, the BestEffort containers and their pool."""

    def __init__(self, sim: Any, rt: Any) -> None:
        from nri_plrm.base.cpuset import CPUSet

        self.sim = sim
        self.rt = rt
        self.best_effort: list[str] = []
        self.pool = ""
        self._parsed: dict[str, CPUSet] = {}

    def cpus(self, text: str) -> Any:
        parsed = self._parsed.get(text)
        if parsed is None:
            from nri_plrm.base.cpuset import CPUSet

            parsed = self._parsed[text] = CPUSet.parse(text)
        return parsed

    async def start_pod(self, spec: Any) -> tuple[Any, str, Any, float]:
        """The kubelet's pod start: the pod, its container's id, the CreateContainer record and
        the seconds from CreateContainer sent until PostStartContainer returned."""
        from plrm_runtime import call

        from nri_plrm.proto import nri_api_pb2 as api

        sim, rt = self.sim, self.rt
        pod = await rt.run_pod(spec)
        ctr = spec.containers[0]
        first = len(sim.records)
        began = time.perf_counter()
        await rt.create(pod, spec, ctr)
        cid = rt.id_of(pod, ctr.name)
        msg = rt.containers[cid].msg
        await call(sim.post_create_container(pod, msg))
        msg.state = api.CONTAINER_RUNNING
        await call(sim.start_container(pod, msg))
        await call(sim.post_start_container(pod, msg))
        seconds = time.perf_counter() - began
        create = next(r for r in sim.records[first:] if r.method == "CreateContainer")
        if create.error is not None or create.reply is None:
            raise RuntimeError(f"CreateContainer of {spec.name} failed: {create.error}")
        return pod, cid, create, seconds

    async def grow(self, total: int) -> None:
        """Run BestEffort pods (one container each) until ``total`` run, then settle."""
        self.sim.update_cost = 0.0
        for i in range(len(self.best_effort), total):
            spec = best_effort(i)
            _, cid, _, _ = await self.start_pod(spec)
            self.best_effort.append(cid)
        self.pool = ""
        self.pool = await self.settle()

    async def settle(self) -> str:
        """Wait until no ``UpdateContainers`` came for ``QUIET`` seconds, the lock is free and
        every BestEffort container has one cpuset (``pool`` when known); return it."""
        sim = self.sim
        deadline = time.perf_counter() + WAIT_LIMIT
        seen, quiet_since = len(sim.unsolicited), time.perf_counter()
        while True:
            await asyncio.sleep(0.01)
            now = time.perf_counter()
            if len(sim.unsolicited) != seen or sim.node_lock.locked():
                seen, quiet_since = len(sim.unsolicited), now
            pools = {sim.applied[c].cpus if c in sim.applied else "" for c in self.best_effort}
            settled = len(pools) == 1 and pools != {""} and (not self.pool or pools == {self.pool})
            if settled and now - quiet_since >= QUIET:
                return pools.pop()
            if now > deadline:
                raise RuntimeError(f"node not settled after {WAIT_LIMIT:g} s: pools {pools}")

    async def isolated(self, exclusive: Any, since: float) -> float:
        """Wait until no BestEffort container's applied cpuset holds ``exclusive``; the seconds
        from ``since`` until the last of them was applied."""
        applied = self.sim.applied
        deadline = time.perf_counter() + WAIT_LIMIT
        while True:
            last = [applied[c] for c in self.best_effort]
            if all(not (self.cpus(a.cpus) & exclusive) for a in last):
                return max(0.0, max(a.at for a in last) - since)
            if time.perf_counter() > deadline:
                raise RuntimeError(f"shared containers still on {exclusive} after {WAIT_LIMIT} s")
            await asyncio.sleep(0.005)

    async def sample(self, i: int, lag: bool) -> tuple[float, float, float | None]:
        """One pod start on the settled node: the CreateContainer and pod start seconds and,
        when ``lag``, the isolation lag; the pod is removed and the node settled again."""
        from nrisim import CONTAINERD_UPDATE_COST

        self.sim.update_cost = CONTAINERD_UPDATE_COST
        pod, cid, create, pod_start = await self.start_pod(guaranteed(i))
        exclusive = self.cpus(self.sim.applied[cid].cpus)
        if len(exclusive) != 1 or not exclusive <= self.cpus(self.pool):
            raise RuntimeError(f"sample {i}: {exclusive} is not one CPU of the pool {self.pool}")
        seconds = await self.isolated(exclusive, create.replied_at) if lag else None
        self.sim.update_cost = 0.0
        await self.rt.remove_pod(pod)
        await self.settle()
        return create.runtime_seconds, pod_start, seconds


async def _measure(tmp: str) -> dict[int, tuple[list[float], list[float], list[float]]]:
    from nrisim import NRISimulator
    from plrm_runtime import FakeRuntime

    sock = os.path.join(tmp, "busy.sock")
    sim = await NRISimulator.start(sock, request_timeout=10.0, update_cost=0.0)
    plugin = PluginChild(sock, os.path.join(tmp, "busy-state"), serve="serve_logged", quiet=True)
    figures: dict[int, tuple[list[float], list[float], list[float]]] = {}
    try:
        await _connect(sim, plugin)
        node = Node(sim, FakeRuntime(sim))
        first = 0
        for size, samples in SAMPLES.items():
            await node.grow(size)
            creates: list[float] = []
            starts: list[float] = []
            lags: list[float] = []
            with _runtime_collector_held():
                for n in range(samples):
                    lag = size == 100 and n % LAG_EVERY == 0
                    create, start, seconds = await node.sample(first + n, lag)
                    creates.append(create)
                    starts.append(start)
                    if seconds is not None:
                        lags.append(seconds)
            first += samples
            figures[size] = (creates, starts, lags)
        return figures
    finally:
        plugin.kill()
        await sim.close()


def run() -> dict[str, float]:
    """Measure and return the figures (milliseconds)."""
    with tempfile.TemporaryDirectory(prefix="nri-plrm-bench-") as tmp:
        figures = asyncio.run(_measure(tmp))
    results: dict[str, float] = {}
    for size, (creates, starts, lags) in figures.items():
        named = {"create_container": creates, "pod_start": starts, "pool_isolation_lag": lags}
        for name, samples in named.items():
            if samples and (name == "create_container" or size == 100):
                for q in (50, 99):
                    results[f"{name}_p{q}_ms_busy_{size}"] = percentile(samples, q) * 1000
    return results


if __name__ == "__main__":
    main(run)
