"""The daemon with ``[topology_manager] policy = "none"``: it starts, logs one WARNING that
pod-level resource managers need an aligning policy (not again on SIGHUP), and places a pod
with pod-level resources as the kubelet does under ``none``."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

from daemon_process import config_text, daemon_on_simulator, log_records, stop_cleanly, wait_logged
from fakesysfs import write_sysfs
from plrm_runtime import FakeRuntime

from nri_plrm.topology.machines import MACHINES
from nri_plrm.translate.manifest_to_pod import load_manifests

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
WARNING = "pod-level resource managers need policy best-effort, restricted or single-numa-node"


def _config(tmp: Path, level: str) -> str:
    return config_text(tmp, level=level, extra='[topology_manager]\npolicy = "none"\n')


def test_policy_none_starts_warns_once_and_places_as_the_kubelet(tmp_path: Path) -> None:
    write_sysfs(MACHINES["default"], str(tmp_path / "sys"))
    cfg = tmp_path / "config.toml"
    cfg.write_text(_config(tmp_path, "info"))
    log = tmp_path / "daemon.log"
    (spec,) = load_manifests([EXAMPLES / "pod-scope-mixed.yaml"])

    async def main() -> None:
        async with daemon_on_simulator(cfg, log, tmp_path / "nri.sock") as (sim, proc):
            rt = FakeRuntime(sim)
            pod = await rt.launch(spec)
            main_app = rt.applied(pod, "main-app")
            assert (main_app.cpus, main_app.mems, main_app.quota) == ("1,33", "0", -1)
            for sidecar in ("metrics-sidecar", "logging-sidecar"):
                applied = rt.applied(pod, sidecar)
                assert applied.cpus == "0,2-32,34-63" and applied.quota == 400000

            cfg.write_text(_config(tmp_path, "debug"))
            proc.send_signal(signal.SIGHUP)
            await wait_logged(log, "SIGHUP: applied log.level")
            assert await stop_cleanly(proc) == 0

    asyncio.run(main())
    warnings = [r for r in log_records(log) if WARNING in str(r["msg"])]
    assert len(warnings) == 1, log_records(log)
    assert warnings[0]["level"] == "warning"
    assert str(warnings[0]["msg"]).startswith('configuration: topology_manager.policy: "none": ')
