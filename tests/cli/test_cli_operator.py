"""What a newcomer trips on: version and help, file errors that name the file once, manifest
paths (``-``, directories, empty files, duplicates across files, workload kinds), check-config
against this machine, readable topology, named machines and ``--fail-on-reject``."""

from __future__ import annotations

import io
import json
import re
import sys
from pathlib import Path

import pytest
from fakesysfs import write_sysfs

from nri_plrm import __version__
from nri_plrm.cli import main
from nri_plrm.topology.machines import MACHINES, load_topology

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"


def run(*argv: str, stdin: str | None = None) -> tuple[int, str]:
    out = io.StringIO()
    if stdin is not None:
        saved, sys.stdin = sys.stdin, io.StringIO(stdin)
    try:
        code = main(list(argv), out=out)
    finally:
        if stdin is not None:
            sys.stdin = saved
    return code, out.getvalue()


def test_version_option_and_bare_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert run("--version")[0] == 0
    assert capsys.readouterr().out == f"nri-plrm {__version__}\n"
    assert run("version") == (0, f"nri-plrm {__version__}\n")
    assert run() == (2, "")
    err = capsys.readouterr().err
    assert err.startswith("usage: nri-plrm [-h] [--version] COMMAND ...")
    assert "simulate" in err and "check-config" in err and "error:" not in err


def test_file_errors_name_the_file_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("x = [\n")
    assert run("check-config", str(bad))[0] == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"nri-plrm check-config: {bad}: not valid TOML: ")
    assert line.count(str(bad)) == 1
    assert run("simulate", "--config", str(tmp_path / "none.toml"), "x.yaml")[0] == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line == (
        f"nri-plrm simulate: {tmp_path}/none.toml: cannot read the config file: "
        "No such file or directory"
    )


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("", "{path}: no Pod in it (empty, or only comments)"),
        ("# nothing here\n---\n", "{path}: no Pod in it (empty, or only comments)"),
        (
            "- apiVersion: apps/v1\n  kind: Deployment\n  metadata: {name: web}\n"
            "  spec: {template: {spec: {containers: [{name: a, image: b}]}}}\n",
            "{path}: document 0: (document): a YAML list of 1 item (Deployment): must be a Pod, "
            "or a kind: List with Pods in items",
        ),
        (
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\n",
            "{path}: document 0: kind: 'Deployment': must be Pod: simulate its spec.template as "
            "a Pod",
        ),
    ],
)
def test_manifest_errors_are_one_clear_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, message: str
) -> None:
    path = tmp_path / "pods.yaml"
    path.write_text(content)
    assert run("simulate", str(path)) == (2, "")
    assert capsys.readouterr().err == f"nri-plrm simulate: {message.format(path=path)}\n"


def test_a_directory_is_reported_as_a_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run("simulate", str(tmp_path)) == (2, "")
    assert capsys.readouterr().err == (
        f"nri-plrm simulate: {tmp_path}: is a directory, not a manifest file "
        f"(give its files: {tmp_path}/*.yaml)\n"
    )


def test_dash_reads_stdin(capsys: pytest.CaptureFixture[str]) -> None:
    text = (EXAMPLES / "pod-scope-mixed.yaml").read_text()
    code, out = run("simulate", "-o", "json", "-", str(EXAMPLES / "besteffort.yaml"), stdin=text)
    assert code == 0
    assert [p["name"] for p in json.loads(out)["pods"]] == ["pod-scope-mixed", "besteffort"]
    assert run("simulate", "-", "-", stdin=text) == (2, "")
    assert "- given twice" in capsys.readouterr().err


