"""Every file the CLI reads besides the config (manifests and standard input, CPU-table files,
the kubeconfig) goes through the config's bounded, regular-file-only reader: a device, FIFO or
directory is refused at once naming the file and the rule, and nothing grows past the limit."""

from __future__ import annotations

import io
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest
from fakekube import kubeconfig_text

from nri_plrm.cli import main
from nri_plrm.config.file import parse_config
from nri_plrm.config.kubeconfig import MAX_KUBECONFIG_BYTES, kubeconfig_problems
from nri_plrm.topology.machines import MAX_CPU_TABLE_BYTES, load_topology
from nri_plrm.topology.model import TopologyError
from nri_plrm.translate.manifest_to_pod import MAX_MANIFEST_BYTES, ManifestError, load_manifests

ROOT = Path(__file__).resolve().parents[2]
MEMORY_CAP = 1 << 30
"""Address space given to a CLI subprocess: reading /dev/zero unbounded hits it in seconds."""


def _capped() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))


def cli(*args: str, stdin: int | None = subprocess.DEVNULL) -> subprocess.CompletedProcess[str]:
    """``python -m nri_plrm.cli ARGS`` with 1 GiB of address space and a 60 s deadline."""
    return subprocess.run(
        [sys.executable, "-m", "nri_plrm.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=stdin,
        cwd=ROOT,
        preexec_fn=_capped,
    )


def sparse(path: Path, size: int) -> Path:
    with open(path, "wb") as handle:
        handle.truncate(size)
    return path


# -- manifests -----------------------------------------------------------------------------------


def test_simulate_dev_zero_is_refused_as_a_device() -> None:
    proc = cli("simulate", "/dev/zero")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr == (
        "nri-plrm simulate: /dev/zero: a character device (mode crw-rw-rw-): the manifest file "
        "must be a regular file\n"
    )


def test_simulate_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    proc = cli("simulate", str(fifo))
    assert proc.returncode == 2, proc.stderr
    assert f"{fifo}: a FIFO (mode prw-" in proc.stderr
    assert "the manifest file must be a regular file" in proc.stderr


def test_stdin_is_read_up_to_the_limit() -> None:
    with open("/dev/zero", "rb") as zero:
        proc = cli("simulate", "-", stdin=zero.fileno())
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr == (
        f"nri-plrm simulate: <stdin>: larger than {MAX_MANIFEST_BYTES} bytes: too large for a "
        "manifest\n"
    )


def test_oversized_manifest_file_and_stream_are_refused(tmp_path: Path) -> None:
    big = sparse(tmp_path / "big.yaml", MAX_MANIFEST_BYTES + 1)
    with pytest.raises(ManifestError, match=f"larger than {MAX_MANIFEST_BYTES} bytes"):
        load_manifests([big])
    stream = io.TextIOWrapper(io.BytesIO(b"#" * (MAX_MANIFEST_BYTES + 1)))
    with pytest.raises(ManifestError, match=f"<stdin>: larger than {MAX_MANIFEST_BYTES}"):
        load_manifests(["-"], stdin=stream)


def test_manifest_at_the_limit_and_on_stdin_still_read() -> None:
    text = (ROOT / "examples" / "pod-scope-mixed.yaml").read_text()
    (from_stream,) = load_manifests(["-"], stdin=io.StringIO(text))
    (from_file,) = load_manifests([ROOT / "examples" / "pod-scope-mixed.yaml"])
    assert from_stream.uid == from_file.uid


# -- --topology ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "error"),
    [
        ("/tmp", "/tmp: a directory (mode drwx"),
        ("/dev/zero", "/dev/zero: a character device (mode crw-rw-rw-)"),
    ],
)
def test_topology_directory_and_device_are_named_as_such(value: str, error: str) -> None:
    with pytest.raises(TopologyError) as info:
        load_topology(value)
    assert str(info.value).startswith(error)
    assert str(info.value).endswith("the cpu-table file must be a regular file")


def test_topology_fifo_and_oversized_table_are_refused(tmp_path: Path) -> None:
    fifo = tmp_path / "machine.json"
    os.mkfifo(fifo)
    with pytest.raises(TopologyError, match=r"a FIFO \(mode prw-"):
        load_topology(str(fifo))
    big = sparse(tmp_path / "big.json", MAX_CPU_TABLE_BYTES + 1)
    with pytest.raises(TopologyError, match=f"larger than {MAX_CPU_TABLE_BYTES} bytes"):
        load_topology(str(big))
    with pytest.raises(TopologyError, match="no such cpu-table file"):
        load_topology(str(tmp_path / "missing.json"))


