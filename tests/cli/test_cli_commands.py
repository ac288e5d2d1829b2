"""The CLI in-process and as a subprocess: help, version, check-config, topology, state."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from static_view import StaticView

from nri_plrm.base.cpuset import CPUSet
from nri_plrm.cli import build_parser, main
from nri_plrm.engine.spec import AssignmentType, ContainerAssignment, MemoryBlock
from nri_plrm.ledger.view import ContainerView, PodView
from nri_plrm.podresources.server import PodResourcesServer, PodResourcesService

REPO = Path(__file__).resolve().parents[2]
SPEC = "sockets=2,numa_per_socket=2,cores_per_numa=8,threads_per_core=2,memory_per_numa=16Gi"
COMMANDS = ["run", "simulate", "state", "topology", "check-config", "version"]


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(list(argv), out=out)
    return code, out.getvalue()


def run_process(*argv: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run(
        [sys.executable, "-m", "nri_plrm.cli", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=REPO,
    )


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help_with_examples(command: str) -> None:
    sub = build_parser()._subparsers._group_actions[0].choices[command]  # type: ignore[union-attr]
    text = sub.format_help()
    assert "examples:" in text
    assert f"nri-plrm {command}" in text


def test_version() -> None:
    assert run("version") == (0, "nri-plrm 0.1.0\n")


def test_version_subprocess() -> None:
    proc = run_process("version")
    assert proc.returncode == 0
    assert proc.stdout == "nri-plrm 0.1.0\n"


def test_no_command_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert run()[0] == 2


def test_check_config_ok() -> None:
    path = REPO / "packaging" / "config.toml"
    assert run("check-config", str(path), "--topology", SPEC) == (
        0,
        f"{path}: ok, also against the given machine: 64 CPUs, 4 NUMA nodes\n",
    )


def test_check_config_lists_every_error(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(
        '[nri]\nplugin_index = "1"\n[log]\nlevel = "loud"\n[cpu_manager]\nreserved = "0"\n'
    )
    proc = run_process("check-config", str(path))
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert lines == [
        f'nri-plrm check-config: {path}: nri.plugin_index: "1": must be exactly 2 digits as a '
        'string (e.g. "50")',
        f'nri-plrm check-config: {path}: log.level: "loud": must be one of debug, info, '
        "warning, error",
        f'nri-plrm check-config: {path}: cpu_manager.reserved: "0": unknown key; did you mean '
        '"reserved_cpus"?',
    ]


def test_check_config_against_a_machine(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "c.toml"
    path.write_text('[cpu_manager]\nreserved_cpus = "0,100"\n')
    code, _ = run("check-config", "--topology", SPEC, str(path))
    assert code == 2
    assert 'cpu_manager.reserved_cpus: "0,100": CPUs 100 do not exist' in capsys.readouterr().err


def test_check_config_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run("check-config", str(tmp_path / "nope.toml"))[0] == 2
    assert "cannot read the config file" in capsys.readouterr().err


def test_topology_json() -> None:
    code, out = run("topology", "--topology", SPEC, "--output", "json")
    assert code == 0
    data = json.loads(out)
    assert data["num_sockets"] == 2 and data["num_numa_nodes"] == 4 and data["num_cpus"] == 64
    assert data["numa_nodes"][0]["distances"][0] == 10


def test_topology_table() -> None:
    code, out = run("topology", "--topology", SPEC)
    assert code == 0
    assert out.startswith("2 sockets, 4 NUMA nodes, 32 cores, 64 CPUs (2 threads per core)")
    assert "NUMA  CPUS" in out
    assert "memory=16Gi" in out


def test_topology_bad_spec(capsys: pytest.CaptureFixture[str]) -> None:
    assert run("topology", "--topology", "sockets=x")[0] == 2
    assert "sockets" in capsys.readouterr().err


def test_topology_from_sysfs(tmp_path: Path) -> None:
    from fakesysfs import write_sysfs

    from nri_plrm.topology.machines import load_topology

    root = tmp_path / "sys"
    write_sysfs(load_topology(SPEC), str(root))
    proc = run_process("topology", "--sysfs", str(root), "--output", "json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["num_cpus"] == 64


def test_state_from_a_live_socket(tmp_path: Path) -> None:
    assignment = ContainerAssignment(
        AssignmentType.POD_EXCLUSIVE,
        CPUSet([2, 34]),
        CPUSet([0]),
        (MemoryBlock((0,), "memory", 2**30),),
    )
    view = StaticView(
        (
            PodView(
                "u",
                "prod",
                "db",
                (ContainerView("main", assignment), ContainerView("side")),
                CPUSet([2, 3, 34, 35]),
                (MemoryBlock((0,), "memory", 2**31),),
            ),
        ),
        CPUSet.parse("1-63"),
    )
    sock = str(tmp_path / "pr.sock")
    server = PodResourcesServer(PodResourcesService(view), sock)
    server.start()
    try:
        code, out = run("state", "--socket", sock, "--output", "json")
        assert code == 0
        data = json.loads(out)
        assert data["source"] == "socket"
        pod = data["pods"][0]
        assert (pod["namespace"], pod["name"], pod["cpu_ids"]) == ("prod", "db", [2, 3, 34, 35])
        assert pod["memory"] == [{"memory_type": "memory", "size": 2**31, "numa": [0]}]
        assert [c["cpu_ids"] for c in pod["containers"]] == [[2, 34], []]
        assert data["allocatable"]["cpu_ids"] == list(range(1, 64))
        code, out = run("state", "--socket", sock)
        assert code == 0
        assert "prod/db  (pod)" in out
        assert "2-3,34-35" in out and "memory=2Gi@0" in out
        assert "\nallocatable: 63 CPUs (ids 1-63); memory -\n" in out
    finally:
        server.stop()


def test_state_socket_unreachable(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run("state", "--socket", str(tmp_path / "none.sock"))[0] == 1
    assert capsys.readouterr().err == (
        f"nri-plrm state: PodResources socket {tmp_path}/none.sock does not exist: is the plugin "
        "running (systemctl status nri-plrm) with [pod_resources] enabled, and is this its "
        "[pod_resources] socket?\n"
    )


def test_state_without_checkpoint(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _ = run("state", "--state-dir", str(tmp_path), "--topology", SPEC)
    assert code == 1
    assert "no checkpoint" in capsys.readouterr().err
