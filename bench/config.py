"""Reading the configuration file: what a hostile file costs (issue 28, finding 7).

Each read runs ``load_config`` in a fresh interpreter; its wall time and peak RSS (the
interpreter's own, about 20 MiB, included) are the figures. A read still running after
``DEADLINE_S`` is killed and reported as taking that long.

- ``config_deep_60000_read_ms`` / ``config_deep_60000_peak_rss_mb``: the reported 120 KB file,
  one dotted key 60,000 levels deep (refused by the depth scan before the parser sees it);
- ``config_1mib_worst_read_ms`` / ``config_1mib_worst_peak_rss_mb``: the slowest of the 1 MiB
  files the size and depth bounds still let through to the parser (32-level dotted keys,
  32-level table headers, arrays of tables, unknown keys), its time and the largest peak;
- ``config_packaged_read_ms`` / ``config_packaged_peak_rss_mb``: ``packaging/config.toml``;
- ``config_depth_scan_1mib_ms``: the depth scan alone over the slowest of those 1 MiB files;
- ``config_reload_ms``: one SIGHUP read (the reader thread) of ``packaging/config.toml``;
- ``nri_create_p99_ms_calm``, ``nri_create_p99_ms_sighup_storm`` and
  ``nri_create_p99_ms_sighup_storm_1mib``: CreateContainer round trips of the daemon on the
  runtime simulator (256 CPUs), without SIGHUPs, then with a SIGHUP every 20 ms re-reading the
  60,000-level file, then the slowest 1 MiB file; ``sighup_storm_daemon_rss_mb``: the daemon's
  RSS after both storms.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable
from pathlib import Path

from bench.common import main, percentile
from bench.startup import (
    Daemon,
    check_exit,
    daemon_config,
    stop_daemon,
    wait_for_register,
    write_machine,
)
from nri_plrm.config.settings import MAX_CONFIG_BYTES
from nri_plrm.engine.spec import ContainerSpec, PodSpec

ROOT = Path(__file__).resolve().parents[1]
DEADLINE_S = 300.0
DEEP_KEY = "a" + ".a" * 59_999 + " = 1\n"
STORM_PERIOD_S = 0.02
PODS = 400
READ = (
    "import sys\n"
    "from nri_plrm.config.settings import ConfigError\n"
    "from nri_plrm.config.file import load_config\n"
    "try:\n"
    "    load_config(sys.argv[1])\n"
    "except ConfigError:\n"
    "    pass\n"
)


def fill(line: object, head: str = "") -> str:
    """``head`` and the lines ``line.format(i=i)`` for i = 0, 1, ... up to 1 MiB."""
    parts, size, i = [head], len(head), 0
    while size + len(text := str(line).format(i=i)) <= MAX_CONFIG_BYTES:
        parts.append(text)
        size += len(text)
        i += 1
    return "".join(parts)


def slowest_megabyte_file() -> str:
    """The 1 MiB file of :func:`megabyte_files` the daemon takes longest to refuse."""
    return megabyte_files()["unknown_keys"]


def megabyte_files() -> dict[str, str]:
    """1 MiB files within the bounds, each the worst of its shape for the parser."""
    deep = ".".join(["a"] * 31)
    aot = ".".join(["a"] * 15)
    return {
        "dotted_keys": fill(deep + ".k{i} = 1\n"),
        "headers": fill("[" + deep + ".k{i}]\n"),
        "arrays_of_tables": fill("[[" + aot + "]]\n"),
        "unknown_keys": fill("k{i} = 1\n", "[nri]\n"),
    }


def timed_read(path: Path) -> tuple[float, float]:
    """Wall ms and peak RSS MiB of ``load_config(path)`` in a fresh interpreter."""
    started = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-c", READ, str(path)], cwd=ROOT, stdin=subprocess.DEVNULL
    )
    deadline = started + DEADLINE_S
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if time.perf_counter() > deadline:
            proc.kill()
            pid, status, usage = os.wait4(proc.pid, 0)
            break
        time.sleep(0.005)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return (time.perf_counter() - started) * 1000, usage.ru_maxrss / 1024


def _reads(tmp: Path) -> dict[str, float]:
    from nri_plrm.config.shape import measure

    deep = tmp / "deep.toml"
    deep.write_text(DEEP_KEY)
    deep_ms, deep_rss = timed_read(deep)
    packaged_ms, packaged_rss = timed_read(ROOT / "packaging" / "config.toml")
    worst_ms, worst_rss, scan_ms = 0.0, 0.0, 0.0
    for name, text in megabyte_files().items():
        path = tmp / f"{name}.toml"
        path.write_text(text)
        ms, rss = timed_read(path)
        worst_ms, worst_rss = max(worst_ms, ms), max(worst_rss, rss)
        started = time.perf_counter()
        measure(text)
        scan_ms = max(scan_ms, (time.perf_counter() - started) * 1000)
    return {
        "config_deep_60000_read_ms": deep_ms,
        "config_deep_60000_peak_rss_mb": deep_rss,
        "config_1mib_worst_read_ms": worst_ms,
        "config_1mib_worst_peak_rss_mb": worst_rss,
        "config_packaged_read_ms": packaged_ms,
        "config_packaged_peak_rss_mb": packaged_rss,
        "config_depth_scan_1mib_ms": scan_ms,
    }


async def _reload_ms() -> float:
    from nri_plrm.config.reload import ConfigReader

    samples = []
    for _ in range(5):
        started = time.perf_counter()
        await ConfigReader().load(str(ROOT / "packaging" / "config.toml"), 30)
        samples.append((time.perf_counter() - started) * 1000)
    return percentile(samples, 50)


def _pod(i: int, storm: str) -> PodSpec:
    one = {"cpu": 1000, "memory": 1 << 30}
    return PodSpec(
        uid=f"cfg-{storm}-{i:04d}",
        name=f"cfg-{storm}-{i}",
        containers=(ContainerSpec("c", requests=one, limits=one),),
    )


async def _round_trips(sim: object, storm: str) -> list[float]:
    from plrm_runtime import FakeRuntime

    rt = FakeRuntime(sim)
    samples = []
    for i in range(PODS):
        spec = _pod(i, storm)
        pod = await rt.run_pod(spec)
        started = time.perf_counter()
        await rt.create(pod, spec, spec.containers[0])
        samples.append((time.perf_counter() - started) * 1000)
        await rt.remove_pod(pod)
    return samples


async def _during_hangups(daemon: Daemon, work: Awaitable[list[float]]) -> list[float]:
    """``work``'s samples, taken while the daemon gets a SIGHUP every STORM_PERIOD_S."""

    async def hangups() -> None:
        while True:
            daemon.proc.send_signal(signal.SIGHUP)
            await asyncio.sleep(STORM_PERIOD_S)

    storm = asyncio.create_task(hangups())
    try:
        return await work
    finally:
        storm.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await storm


