"""A configuration nesting 60,000 levels deep (issue 28, finding 7): the parser, quadratic in a
key's depth, used to keep a thread and a gigabyte per SIGHUP after the reload gave up on it, and
to hold SIGTERM for minutes. Now the file is refused before it is parsed, the daemon keeps
serving, keeps no thread behind, and stops within systemd's TimeoutStopSec, also while a reload
reads a file."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

from daemon_process import config_text, daemon_on_simulator, wait_logged
from fakesysfs import write_sysfs
from plrm_runtime import FakeRuntime

from nri_plrm.topology.machines import MACHINES
from nri_plrm.translate.manifest_to_pod import load_manifests

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
HOSTILE_DOTTED_KEY = "a" + ".a" * 59_999 + " = 1\n"
STOP_TIMEOUT = 30.0
"""systemd/nri-plrm.service's TimeoutStopSec (and the pods' terminationGracePeriodSeconds)."""


def threads(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


async def settle(pid: int, want_threads: int, timeout: float = 10) -> None:
    """Wait until the daemon is back to ``want_threads`` threads."""
    deadline = time.monotonic() + timeout
    while threads(pid) > want_threads:
        assert time.monotonic() < deadline, (threads(pid), want_threads)
        await asyncio.sleep(0.05)


def test_sighups_with_a_60000_level_key_are_refused_and_leave_nothing_running(
    tmp_path: Path,
) -> None:
    write_sysfs(MACHINES["default"], str(tmp_path / "sys"))
    cfg = tmp_path / "config.toml"
    good = config_text(tmp_path)
    cfg.write_text(good)
    log = tmp_path / "daemon.log"
    (spec,) = load_manifests([EXAMPLES / "pod-scope-mixed.yaml"])
    hostile_line = good.count("\n") + 1

    async def main() -> None:
        async with daemon_on_simulator(cfg, log, tmp_path / "nri.sock") as (sim, proc):
            await asyncio.sleep(0.5)
            idle_threads = threads(proc.pid)
            cfg.write_text(good + HOSTILE_DOTTED_KEY)
            refusal = f"is invalid: {cfg}: line {hostile_line}: key a.a.a"
            for sent in range(1, 4):
                started = time.monotonic()
                proc.send_signal(signal.SIGHUP)
                while log.read_text().count(refusal) < sent:
                    assert time.monotonic() - started < 10, log.read_text()[-3000:]
                    await asyncio.sleep(0.05)
                await settle(proc.pid, idle_threads)
            assert "nested 60001 levels deep: keys nest at most 32 levels" in log.read_text()
            assert rss_mib(proc.pid) < 200
            pod = await FakeRuntime(sim).launch(spec)
            assert pod.id
            started = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            code = await asyncio.to_thread(proc.wait, STOP_TIMEOUT)
            assert code == 0
            assert time.monotonic() - started < STOP_TIMEOUT

    asyncio.run(main())


def test_sigterm_during_a_reload_stops_in_time(tmp_path: Path) -> None:
    """SIGTERM while the reader thread works on the slowest file the bounds let through (a
    megabyte of unknown keys): the daemon stops cleanly, not waiting for the reader."""
    write_sysfs(MACHINES["default"], str(tmp_path / "sys"))
    cfg = tmp_path / "config.toml"
    good = config_text(tmp_path)
    cfg.write_text(good)
    log = tmp_path / "daemon.log"
    slow = "".join(f"unknown_{i} = {i}\n" for i in range(45_000))

    async def main() -> None:
        async with daemon_on_simulator(cfg, log, tmp_path / "nri.sock") as (_, proc):
            await asyncio.sleep(0.5)
            idle_threads = threads(proc.pid)
            cfg.write_text(good + slow)
            proc.send_signal(signal.SIGHUP)
            deadline = time.monotonic() + 10
            while threads(proc.pid) == idle_threads:
                assert time.monotonic() < deadline, "no reader thread started"
                await asyncio.sleep(0.005)
            started = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            code = await asyncio.to_thread(proc.wait, STOP_TIMEOUT)
            assert code == 0
            assert time.monotonic() - started < STOP_TIMEOUT
            await wait_logged(log, "stopped")

    asyncio.run(main())
