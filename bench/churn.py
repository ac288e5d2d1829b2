"""Sustained churn: pods created and deleted through the NRI wire as fast as the plugin allows.

The daemon (``python -m nri_plrm.daemon.service``, journal and checkpoints on disk, metrics and
PodResources
servers on) runs on the fake 256-CPU machine. The simulator keeps LIVE pods alive and replaces
the oldest one with a new one, PODS times; pods cycle through four shapes (pod-level with an
exclusive main and a shared sidecar, classic Guaranteed with an init container, Burstable,
BestEffort). Every request of the run is timed by the simulator.

- ``churn_pods_per_s``: pods created and deleted per second (full life: RunPodSandbox,
  containers created/started/stopped/removed, sandbox stopped/removed);
- ``churn_create_container_p50_ms`` / ``..._p99_ms``: CreateContainer round trips under churn;
- ``churn_run_pod_sandbox_p99_ms``, ``churn_remove_container_p99_ms``: the other decisions;
- ``churn_request_max_ms``: the slowest request of the run (the runtime's budget is 2 s).
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from bench.common import main, percentile
from bench.startup import Daemon, check_exit, daemon_config, stop_daemon, write_machine
from nri_plrm.engine.spec import ContainerKind, ContainerSpec, PodSpec
from nri_plrm.proto import nri_api_pb2 as api

if TYPE_CHECKING:
    from nrisim.sim import Record


GI = 1 << 30
LIVE = 40
PODS = 400


def shape(i: int) -> PodSpec:
    """Pod ``i`` of the churn, one of four shapes in turn."""
    uid = f"churn-{i:05d}"
    one = {"cpu": 1000, "memory": GI}
    kind = i % 4
    if kind == 0:
        budget = {"cpu": 2000, "memory": 2 * GI}
        return PodSpec(
            uid=uid,
            name=uid,
            init_containers=(ContainerSpec("sidecar", ContainerKind.SIDECAR),),
            containers=(ContainerSpec("main", requests=one, limits=one),),
            requests=budget,
            limits=budget,
        )
    if kind == 1:
        return PodSpec(
            uid=uid,
            name=uid,
            init_containers=(ContainerSpec("init", ContainerKind.INIT, requests=one, limits=one),),
            containers=(ContainerSpec("web", requests=one, limits=one),),
        )
    if kind == 2:
        burst = ContainerSpec("burst", requests={"cpu": 500})
        return PodSpec(uid=uid, name=uid, containers=(burst,))
    return PodSpec(uid=uid, name=uid, containers=(ContainerSpec("batch"),))


def _ms(records: Sequence[Record], method: str) -> list[float]:
    out = []
    for r in records:
        if r.method == method:
            if r.error is not None:
                raise RuntimeError(f"{method} failed under churn: {r.error}")
            out.append(r.seconds * 1000)
    return out


async def _measure(tmp: Path) -> dict[str, float]:
    from nrisim import NRISimulator
    from plrm_runtime import FakeRuntime

    config = daemon_config(tmp)
    sim = await NRISimulator.start(str(tmp / "nri.sock"), request_timeout=10.0)
    daemon = Daemon(config, tmp / "daemon.log")
    try:
        await sim.wait_registered(timeout=30)
        rt = FakeRuntime(sim)
        live: deque[api.PodSandbox] = deque()
        for i in range(LIVE):
            live.append(await rt.launch(shape(i)))
        first = len(sim.records)
        start = time.perf_counter()
        for i in range(LIVE, LIVE + PODS):
            await rt.remove_pod(live.popleft())
            live.append(await rt.launch(shape(i)))
        elapsed = time.perf_counter() - start
        records = sim.records[first:]
    finally:
        code = await stop_daemon(daemon, sim)
    check_exit(code, tmp)
    create = _ms(records, "CreateContainer")
    return {
        "churn_pods_per_s": PODS / elapsed,
        "churn_create_container_p50_ms": percentile(create, 50),
        "churn_create_container_p99_ms": percentile(create, 99),
        "churn_run_pod_sandbox_p99_ms": percentile(_ms(records, "RunPodSandbox"), 99),
        "churn_remove_container_p99_ms": percentile(_ms(records, "RemoveContainer"), 99),
        "churn_request_max_ms": max(r.seconds for r in records) * 1000,
    }


def run() -> dict[str, float]:
    """Measure and return the figures."""
    with tempfile.TemporaryDirectory(prefix="nri-plrm-churn-") as tmp:
        write_machine(Path(tmp))
        return asyncio.run(_measure(Path(tmp)))


if __name__ == "__main__":
    main(run)
