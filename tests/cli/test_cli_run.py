"""``nri-plrm run``: refuses bad configs with every error; runs and stops cleanly on SIGTERM."""

from __future__ import annotations

import asyncio
import io
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from fakesysfs import write_sysfs
from nrisim import NRISimulator
from plrm_daemon import free_port

from nri_plrm.cli import main
from nri_plrm.topology.machines import load_topology
from nri_plrm.topology.synthetic import DEFAULT_SPEC

REPO = Path(__file__).resolve().parents[2]


def test_run_refuses_an_invalid_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text('[nri]\nplugin_index = "x"\n[topology_manager]\npolicy = "singlenuma"\n')
    assert main(["run", "--config", str(cfg)], out=io.StringIO()) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2
    assert err[0].startswith(f'nri-plrm run: {cfg}: nri.plugin_index: "x": ')
    assert err[1].startswith(f'nri-plrm run: {cfg}: topology_manager.policy: "singlenuma": ')


def test_run_missing_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 31 item 13: the message names the file looked for and how to create it."""
    missing = tmp_path / "none.toml"
    assert main(["run", "--config", str(missing)], out=io.StringIO()) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"nri-plrm run: no configuration file at {missing}: create it")
    assert "/usr/share/doc/nri-plrm/config.toml /etc/nri-plrm/config.toml" in line
    assert "docs/config.md" in line and "--config FILE" in line


def test_run_unreadable_config_is_not_called_missing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["run", "--config", str(tmp_path)], out=io.StringIO()) == 2
    err = capsys.readouterr().err
    assert "must be a regular file" in err and "no configuration file" not in err


def test_python_dash_m_nri_plrm_is_the_command() -> None:
    """Issue 31 item 13: ``python -m nri_plrm`` runs the CLI."""
    result = subprocess.run(
        [sys.executable, "-m", "nri_plrm", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        cwd=REPO,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("nri-plrm ")


def _health(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=2) as reply:
            return int(reply.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except OSError:
        return 0


@pytest.mark.timeout(90)
def test_run_serves_until_sigterm(tmp_path: Path) -> None:
    write_sysfs(load_topology(DEFAULT_SPEC), str(tmp_path / "sys"))
    port = free_port()
    cfg = tmp_path / "config.toml"
    cfg.write_text(
        f'[nri]\nsocket = "{tmp_path}/nri.sock"\n'
        f'[state]\ndir = "{tmp_path}/state"\n'
        f'kubelet_cpu_manager_state = "{tmp_path}/kubelet/cpu_manager_state"\n'
        f'[pod_resources]\nsocket = "{tmp_path}/pr.sock"\n'
        f'[metrics]\naddress = "127.0.0.1:{port}"\n'
        f'[topology]\nsysfs_root = "{tmp_path}/sys"\n'
    )

    async def scenario() -> int:
        sim = await NRISimulator.start(str(tmp_path / "nri.sock"))
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "nri_plrm.cli",
            "run",
            "--config",
            str(cfg),
            env=dict(os.environ, PYTHONPATH=str(REPO)),
            cwd=REPO,
        )
        try:
            await sim.wait_registered(timeout=30)
            url = f"http://127.0.0.1:{port}/healthz"
            for _ in range(100):
                if await asyncio.to_thread(_health, url) == 200:
                    break
                await asyncio.sleep(0.1)
            else:
                raise AssertionError("healthz never became 200")
            assert os.path.exists(tmp_path / "pr.sock")
            proc.send_signal(signal.SIGTERM)
            return await asyncio.wait_for(proc.wait(), 30)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
            await sim.close()

    assert asyncio.run(scenario()) == 0
    assert not os.path.exists(tmp_path / "pr.sock")
