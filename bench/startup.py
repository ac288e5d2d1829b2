"""Start-up benchmark: ``python -m nri_plrm.daemon.service`` from exec to registered with the
runtime.

The daemon runs as in production (the real entry point, a TOML file, topology discovery on a
fake sysfs tree of the 256-CPU machine, checkpoint restore, metrics HTTP server, PodResources
gRPC server, NRI stub); the runtime side is the test simulator (``tests/support/nrisim``).

- ``startup_to_registered_s``: median time from process spawn to the plugin's
  ``RegisterPlugin`` reaching the runtime (target <= 1 s);
- ``startup_to_synchronized_s``: median time from spawn until Configure and Synchronize have
  been answered (the plugin serves events from then on);
- ``reconnect_after_containerd_restart_max_s``: containerd goes away for 0.2, 1, 2 and 4 s;
  the slowest time from its socket listening again to the plugin registering (target <= 1 s).

``Daemon`` and ``daemon_config`` are reused by ``bench.rss`` and ``bench.churn``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import main

ROOT = Path(__file__).resolve().parent.parent

SPEC_256 = "sockets=2,numa_per_socket=4,cores_per_numa=16,threads_per_core=2,memory_per_numa=64Gi"
RUNS = 5
DOWNTIMES = (0.2, 1.0, 2.0, 4.0)
"""How long containerd stays away in the reconnect measurement (seconds)."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def daemon_config(tmp: Path, *, pod_resources: bool = True, metrics: bool = True) -> Path:
    """Write a production-like configuration with every path under ``tmp``; returns its path."""
    metrics_address = f"127.0.0.1:{free_port()}" if metrics else ""
    text = f"""
[nri]
socket = "{tmp}/nri.sock"
[state]
dir = "{tmp}/state"
kubelet_cpu_manager_state = "{tmp}/kubelet/cpu_manager_state"
[pod_resources]
enabled = {str(pod_resources).lower()}
socket = "{tmp}/run/pod-resources.sock"
[metrics]
address = "{metrics_address}"
[topology]
sysfs_root = "{tmp}/sys"
[topology_manager]
policy = "single-numa-node"
scope = "pod"
"""
    path = tmp / "config.toml"
    path.write_text(text)
    return path


def write_machine(tmp: Path) -> None:
    """A sysfs tree of the 256-CPU / 8-NUMA machine under ``tmp/sys``."""
    from fakesysfs import write_sysfs

    from nri_plrm.topology.synthetic import synthetic_topology

    write_sysfs(synthetic_topology(SPEC_256), str(tmp / "sys"))


class Daemon:
    """The daemon entry point in a child process, stopped with SIGTERM (SIGKILL as fallback)."""

    def __init__(self, config: Path, log: Path) -> None:
        env = dict(os.environ)
        env.pop("NOTIFY_SOCKET", None)
        with open(log, "ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "nri_plrm.daemon.service", "--config", str(config)],
                cwd=ROOT,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=out,
                env=env,
            )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> int:
        """SIGTERM and wait; returns the exit code (SIGKILL after 10 s)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()


async def stop_daemon(daemon: Daemon, sim: object) -> int:
    """Stop the daemon (SIGTERM, off the loop) and close the simulator; the daemon's exit code."""
    code = await asyncio.get_running_loop().run_in_executor(None, daemon.stop)
    with contextlib.suppress(Exception):
        await sim.close()  # type: ignore[attr-defined]
    return code


def check_exit(code: int, tmp: Path) -> None:
    """Raise with the daemon's log when it did not exit cleanly."""
    if code != 0:
        raise RuntimeError(f"daemon exited with {code}:\n{(tmp / 'daemon.log').read_text()}")


async def wait_for_register(sim: object, timeout: float = 30.0, old: object = None) -> float:
    """Wait for RegisterPlugin on a session other than ``old``; returns ``time.perf_counter()``."""
    deadline = time.monotonic() + timeout
    while True:
        session = sim.session  # type: ignore[attr-defined]
        if session is not None and session is not old and session.registered.done():
            return time.perf_counter()
        if time.monotonic() > deadline:
            raise TimeoutError(f"daemon did not register within {timeout} s")
        await asyncio.sleep(0.001)


async def _once(tmp: Path) -> tuple[float, float]:
    from nrisim import NRISimulator

    config = daemon_config(tmp)
    sim = await NRISimulator.start(str(tmp / "nri.sock"), request_timeout=10.0)
    start = time.perf_counter()
    daemon = Daemon(config, tmp / "daemon.log")
    try:
        registered = await wait_for_register(sim)
        await sim.wait_registered(timeout=30)
        synchronized = time.perf_counter()
    finally:
        code = await stop_daemon(daemon, sim)
    check_exit(code, tmp)
    return registered - start, synchronized - start


async def _reconnect(tmp: Path) -> float:
    """Slowest re-registration after containerd restarts, over DOWNTIMES: seconds from the
    runtime socket listening again to the plugin's RegisterPlugin."""
    from nrisim import NRISimulator

    config = daemon_config(tmp, pod_resources=False, metrics=False)
    sim = await NRISimulator.start(str(tmp / "nri.sock"), request_timeout=10.0)
    daemon = Daemon(config, tmp / "daemon.log")
    worst = 0.0
    try:
        await sim.wait_registered(timeout=30)
        for downtime in DOWNTIMES:
            old = sim.session
            await sim.close()
            await asyncio.sleep(downtime)
            await sim.listen()
            back = time.perf_counter()
            worst = max(worst, await wait_for_register(sim, old=old) - back)
            await sim.wait_registered(timeout=30)
    finally:
        code = await stop_daemon(daemon, sim)
    check_exit(code, tmp)
    return worst


def run() -> dict[str, float]:
    """Start the daemon RUNS times (the first run warms the file cache) and report medians."""
    registered: list[float] = []
    synchronized: list[float] = []
    for i in range(RUNS + 1):
        with tempfile.TemporaryDirectory(prefix="nri-plrm-startup-") as tmp:
            write_machine(Path(tmp))
            reg, sync = asyncio.run(_once(Path(tmp)))
        if i:
            registered.append(reg)
            synchronized.append(sync)
    with tempfile.TemporaryDirectory(prefix="nri-plrm-reconnect-") as tmp:
        write_machine(Path(tmp))
        reconnect = asyncio.run(_reconnect(Path(tmp)))
    return {
        "reconnect_after_containerd_restart_max_s": reconnect,
        "startup_to_registered_s": statistics.median(registered),
        "startup_to_registered_max_s": max(registered),
        "startup_to_synchronized_s": statistics.median(synchronized),
    }


if __name__ == "__main__":
    main(run)
