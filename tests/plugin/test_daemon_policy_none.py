"""The daemon with ``[topology_manager] policy = "none"``: it starts, logs one WARNING that
pod-level resource managers need an aligning policy (not again on SIGHUP), and places a pod
with pod-level resources as the kubelet does under ``none``."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from fakesysfs import write_sysfs
from nrisim import NRISimulator
from plrm_runtime import FakeRuntime

from nri_plrm.topology.machines import MACHINES
from nri_plrm.translate.manifest_to_pod import load_manifests

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
WARNING = "pod-level resource managers need policy best-effort, restricted or single-numa-node"


def _config(tmp: Path, level: str) -> str:
    return f"""
[nri]
socket = "{tmp}/nri.sock"
[state]
dir = "{tmp}/state"
kubelet_cpu_manager_state = ""
[pod_resources]
enabled = false
[metrics]
address = ""
[log]
level = "{level}"
format = "json"
[topology]
sysfs_root = "{tmp}/sys"
[topology_manager]
policy = "none"
"""


def _records(log: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]


async def _wait_for(log: Path, text: str, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while text not in log.read_text():
        assert time.monotonic() < deadline, f"{text!r} not logged; log:\n{log.read_text()}"
        await asyncio.sleep(0.05)


def test_policy_none_starts_warns_once_and_places_as_the_kubelet(tmp_path: Path) -> None:
    write_sysfs(MACHINES["default"], str(tmp_path / "sys"))
    cfg = tmp_path / "config.toml"
    cfg.write_text(_config(tmp_path, "info"))
    log = tmp_path / "daemon.log"
    (spec,) = load_manifests([EXAMPLES / "pod-scope-mixed.yaml"])
    env = {k: v for k, v in os.environ.items() if k != "NOTIFY_SOCKET"}

    async def main() -> None:
        sim = await NRISimulator.start(str(tmp_path / "nri.sock"))
        with open(log, "ab") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "nri_plrm.daemon", "--config", str(cfg)],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=out,
                env=env,
            )
        try:
            await sim.wait_registered(timeout=30)
            rt = FakeRuntime(sim)
            pod = await rt.launch(spec)
            main_app = rt.applied(pod, "main-app")
            assert (main_app.cpus, main_app.mems, main_app.quota) == ("1,33", "0", -1)
            for sidecar in ("metrics-sidecar", "logging-sidecar"):
                applied = rt.applied(pod, sidecar)
                assert applied.cpus == "0,2-32,34-63" and applied.quota == 400000

            cfg.write_text(_config(tmp_path, "debug"))
            proc.send_signal(signal.SIGHUP)
            await _wait_for(log, "SIGHUP: applied log.level")
            proc.send_signal(signal.SIGTERM)
            assert await asyncio.get_running_loop().run_in_executor(None, proc.wait, 20) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
            await sim.close()

    asyncio.run(main())
    warnings = [r for r in _records(log) if WARNING in str(r["msg"])]
    assert len(warnings) == 1, _records(log)
    assert warnings[0]["level"] == "warning"
    assert str(warnings[0]["msg"]).startswith('configuration: topology_manager.policy: "none": ')