def test_duplicate_pods_across_files_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The 8-CPU copy of a pod used to be reported for both pods."""
    original = EXAMPLES / "pod-scope-mixed.yaml"
    copy = tmp_path / "copy-with-cpu-8.yaml"
    copy.write_text(original.read_text().replace('cpu: "4"', 'cpu: "8"'))
    assert run("simulate", str(original), str(copy)) == (2, "")
    assert capsys.readouterr().err == (
        f"nri-plrm simulate: {copy}: metadata.name: 'pod-scope-mixed': duplicate pod "
        f"plrm-tutorial/pod-scope-mixed (first in {original}): every pod of one simulation "
        "needs its own namespace/name\n"
    )


def test_fail_on_reject_exits_3_only_with_a_rejection() -> None:
    rejected = str(EXAMPLES / "empty-shared-pool.yaml")
    admitted = str(EXAMPLES / "pod-scope-mixed.yaml")
    assert run("simulate", rejected)[0] == 0
    code, out = run("simulate", "--fail-on-reject", "-o", "json", admitted, rejected)
    assert code == 3
    pods = json.loads(out)["pods"]
    assert pods[1]["explanation"].startswith("exclusive containers request 4 CPUs")
    assert run("simulate", "--fail-on-reject", admitted)[0] == 0


def test_named_kubelet_machines_simulate_and_are_listed(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out = run(
        "simulate", "--topology", "topoDualSocketHT", str(EXAMPLES / "pod-scope-mixed.yaml")
    )
    assert code == 0
    assert out.startswith(
        "memory: the machine names none; simulated with 16Gi per NUMA node\n"
        "machine: 2 sockets, 2 NUMA nodes, 6 cores, 12 CPUs;"
    )
    assert "plrm-tutorial/pod-scope-mixed: pod CPUs 2,4,8,10; pod memory 4Gi on NUMA 0" in out
    assert run("simulate", "--help")[0] == 0
    help_text = " ".join(capsys.readouterr().out.split())
    for name in MACHINES:
        assert name in help_text


def test_topology_counts_and_memory_read_naturally() -> None:
    spec = (
        "sockets=1,numa_per_socket=1,cores_per_numa=1,threads_per_core=1,memory_per_numa=8874188Ki"
    )
    code, out = run("topology", "--topology", spec)
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "1 socket, 1 NUMA node, 1 core, 1 CPU (1 thread per core), 1 L3 cache"
    assert lines[1] == "memory: 8.5Gi"
    assert "Ki" not in out
    assert re.search(r"^0 +0 +1 +0 +0 +memory=8\.5Gi", out, flags=re.M)


def _node_config(tmp_path: Path, body: str) -> Path:
    write_sysfs(
        load_topology("sockets=1,numa_per_socket=1,cores_per_numa=2,threads_per_core=1"),
        str(tmp_path / "sys"),
    )
    path = tmp_path / "config.toml"
    path.write_text(f'[topology]\nsysfs_root = "{tmp_path}/sys"\n' + body)
    return path


@pytest.mark.parametrize(
    ("body", "error"),
    [
        (
            '[cpu_manager]\nreserved_cpus = "0-9999"\n',
            'cpu_manager.reserved_cpus: "0-9999": CPUs 2-9999 do not exist (online CPUs: 0-1)',
        ),
        (
            '[[memory_manager.reserved_memory]]\nnuma_node = 7\nmemory = "1Gi"\n',
            "memory_manager.reserved_memory[0].numa_node: 7: NUMA node does not exist (nodes: 0)",
        ),
    ],
)
def test_check_config_checks_this_machine_by_default(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], body: str, error: str
) -> None:
    path = _node_config(tmp_path, body)
    assert run("check-config", str(path)) == (2, "")
    assert capsys.readouterr().err == f"nri-plrm check-config: {path}: {error}\n"


def test_check_config_ok_says_what_it_checked(tmp_path: Path) -> None:
    path = _node_config(tmp_path, "")
    assert run("check-config", str(path)) == (
        0,
        f"{path}: ok, also against this machine ({tmp_path}/sys): 2 CPUs, 1 NUMA node\n",
    )


def test_check_config_says_what_it_did_not_check(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text(f'[topology]\nsysfs_root = "{tmp_path}/nowhere"\n')
    code, out = run("check-config", str(path))
    assert code == 0
    assert out == (
        f"{path}: valid; NOT checked against a machine (reserved CPUs and memory exist, NUMA "
        f"node limits): [topology] sysfs_root {tmp_path}/nowhere: not a directory; run it on "
        "the node or pass --sysfs DIR or --topology SPEC\n"
    )
    assert not out.rstrip().endswith(": ok")


def test_the_ci_gating_commands_of_examples_readme_exit_as_documented() -> None:
    text = (EXAMPLES / "README.md").read_text()
    block = text.split("## Gating manifests in CI", 1)[1].split("```sh\n", 1)[1].split("```")[0]
    commands = [line for line in block.splitlines() if line.strip()]
    assert len(commands) == 3
    for line in commands:
        command, expected = line.split("  # exit ")
        argv = command.split()
        assert argv[:3] == ["nri-plrm", "simulate", "--fail-on-reject"]
        args = [str(REPO / a) if a.startswith("examples/") else a for a in argv[1:]]
        assert run(*args)[0] == int(expected), line
