"""Memory benchmark: resident set size of the running daemon with 1,000 live containers.

The daemon (``python -m nri_plrm.daemon.service``, metrics and PodResources servers on, journal and
checkpoints on disk) runs on the fake 256-CPU machine; the simulator creates 100 pod-level pods of 5
containers (one exclusive, four pod-shared) and 500 BestEffort pods through the NRI wire, then
the PodResources ``List`` and a metrics scrape are served once (their caches count too).

- ``rss_mb_idle``: VmRSS after registration, no pods (MiB);
- ``rss_mb_1000_containers``: VmRSS with the 1,000 containers (MiB, target <= 80);
- ``rss_hwm_mb_1000_containers``: the peak (VmHWM) over the whole run (MiB).
"""

from __future__ import annotations

import asyncio
import tempfile
import urllib.request
from pathlib import Path

from bench.common import main
from bench.startup import Daemon, check_exit, daemon_config, stop_daemon, write_machine
from nri_plrm.engine.spec import ContainerKind, ContainerSpec, PodSpec

GI = 1 << 30
POD_LEVEL_PODS = 100
SHARED_PER_POD = 4
BEST_EFFORT_PODS = 500


def status_mib(pid: int, field: str) -> float:
    """A ``kB`` field of ``/proc/PID/status`` (VmRSS, VmHWM) in MiB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise ValueError(f"/proc/{pid}/status has no {field} line")


def pod_level(i: int) -> PodSpec:
    """A pod-level pod: 2-CPU budget, a 1-CPU exclusive main, SHARED_PER_POD sidecars."""
    one = {"cpu": 1000, "memory": GI}
    budget = {"cpu": 2000, "memory": 2 * GI}
    sidecars = tuple(
        ContainerSpec(f"side-{k}", ContainerKind.SIDECAR) for k in range(SHARED_PER_POD)
    )
    return PodSpec(
        uid=f"rss-pl-{i:04d}",
        name=f"rss-pl-{i}",
        init_containers=sidecars,
        containers=(ContainerSpec("main", requests=one, limits=one),),
        requests=budget,
        limits=budget,
    )


def best_effort(i: int) -> PodSpec:
    """A BestEffort pod with one container (node shared pool)."""
    return PodSpec(uid=f"rss-be-{i:04d}", name=f"rss-be-{i}", containers=(ContainerSpec("c"),))


def _scrape(url: str) -> int:
    with urllib.request.urlopen(url, timeout=10) as reply:
        return len(reply.read())


async def _measure(tmp: Path) -> dict[str, float]:
    from nrisim import NRISimulator
    from plrm_runtime import FakeRuntime

    from nri_plrm.podresources.client import PodResourcesClient

    config = daemon_config(tmp)
    sim = await NRISimulator.start(str(tmp / "nri.sock"), request_timeout=10.0)
    daemon = Daemon(config, tmp / "daemon.log")
    try:
        await sim.wait_registered(timeout=30)
        await asyncio.sleep(0.5)
        idle = status_mib(daemon.pid, "VmRSS")
        rt = FakeRuntime(sim)
        for i in range(POD_LEVEL_PODS):
            await rt.launch(pod_level(i))
        for i in range(BEST_EFFORT_PODS):
            await rt.launch(best_effort(i))
        await rt.settle()
        if len(rt.containers) != 1000:
            raise RuntimeError(f"expected 1000 live containers, runtime has {len(rt.containers)}")
        client = PodResourcesClient(str(tmp / "run" / "pod-resources.sock"), timeout=10.0)
        try:
            listed = await asyncio.get_running_loop().run_in_executor(None, client.list)
        finally:
            client.close()
        got = -1 if listed is None else len(listed.pod_resources)
        if got != POD_LEVEL_PODS + BEST_EFFORT_PODS:
            raise RuntimeError(f"PodResources List returned {got} pods")
        text = config.read_text()
        address = text.split('address = "', 1)[1].split('"', 1)[0]
        await asyncio.get_running_loop().run_in_executor(None, _scrape, f"http://{address}/metrics")
        loaded = status_mib(daemon.pid, "VmRSS")
        peak = status_mib(daemon.pid, "VmHWM")
    finally:
        code = await stop_daemon(daemon, sim)
    check_exit(code, tmp)
    return {
        "rss_mb_idle": idle,
        "rss_mb_1000_containers": loaded,
        "rss_hwm_mb_1000_containers": peak,
    }


def run() -> dict[str, float]:
    """Measure and return the figures (MiB)."""
    with tempfile.TemporaryDirectory(prefix="nri-plrm-rss-") as tmp:
        write_machine(Path(tmp))
        return asyncio.run(_measure(Path(tmp)))


if __name__ == "__main__":
    main(run)