async def _storm(tmp: Path) -> dict[str, float]:
    from nrisim import NRISimulator

    config = daemon_config(tmp, pod_resources=False, metrics=False)
    sim = await NRISimulator.start(str(tmp / "nri.sock"), request_timeout=10.0)
    daemon = Daemon(config, tmp / "daemon.log")
    try:
        await wait_for_register(sim)
        await asyncio.sleep(0.5)
        calm = await _round_trips(sim, "calm")
        good = config.read_text()
        config.write_text(good + DEEP_KEY)
        stormy = await _during_hangups(daemon, _round_trips(sim, "storm"))
        config.write_text(slowest_megabyte_file())
        stormy_1mib = await _during_hangups(daemon, _round_trips(sim, "storm-1mib"))
        config.write_text(good)
        with open(f"/proc/{daemon.pid}/status") as f:
            rss = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024
    finally:
        code = await stop_daemon(daemon, sim)
    check_exit(code, tmp)
    return {
        "nri_create_p99_ms_calm": percentile(calm, 99),
        "nri_create_p99_ms_sighup_storm": percentile(stormy, 99),
        "nri_create_p99_ms_sighup_storm_1mib": percentile(stormy_1mib, 99),
        "sighup_storm_daemon_rss_mb": rss,
    }


def run() -> dict[str, float]:
    """Measure and return the figures."""
    with tempfile.TemporaryDirectory(prefix="nri-plrm-config-") as tmp:
        results = _reads(Path(tmp))
        results["config_reload_ms"] = asyncio.run(_reload_ms())
    with tempfile.TemporaryDirectory(prefix="nri-plrm-config-storm-") as tmp:
        write_machine(Path(tmp))
        results |= asyncio.run(_storm(Path(tmp)))
    return results


if __name__ == "__main__":
    main(run)
