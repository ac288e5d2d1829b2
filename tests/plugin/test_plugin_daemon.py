"""The daemon as operators run it (``python -m nri_plrm.daemon.service --config FILE``): start-up
checks, structured JSON decision logs, SIGHUP reload, SIGTERM clean stop."""

from __future__ import annotations

import asyncio
import gc
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from daemon_process import config_text, daemon_on_simulator, log_records, stop_cleanly, wait_logged
from fakesysfs import write_sysfs
from plrm_daemon import running_daemon
from plrm_runtime import FakeRuntime

from nri_plrm.observability.log_output import JSONFormatter
from nri_plrm.topology.machines import MACHINES
from nri_plrm.translate.manifest_to_pod import load_manifests

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def config(
    tmp: Path,
    *,
    level: str = "info",
    policy: str = "single-numa-node",
    kubelet_state: str = "{tmp}/kubelet/cpu_manager_state",
) -> str:
    return config_text(
        tmp,
        kubelet_state=kubelet_state.format(tmp=tmp),
        level=level,
        extra=f'[topology_manager]\npolicy = "{policy}"\nscope = "pod"\n',
    )


def test_refuses_to_start_beside_a_static_kubelet(tmp_path: Path) -> None:
    write_sysfs(MACHINES["default"], str(tmp_path / "sys"))
    (tmp_path / "kubelet").mkdir()
    (tmp_path / "kubelet" / "cpu_manager_state").write_text(
        '{"policyName":"static","defaultCpuSet":"0-63","checksum":1}'
    )
    cfg = tmp_path / "config.toml"
    cfg.write_text(config(tmp_path))
    proc = subprocess.run(
        [sys.executable, "-m", "nri_plrm.daemon.service", "--config", str(cfg)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1
    assert "cpu_manager_state" in proc.stderr and "static" in proc.stderr
    assert "cpuManagerPolicy: none" in proc.stderr
    assert not (tmp_path / "state" / "state.json").exists()


def test_empty_kubelet_state_path_turns_the_check_off(tmp_path: Path) -> None:
    write_sysfs(MACHINES["default"], str(tmp_path / "sys"))
    cfg = tmp_path / "config.toml"
    cfg.write_text(config(tmp_path, kubelet_state=""))
    log = tmp_path / "daemon.log"

    async def main() -> None:
        async with daemon_on_simulator(cfg, log, tmp_path / "nri.sock") as (_, proc):
            assert await stop_cleanly(proc) == 0

    asyncio.run(main())


def test_bad_config_exits_2_with_every_error(tmp_path: Path) -> None:
    cfg = tmp_path / "config.toml"
    cfg.write_text('[topology_manager]\npolicy = "singlenuma"\n[nri]\nplugin_index = "5"\n')
    proc = subprocess.run(
        [sys.executable, "-m", "nri_plrm.daemon.service", "--config", str(cfg)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "topology_manager.policy" in proc.stderr and "nri.plugin_index" in proc.stderr


def test_decision_logs_reload_and_clean_stop(tmp_path: Path) -> None:
    write_sysfs(MACHINES["default"], str(tmp_path / "sys"))
    cfg = tmp_path / "config.toml"
    cfg.write_text(config(tmp_path))
    log = tmp_path / "daemon.log"
    (spec,) = load_manifests([EXAMPLES / "pod-scope-mixed.yaml"])

    async def main() -> None:
        async with daemon_on_simulator(cfg, log, tmp_path / "nri.sock") as (sim, proc):
            rt = FakeRuntime(sim)
            pod = await rt.launch(spec)
            main_cpus = rt.applied(pod, "main-app").cpus
            await wait_logged(log, "container=main-app")  # written by the log thread
            decisions = [r for r in log_records(log) if r.get("event") == "decision"]
            main = next(r for r in decisions if r.get("container") == "main-app")
            assert main["pod"] == "plrm-tutorial/pod-scope-mixed"
            assert main["cpus"] == main_cpus and main["mems"]
            assert main["reason"] == "exclusive slice from the pod budget"
            assert main["level"] == "info"

            cfg.write_text(config(tmp_path, level="debug", policy="restricted"))
            proc.send_signal(signal.SIGHUP)
            await wait_logged(log, "SIGHUP: applied log.level")
            await wait_logged(log, "topology_manager.policy change(s) need a restart")
            assert await stop_cleanly(proc) == 0

    asyncio.run(main())
    records = log_records(log)
    assert any(r["msg"] == "stopped" for r in records)
    assert (tmp_path / "state" / "state.json").exists()


def test_json_formatter_carries_the_structured_fields() -> None:
    import logging

    record = logging.LogRecord("nri_plrm.plugin", logging.INFO, __file__, 1, "x=%d", (3,), None)
    record.plrm = {"event": "decision", "cpus": "2-3"}
    doc = json.loads(JSONFormatter().format(record))
    assert doc["msg"] == "x=3" and doc["cpus"] == "2-3" and doc["logger"] == "nri_plrm.plugin"


def test_systemd_notifications(tmp_path: Path) -> None:
    """READY=1 once registered and synchronized, WATCHDOG=1 while running, STOPPING=1 at the
    end, over a real NOTIFY_SOCKET datagram socket."""
    import socket

    write_sysfs(MACHINES["default"], str(tmp_path / "sys"))
    cfg = tmp_path / "config.toml"
    cfg.write_text(config(tmp_path))
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notify.bind(str(tmp_path / "notify.sock"))
    notify.setblocking(False)
    received: list[str] = []

    def drain() -> None:
        while True:
            try:
                received.append(notify.recv(4096).decode())
            except BlockingIOError:
                return

    async def main() -> None:
        env = {**os.environ, "NOTIFY_SOCKET": str(tmp_path / "notify.sock")}
        env["WATCHDOG_USEC"] = "400000"
        log = tmp_path / "daemon.log"
        async with daemon_on_simulator(cfg, log, tmp_path / "nri.sock", env) as (_, proc):
            deadline = time.monotonic() + 10
            while not any("READY=1" in m for m in received) and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
                drain()
            while sum("WATCHDOG=1" in m for m in received) < 2 and time.monotonic() < deadline:
                await asyncio.sleep(0.05)  # one every 0.2 s, however slowly the machine runs it
                drain()
            assert await stop_cleanly(proc) == 0

    asyncio.run(main())
    drain()
    notify.close()
    assert any(m.startswith("READY=1") for m in received), received
    assert sum("WATCHDOG=1" in m for m in received) >= 2, received
    assert any("STOPPING=1" in m for m in received), received


def test_start_up_objects_are_frozen_while_serving(tmp_path: Path) -> None:
    """Full garbage collections skip what start-up allocated, and get it back at the stop."""

    async def main() -> int:
        async with running_daemon(tmp_path):
            return gc.get_freeze_count()

    assert asyncio.run(main()) > 10_000
    assert gc.get_freeze_count() == 0
