"""Wire benchmark: CreateContainer round trips (simulator -> plugin stub -> reply) over a socket.

The plugin runs in its own process (as in production) with a handler that does nothing; the
runtime side is the test simulator (``tests/support/nrisim``) sending the CreateContainer request
recorded from containerd (``golden`` capture, 3.5 KB, so containerd's two-frame split is used).

Latency percentiles come from strictly sequential round trips. ``wire_requests_per_s`` is the
throughput with 8 requests in flight (containerd serves CRI calls concurrently, each calling the
plugin); ``wire_requests_per_s_sequential`` is one request at a time (about 1 / mean latency).
``wire_cpu_per_roundtrip_us`` is the CPU time both processes spent per sequential round trip,
a figure that, unlike the latencies, does not depend on what else the machine is running.
``wire_roundtrip_p50_us_cpu_load`` / ``..._p99_...``: sequential round trips while two busy
processes keep the CPUs busy (``bench.load``, started and stopped by the benchmark), placed as
on a Kubernetes node: the busy processes in a pods cgroup, the simulator and the plugin in a
system cgroup, with the weights of ``kubepods.slice`` and ``system.slice``
(``cpu_load_node_cgroups`` is 1; 0 when that placement could not be made and every process
shared one cgroup). ``..._cpu_load_one_cgroup``: the same with the busy processes beside the
simulator and the plugin in one cgroup, the harsher case no node has.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import main, percentile
from bench.load import cpu_load

ROOT = Path(__file__).resolve().parent.parent

WARMUP = 500
ROUND_TRIPS = 5000
ROUND_TRIPS_CPU_LOAD = 2000
CONCURRENCY = 8


class _NoOp:
    """A plugin whose CreateContainer handler allocates nothing and adjusts nothing."""

    def create_container(self, pod: object, container: object) -> None:
        return None


def serve_plugin(socket_path: str) -> None:
    """Run the stub with the no-op handler until the runtime goes away (child process)."""
    from nri_plrm.daemon.service import freeze_startup_objects
    from nri_plrm.nri.stub import Stub

    stub = Stub(_NoOp(), name="bench", index="50", socket_path=socket_path, reconnect=False)
    freeze_startup_objects()
    asyncio.run(stub.run())


def _cpu_seconds(pid: int) -> float:
    """User plus system CPU time of process ``pid`` (from /proc, clock-tick resolution)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _measure(socket_path: str) -> dict[str, float]:
    from nrisim import NRISimulator, request

    req = request("golden", "CreateContainer")
    pod, ctr = req.pod, req.container
    sim = await NRISimulator.start(socket_path, request_timeout=10.0)
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"from bench.wire import serve_plugin; serve_plugin({socket_path!r})",
        ],
        cwd=ROOT,
    )
    try:
        await sim.wait_registered(timeout=30.0)
        for _ in range(WARMUP):
            await sim.create_container(pod, ctr)
        samples = []
        cpu0 = time.process_time() + _cpu_seconds(child.pid)
        start = time.perf_counter()
        for _ in range(ROUND_TRIPS):
            t0 = time.perf_counter()
            await sim.create_container(pod, ctr)
            samples.append(time.perf_counter() - t0)
        sequential = time.perf_counter() - start
        cpu = time.process_time() + _cpu_seconds(child.pid) - cpu0

        async def worker(n: int) -> None:
            for _ in range(n):
                await sim.create_container(pod, ctr)

        per_worker = ROUND_TRIPS // CONCURRENCY
        start = time.perf_counter()
        await asyncio.gather(*(worker(per_worker) for _ in range(CONCURRENCY)))
        concurrent = time.perf_counter() - start

        async def loaded_round_trips() -> list[float]:
            samples = []
            for _ in range(ROUND_TRIPS_CPU_LOAD):
                t0 = time.perf_counter()
                await sim.create_container(pod, ctr)
                samples.append(time.perf_counter() - t0)
            return samples

        with cpu_load(measured=[child.pid]) as placement:
            loaded = await loaded_round_trips()
        with cpu_load(measured=[child.pid], node_cgroups=False):
            one_cgroup = await loaded_round_trips()
    finally:
        await sim.close()
        try:
            child.wait(timeout=10)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
    return {
        "wire_roundtrip_p50_us": percentile(samples, 50) * 1e6,
        "wire_roundtrip_p99_us": percentile(samples, 99) * 1e6,
        "wire_requests_per_s": per_worker * CONCURRENCY / concurrent,
        "wire_requests_per_s_sequential": ROUND_TRIPS / sequential,
        "wire_cpu_per_roundtrip_us": cpu / ROUND_TRIPS * 1e6,
        "wire_roundtrip_p50_us_cpu_load": percentile(loaded, 50) * 1e6,
        "wire_roundtrip_p99_us_cpu_load": percentile(loaded, 99) * 1e6,
        "wire_roundtrip_p50_us_cpu_load_one_cgroup": percentile(one_cgroup, 50) * 1e6,
        "wire_roundtrip_p99_us_cpu_load_one_cgroup": percentile(one_cgroup, 99) * 1e6,
        "cpu_load_node_cgroups": int(placement.node_cgroups),
    }


def run() -> dict[str, float]:
    """Measure CreateContainer round trips; figures in microseconds and requests per second."""
    with tempfile.TemporaryDirectory(prefix="nribench") as tmp:
        return asyncio.run(_measure(os.path.join(tmp, "nri.sock")))


if __name__ == "__main__":
    main(run)
