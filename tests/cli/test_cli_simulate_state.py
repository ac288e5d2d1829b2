"""``simulate`` and ``state`` (from a real checkpoint) through the CLI."""

from __future__ import annotations

import asyncio
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from plrm_harness import serve

from nri_plrm.checkpoint.store import CheckpointStore
from nri_plrm.cli import main
from nri_plrm.config.settings import Config
from nri_plrm.engine.facade import Engine
from nri_plrm.ledger import NodeLedger
from nri_plrm.plugin.handlers import Plugin
from nri_plrm.topology.machines import load_topology
from nri_plrm.topology.synthetic import DEFAULT_SPEC
from nri_plrm.translate.manifest_to_pod import load_manifests

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    return main(list(argv), out=out), out.getvalue()


def test_simulate_seed_examples_json() -> None:
    paths = sorted(str(p) for p in EXAMPLES.glob("*.yaml"))
    code, out = run("simulate", "--output", "json", *paths)
    assert code == 0
    data = json.loads(out)
    pods = {p["name"]: p for p in data["pods"]}
    assert set(pods) >= {
        "pod-scope-mixed",
        "empty-shared-pool",
        "tightly-coupled-database",
        "container-scope-mixed",
        "ml-workload",
    }
    rejected = pods["empty-shared-pool"]
    assert rejected["admitted"] is False
    assert rejected["reason"] == "TopologyAffinityError"
    assert rejected["message"] == (
        "Pod Scope pod with pod-level resources failed admission under pod-scope topology manager"
    )
    mixed = pods["pod-scope-mixed"]
    assert mixed["admitted"] is True and len(mixed["cpu_ids"]) == 4
    kinds = {c["name"]: (c["assignment"], c["cpu_quota"]) for c in mixed["containers"]}
    assert kinds["main-app"] == ("pod_exclusive", -1)
    assert kinds["metrics-sidecar"][0] == kinds["logging-sidecar"][0] == "pod_shared"


def test_simulate_subprocess_table() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "nri_plrm.cli", "simulate", str(EXAMPLES / "pod-scope-mixed.yaml")],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr
    assert "main-app" in proc.stdout and "pod_exclusive" in proc.stdout


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["simulate", "/nonexistent/pods.yaml"], "/nonexistent/pods.yaml: no such manifest file"),
        (["simulate", "--topology", "sockets=0", "x.yaml"], "sockets"),
        (["simulate", "--sysfs", "/nonexistent", "x.yaml"], "--sysfs /nonexistent: not a dir"),
    ],
)
def test_simulate_bad_input_exits_2(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(*argv)[0] == 2
    assert message in capsys.readouterr().err


def test_simulate_bad_manifest(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec: {containers: 5}\n")
    assert run("simulate", str(bad))[0] == 2
    assert str(bad) in capsys.readouterr().err


def test_simulate_bad_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text('[topology_manager]\nscope = "node"\n[cpu_manager]\nreserved_cpus = "999"\n')
    code, _ = run("simulate", "--config", str(cfg), str(EXAMPLES / "pod-scope-mixed.yaml"))
    assert code == 2
    err = capsys.readouterr().err.splitlines()
    assert err == [
        f'nri-plrm simulate: {cfg}: topology_manager.scope: "node": must be one of container, pod'
    ]


def test_simulate_config_that_does_not_fit_the_machine(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text('[cpu_manager]\nreserved_cpus = "999"\n')
    assert run("simulate", "--config", str(cfg), str(EXAMPLES / "pod-scope-mixed.yaml"))[0] == 2
    assert 'cpu_manager.reserved_cpus: "999": CPUs 999 do not exist' in capsys.readouterr().err


def _write_checkpoint(directory: Path, sock: Path) -> dict[str, Any]:
    """Run pod-scope-mixed through a plugin that checkpoints to ``directory``."""
    topology = load_topology(DEFAULT_SPEC)
    plugin = Plugin(
        NodeLedger(Engine(topology, Config().engine_config()), store=CheckpointStore(directory))
    )
    pods = load_manifests([EXAMPLES / "pod-scope-mixed.yaml"])

    async def scenario() -> None:
        async with serve(plugin, str(sock)) as session:
            for pod in pods:
                await session.runtime.launch(pod)

    asyncio.run(scenario())
    (pod,) = plugin.ledger.pods()
    return {c.name: c.assignment for c in pod.containers}


def test_state_from_checkpoint(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    assignments = _write_checkpoint(state_dir, tmp_path / "nri.sock")
    before = sorted(os.listdir(state_dir))
    code, out = run(
        "state", "--state-dir", str(state_dir), "--topology", DEFAULT_SPEC, "-o", "json"
    )
    assert code == 0
    assert sorted(os.listdir(state_dir)) == before  # read-only
    data = json.loads(out)
    assert data["source"] == "checkpoint"
    (pod,) = data["pods"]
    assert pod["name"] == "pod-scope-mixed" and len(pod["cpu_ids"]) == 4
    shown = {c["name"]: c for c in pod["containers"]}
    for name, assignment in assignments.items():
        assert assignment is not None
        assert shown[name]["assignment"] == assignment.assignment.value
        assert shown[name]["cpus"] == str(assignment.cpus)
    assert shown["main-app"]["cpu_ids"] == assignments["main-app"].cpus.sorted()
    assert shown["metrics-sidecar"]["cpu_ids"] == []
    code, table = run("state", "--state-dir", str(state_dir), "--topology", DEFAULT_SPEC)
    assert code == 0
    assert "pod_exclusive" in table and "plrm-tutorial/pod-scope-mixed" in table


def test_state_damaged_checkpoint(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state_dir = tmp_path / "state"
    _write_checkpoint(state_dir, tmp_path / "nri.sock")
    path = state_dir / "state.json"
    doc = json.loads(path.read_text())
    doc["data"]["plugin"]["pods"] = {}
    path.write_text(json.dumps(doc))
    assert run("state", "--state-dir", str(state_dir), "--topology", DEFAULT_SPEC)[0] == 1
    assert "checksum does not match" in capsys.readouterr().err
    assert path.exists()


def test_state_table_shows_memory_in_the_units_used_elsewhere() -> None:
    """Issue 31 item 13: an inexact size reads 23.0Gi (as ``topology`` prints), not 24159504Ki."""
    from nri_plrm.cli.state import table

    memory = [{"memory_type": "memory", "size": 24159504 * 1024, "numa": [0]}]
    data = {
        "source": "checkpoint",
        "path": "state.json",
        "pods": [
            {
                "namespace": "ns",
                "name": "p",
                "cpu_ids": [],
                "memory": [{"memory_type": "memory", "size": 512 << 20, "numa": [0]}],
                "containers": [],
            }
        ],
        "allocatable": {"cpu_ids": [1, 2], "memory": memory},
    }
    text = table(data)
    assert "memory=23.0Gi@0" in text and "memory=512Mi@0" in text
    assert "Ki@" not in text