@pytest.mark.parametrize("command", ["topology", "simulate", "check-config"])
def test_empty_topology_is_refused(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text("")
    args = {
        "topology": ["topology", "--topology", ""],
        "simulate": ["simulate", "--topology", "", str(ROOT / "examples" / "pod-scope-mixed.yaml")],
        "check-config": ["check-config", "--topology", "", str(cfg)],
    }[command]
    assert main(args, out=io.StringIO()) == 2
    error = capsys.readouterr().err
    assert f"nri-plrm {command}: topology '': empty: give a cpu-table file" in error


def test_empty_sysfs_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["topology", "--sysfs", ""], out=io.StringIO()) == 2
    assert capsys.readouterr().err == 'nri-plrm topology: --sysfs "": not a directory\n'


# -- kubeconfig ----------------------------------------------------------------------------------


def kubernetes_config(kubeconfig: str) -> str:
    return f'[kubernetes]\nenabled = true\nkubeconfig = "{kubeconfig}"\n'


RULE = (
    "[kubernetes] enabled = true needs a readable kubeconfig (or an empty kubeconfig for the "
    "in-cluster service account)"
)


def test_check_config_refuses_a_missing_kubeconfig(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text(kubernetes_config("/nonexistent"))
    assert main(["check-config", "--topology", "topoDualSocketHT", str(cfg)]) == 2
    assert capsys.readouterr().err == (
        f'nri-plrm check-config: {cfg}: kubernetes.kubeconfig: "/nonexistent": cannot read the '
        f"kubeconfig: No such file or directory: {RULE}\n"
    )


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (None, "a character device (mode crw-rw-rw-): the kubeconfig must be a regular file"),
        ("clusters: [\n", "not valid YAML: "),
        ("- a list\n", "not a kubeconfig: the document must be a mapping"),
        ("current-context: x\n", "not a kubeconfig: missing 'clusters'"),
        (
            "clusters: []\ncontexts: []\n",
            "no current-context: set one (kubectl config use-context NAME --kubeconfig FILE)",
        ),
        (
            "clusters: []\ncontexts: [{name: a, context: {cluster: c}}]\ncurrent-context: a\n",
            "current-context 'a': its cluster or user 'c' is not defined in the file",
        ),
        (
            "clusters: [{name: c, cluster: {}}]\ncontexts: [{name: a, context: {cluster: c}}]\n"
            "current-context: a\n",
            "current-context 'a': its cluster 'c' has no server",
        ),
    ],
)
def test_kubeconfig_problems_name_the_key_the_file_and_the_rule(
    tmp_path: Path, content: str | None, problem: str
) -> None:
    path = "/dev/zero"
    if content is not None:
        path = str(tmp_path / "kubeconfig")
        Path(path).write_text(content)
    (line,) = kubeconfig_problems(parse_config(kubernetes_config(path)))
    assert line.startswith(f'kubernetes.kubeconfig: "{path}": {problem}')
    assert line.endswith(RULE)


def test_usable_oversized_and_unused_kubeconfigs(tmp_path: Path) -> None:
    good = tmp_path / "kubeconfig"
    good.write_text(kubeconfig_text("https://127.0.0.1:6443"))
    assert kubeconfig_problems(parse_config(kubernetes_config(str(good)))) == []
    big = sparse(tmp_path / "big", MAX_KUBECONFIG_BYTES + 1)
    (line,) = kubeconfig_problems(parse_config(kubernetes_config(str(big))))
    assert f"larger than {MAX_KUBECONFIG_BYTES} bytes" in line
    disabled = f'[kubernetes]\nkubeconfig = "{tmp_path}/missing"\n'
    assert kubeconfig_problems(parse_config(disabled)) == []
    assert kubeconfig_problems(parse_config("[kubernetes]\nenabled = true\n")) == []


def test_run_refuses_to_start_with_a_missing_kubeconfig(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text(
        f'[nri]\nsocket = "{tmp_path}/nri.sock"\n[state]\ndir = "{tmp_path}/state"\n'
        f'[pod_resources]\nsocket = "{tmp_path}/pr.sock"\n' + kubernetes_config("/nonexistent")
    )
    proc = cli("run", "--config", str(cfg))
    assert proc.returncode == 2, proc.stderr
    assert 'kubernetes.kubeconfig: "/nonexistent": cannot read the kubeconfig' in proc.stderr
