"""Issue 16: the kubelet-format export never lands on the kubelet's own state files.

``check-config`` and ``run`` refuse a ``[state] kubelet_state_dir`` that is the kubelet's
directory; the writer never replaces a file it did not write, and still replaces its own after a
restart or a crash between its two writes."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import time
from pathlib import Path

import pytest
from daemon_process import config_text as daemon_config_text
from daemon_process import daemon_on_simulator, run_cli, stop_cleanly
from fakesysfs import write_sysfs
from kubelet_decode import decode_cpu_manager_state, decode_memory_manager_state
from plrm_runtime import FakeRuntime

import nri_plrm.checkpoint.kubelet_export as kubelet_export
from nri_plrm.base.cpuset import CPUSet
from nri_plrm.checkpoint.flusher import Flusher
from nri_plrm.checkpoint.kubelet import (
    CPUManagerState,
    MemoryManagerState,
    encode_cpu_manager_state,
    encode_memory_manager_state,
    write_kubelet_state,
)
from nri_plrm.checkpoint.kubelet_export import RECORD_FILE, ForeignFileError, export_dir_problem
from nri_plrm.topology.machines import MACHINES
from nri_plrm.translate.manifest_to_pod import load_manifests

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
RESTART_FAILURE = "refuses to start at its next restart"
KUBELET_NONE_CPU = encode_cpu_manager_state(CPUManagerState("none", CPUSet()), "v2")
KUBELET_NONE_MEMORY = encode_memory_manager_state(MemoryManagerState("None", {}), "v1")
OURS = CPUManagerState("static", CPUSet.parse("0-3"), {"pod-a": {"main": CPUSet.parse("4-5")}})


def kubelet_tree(root: Path) -> Path:
    """A kubelet root directory as a kubelet with its managers set to none leaves it."""
    root.mkdir()
    (root / "cpu_manager_state").write_bytes(KUBELET_NONE_CPU)
    (root / "memory_manager_state").write_bytes(KUBELET_NONE_MEMORY)
    for sub in ("pods", "checkpoints", "pod-resources"):
        (root / sub).mkdir()
    return root


def config_text(tmp: Path, export: Path, kubelet_state: str) -> str:
    return daemon_config_text(
        tmp,
        kubelet_state=kubelet_state,
        state_keys=f'kubelet_state_dir = "{export}"\n',
        log_format="text",
    )


@pytest.mark.parametrize("command", ["check-config", "run"])
def test_the_kubelet_directory_is_refused_naming_the_restart_failure(
    tmp_path: Path, command: str
) -> None:
    kubelet = kubelet_tree(tmp_path / "kubelet")
    cfg = tmp_path / "config.toml"
    cfg.write_text(config_text(tmp_path, kubelet, f"{kubelet}/cpu_manager_state"))
    args = ["run", "--config", str(cfg)] if command == "run" else ["check-config", str(cfg)]
    proc = run_cli(*args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f'state.kubelet_state_dir: "{kubelet}": ' in proc.stderr
    assert RESTART_FAILURE in proc.stderr
    assert "configured policy" in proc.stderr
    assert (kubelet / "cpu_manager_state").read_bytes() == KUBELET_NONE_CPU
    assert not (kubelet / RECORD_FILE).exists()


def test_the_directory_of_kubelet_cpu_manager_state_is_refused_even_empty(tmp_path: Path) -> None:
    kubelet = tmp_path / "kubelet"
    kubelet.mkdir()
    problem = export_dir_problem(f"{kubelet}/", f"{kubelet}/cpu_manager_state")
    assert problem is not None and "state.kubelet_cpu_manager_state" in problem
    assert RESTART_FAILURE in problem
    (tmp_path / "alias").symlink_to(kubelet)
    assert export_dir_problem(str(tmp_path / "alias"), f"{kubelet}/cpu_manager_state")


@pytest.mark.parametrize("sibling", ["pods", "checkpoints"])
def test_a_directory_with_the_kubelets_siblings_is_refused(tmp_path: Path, sibling: str) -> None:
    root = tmp_path / "var-lib-kubelet"
    (root / sibling).mkdir(parents=True)
    problem = export_dir_problem(str(root))
    assert problem is not None and f"the kubelet's {sibling}/" in problem


@pytest.mark.parametrize(
    ("name", "raw", "policy"),
    [
        ("cpu_manager_state", KUBELET_NONE_CPU, "none"),
        ("memory_manager_state", KUBELET_NONE_MEMORY, "None"),
    ],
)
def test_a_state_file_of_another_policy_is_refused(
    tmp_path: Path, name: str, raw: bytes, policy: str
) -> None:
    export = tmp_path / "elsewhere"
    export.mkdir()
    (export / name).write_bytes(raw)
    problem = export_dir_problem(str(export))
    assert problem is not None and f'holds {name} of policy "{policy}"' in problem
    with pytest.raises(ForeignFileError, match=f'{name} of policy "{policy}"'):
        write_kubelet_state(export, OURS, MemoryManagerState("Static", {}))
    assert (export / name).read_bytes() == raw
    assert sorted(os.listdir(export)) == [name]


def test_a_static_file_the_plugin_did_not_write_is_never_replaced(tmp_path: Path) -> None:
    export = tmp_path / "export"
    export.mkdir()
    theirs = encode_cpu_manager_state(CPUManagerState("static", CPUSet.parse("0-63")), "v2")
    (export / "cpu_manager_state").write_bytes(theirs)
    problem = export_dir_problem(str(export))
    assert problem is not None and "nri-plrm did not write" in problem
    with pytest.raises(ForeignFileError, match="did not write"):
        write_kubelet_state(export, OURS, None)
    assert (export / "cpu_manager_state").read_bytes() == theirs


def test_a_planted_symlink_is_neither_followed_nor_replaced(tmp_path: Path) -> None:
    export = tmp_path / "export"
    export.mkdir()
    target = tmp_path / "target"
    target.write_bytes(b"keep")
    (export / "cpu_manager_state").symlink_to(target)
    with pytest.raises(ForeignFileError, match="symlink"):
        write_kubelet_state(export, OURS, None)
    assert target.read_bytes() == b"keep"
    assert (export / "cpu_manager_state").is_symlink()


def test_own_files_stay_replaceable_after_a_crash_between_the_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    export = tmp_path / "export"
    write_kubelet_state(export, OURS, None)
    first = (export / "cpu_manager_state").read_bytes()
    second_state = CPUManagerState("static", CPUSet.parse("0-1"), {})
    real_write_at = kubelet_export.write_at

    def crash_after_the_record(
        dfd: int, name: str, payload: bytes, mode: int, *, flusher: Flusher | None = None
    ) -> None:
        if name != RECORD_FILE:
            raise OSError("killed")
        real_write_at(dfd, name, payload, mode, flusher=flusher)

    monkeypatch.setattr(kubelet_export, "write_at", crash_after_the_record)
    with pytest.raises(OSError, match="killed"):
        write_kubelet_state(export, second_state, None)
    monkeypatch.undo()
    assert (export / "cpu_manager_state").read_bytes() == first
    assert export_dir_problem(str(export)) is None
    third = CPUManagerState("static", CPUSet.parse("0"), {})
    write_kubelet_state(export, third, None)
    assert decode_cpu_manager_state((export / "cpu_manager_state").read_bytes()).state == third


async def wait_for_pod(path: Path, uid: str, timeout: float = 20) -> bytes:
    """The exported cpu_manager_state once it lists pod ``uid``."""
    deadline = time.monotonic() + timeout
    while True:
        if path.exists():
            raw = path.read_bytes()
            if uid in decode_cpu_manager_state(raw).state.pod_entries:
                return raw
        assert time.monotonic() < deadline, f"{path} never listed pod {uid}"
        await asyncio.sleep(0.05)


def test_a_fresh_directory_receives_both_files_run_after_run(tmp_path: Path) -> None:
    write_sysfs(MACHINES["default"], str(tmp_path / "sys"))
    kubelet = kubelet_tree(tmp_path / "kubelet")
    export = tmp_path / "nri-plrm-export"
    cfg = tmp_path / "config.toml"
    cfg.write_text(config_text(tmp_path, export, f"{kubelet}/cpu_manager_state"))
    assert run_cli("check-config", str(cfg)).returncode == 0
    (spec,) = load_manifests([EXAMPLES / "pod-scope-mixed.yaml"])
    log = tmp_path / "daemon.log"

    async def one_run(uid: str) -> bytes:
        async with daemon_on_simulator(cfg, log, tmp_path / "nri.sock") as (sim, proc):
            await FakeRuntime(sim).launch(dataclasses.replace(spec, uid=uid))
            cpu = await wait_for_pod(export / "cpu_manager_state", uid)
            assert await stop_cleanly(proc) == 0
            assert (export / "memory_manager_state").exists()
            return cpu

    first = asyncio.run(one_run("pod-one"))
    assert decode_cpu_manager_state(first).state.policy_name == "static"
    memory = decode_memory_manager_state((export / "memory_manager_state").read_bytes())
    assert memory.state.policy_name == "Static"
    assert run_cli("check-config", str(cfg)).returncode == 0
    second = asyncio.run(one_run("pod-two"))
    assert second != first
    assert (kubelet / "cpu_manager_state").read_bytes() == KUBELET_NONE_CPU
    assert "kubelet-format export" not in (tmp_path / "daemon.log").read_text()
