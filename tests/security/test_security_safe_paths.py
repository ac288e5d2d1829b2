"""Sockets and the state directory in directories other users can write (issue 12, finding 8):
``check-config`` reports them and ``run`` refuses them (exit 2, with the key path); the state
directory is never chmodded. Modes and owners are set on tmp directories; cases that need another
owner use ``os.chown`` and run as root only (CI runs as root)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from daemon_process import run_cli

from nri_plrm.checkpoint.store import CheckpointStore
from nri_plrm.config.file import parse_config
from nri_plrm.config.host_checks import host_problems, path_problem

OTHER_UID = 12345
OTHER_GID = 12345
KEYS = ("nri.socket", "pod_resources.socket", "state.dir")
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")


def config_text(tmp: Path, **paths: str) -> str:
    nri = paths.get("nri.socket", f"{tmp}/nri/nri.sock")
    pod_resources = paths.get("pod_resources.socket", f"{tmp}/state/pod-resources.sock")
    state = paths.get("state.dir", f"{tmp}/state")
    return f"""
[nri]
socket = "{nri}"
[state]
dir = "{state}"
kubelet_cpu_manager_state = ""
[pod_resources]
socket = "{pod_resources}"
"""


def place(tmp: Path, key: str, directory: Path) -> str:
    """The path for ``key`` inside ``directory``."""
    return str(directory / ("state" if key == "state.dir" else "plugin.sock"))


def test_private_paths_are_accepted(tmp_path: Path) -> None:
    config = parse_config(config_text(tmp_path))
    assert host_problems(config) == []


@pytest.mark.parametrize("key", KEYS)
def test_world_writable_directory_is_reported_by_check_config(tmp_path: Path, key: str) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    cfg = tmp_path / "config.toml"
    cfg.write_text(config_text(tmp_path, **{key: place(tmp_path, key, shared)}))
    proc = run_cli("check-config", str(cfg))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    (line,) = proc.stderr.splitlines()
    assert line.startswith(f"nri-plrm check-config: {cfg}: {key}: ")
    assert f"directory {shared} is writable by everyone and not sticky" in line


def test_run_refuses_before_touching_anything(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    cfg = tmp_path / "config.toml"
    cfg.write_text(config_text(tmp_path, **{"nri.socket": str(shared / "nri.sock")}))
    proc = run_cli("run", "--config", str(cfg))
    assert proc.returncode == 2, proc.stderr
    assert "nri.socket" in proc.stderr and "pose as containerd" in proc.stderr
    assert not (tmp_path / "state").exists()


def test_every_ancestor_is_walked(tmp_path: Path) -> None:
    top = tmp_path / "a"
    deep = top / "b" / "c"
    deep.mkdir(parents=True)
    top.chmod(0o777)
    problem = path_problem(str(deep / "d" / "plugin.sock"), is_dir=False)
    assert problem is not None and f"directory {top} is writable by everyone" in problem


def test_group_writable_directory_is_refused_unless_the_group_is_root(tmp_path: Path) -> None:
    shared = tmp_path / "group"
    shared.mkdir()
    if os.geteuid() == 0:
        os.chown(shared, 0, OTHER_GID)
    shared.chmod(0o775)
    gid = shared.stat().st_gid
    if gid == 0:
        pytest.skip("needs a directory group other than root's")
    problem = path_problem(str(shared / "state"), is_dir=True)
    assert problem is not None and f"writable by group {gid}" in problem
    if os.geteuid() == 0:
        os.chown(shared, 0, 0)
        assert path_problem(str(shared / "state"), is_dir=True) is None


def test_the_state_directory_itself_must_not_be_writable_by_others(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    state.chmod(0o1777)
    config = parse_config(config_text(tmp_path))
    state_line, socket_line = host_problems(config)
    assert state_line.startswith(f'state.dir: "{state}": directory {state} is writable by everyone')
    assert socket_line.startswith("pod_resources.socket: ")


def test_sticky_directory_needs_the_entry_to_exist_and_be_ours(tmp_path: Path) -> None:
    sticky = tmp_path / "tmp"
    sticky.mkdir()
    sticky.chmod(0o1777)
    missing = path_problem(str(sticky / "nri-plrm" / "state"), is_dir=True)
    assert missing is not None and "does not exist" in missing and "create it first" in missing
    (sticky / "nri-plrm").mkdir(mode=0o755)
    assert path_problem(str(sticky / "nri-plrm" / "state"), is_dir=True) is None
    assert path_problem(str(sticky / "nri-plrm" / "p.sock"), is_dir=False) is None


@as_root
def test_sticky_directory_entry_owned_by_another_user_is_refused(tmp_path: Path) -> None:
    sticky = tmp_path / "tmp"
    sticky.mkdir()
    sticky.chmod(0o1777)
    theirs = sticky / "theirs"
    theirs.mkdir(mode=0o755)
    os.chown(theirs, OTHER_UID, OTHER_GID)
    problem = path_problem(str(theirs / "state"), is_dir=True)
    assert problem is not None and f"{theirs} is owned by uid {OTHER_UID}" in problem


@as_root
def test_directory_owned_by_another_user_is_refused(tmp_path: Path) -> None:
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o755)
    os.chown(theirs, OTHER_UID, OTHER_GID)
    problem = path_problem(str(theirs / "nri.sock"), is_dir=False)
    assert problem is not None and f"directory {theirs} is owned by uid {OTHER_UID}" in problem


@as_root
def test_socket_owned_by_another_user_is_refused(tmp_path: Path) -> None:
    sock = tmp_path / "nri.sock"
    sock.write_bytes(b"")
    os.chown(sock, OTHER_UID, OTHER_GID)
    problem = path_problem(str(sock), is_dir=False)
    assert problem is not None and f"{sock} is owned by uid {OTHER_UID}" in problem


def test_symlink_into_a_writable_directory_is_followed_for_the_check(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    (tmp_path / "link").symlink_to(shared)
    problem = path_problem(str(tmp_path / "link" / "nri.sock"), is_dir=False)
    assert problem is not None and f"directory {shared} is writable by everyone" in problem


def test_preconnected_socket_skips_the_nri_socket_path(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    config = parse_config(config_text(tmp_path, **{"nri.socket": str(shared / "nri.sock")}))
    assert [p.split(":")[0] for p in host_problems(config)] == ["nri.socket"]
    assert host_problems(config, nri_socket=False) == []


def test_existing_state_directory_is_never_chmodded(tmp_path: Path) -> None:
    """A pre-existing readable state directory is left as it is (the daemon used to chmod it)."""
    state = tmp_path / "state"
    state.mkdir()
    state.chmod(0o755)
    assert host_problems(parse_config(config_text(tmp_path))) == []
    CheckpointStore(state).save({"x": 1})
    assert stat.S_IMODE(state.stat().st_mode) == 0o755
