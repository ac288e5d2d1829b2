"""The Debian package's scripts, run for real against a scratch DPKG_ROOT (no dpkg database)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DEB = REPO / "packaging" / "deb"


def run_script(name: str, root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "DPKG_ROOT": str(root)}
    return subprocess.run(
        ["sh", str(DEB / name), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


@pytest.mark.parametrize("script", ["postinst", "prerm", "postrm"])
def test_maintainer_scripts_are_posix_sh_and_executable(script: str) -> None:
    path = DEB / script
    assert os.access(path, os.X_OK)
    assert path.read_text().startswith("#!/bin/sh\n")
    assert subprocess.run(["sh", "-n", str(path)], check=False).returncode == 0
    if shutil.which("dash"):
        assert subprocess.run(["dash", "-n", str(path)], check=False).returncode == 0


def test_build_scripts_parse() -> None:
    for script in (DEB / "build.sh", REPO / "scripts" / "ci-packaging.sh"):
        assert os.access(script, os.X_OK), script
        assert subprocess.run(["bash", "-n", str(script)], check=False).returncode == 0


def test_configure_creates_a_private_state_dir_and_starts_nothing(tmp_path: Path) -> None:
    result = run_script("postinst", tmp_path, "configure", "")
    assert result.returncode == 0, result.stderr
    state = tmp_path / "var" / "lib" / "nri-plrm"
    assert state.is_dir()
    assert state.stat().st_mode & 0o777 == 0o700


def test_remove_keeps_state_and_purge_removes_it(tmp_path: Path) -> None:
    assert run_script("postinst", tmp_path, "configure", "").returncode == 0
    checkpoint = tmp_path / "var" / "lib" / "nri-plrm" / "state.json"
    checkpoint.write_text("{}")
    venv_leftover = tmp_path / "opt" / "nri-plrm" / "lib" / "__pycache__" / "x.pyc"
    venv_leftover.parent.mkdir(parents=True)
    venv_leftover.write_bytes(b"")
    (tmp_path / "etc" / "nri-plrm").mkdir(parents=True)
    (tmp_path / "etc" / "nri-plrm" / "config.toml.dpkg-old").write_text("")

    assert run_script("prerm", tmp_path, "remove").returncode == 0
    assert run_script("postrm", tmp_path, "remove").returncode == 0
    assert checkpoint.exists(), "remove must keep the checkpoint"
    assert not (tmp_path / "opt" / "nri-plrm").exists()

    assert run_script("postrm", tmp_path, "purge").returncode == 0
    assert not (tmp_path / "var" / "lib" / "nri-plrm").exists()
    assert not (tmp_path / "etc" / "nri-plrm").exists()


@pytest.mark.parametrize("script", ["postinst", "prerm", "postrm"])
def test_unknown_action_fails(script: str, tmp_path: Path) -> None:
    result = run_script(script, tmp_path, "bogus-action")
    assert result.returncode == 1
    assert "unknown argument 'bogus-action'" in result.stderr


def test_control_template_and_conffiles() -> None:
    control = (DEB / "control.in").read_text()
    fields = dict(
        line.split(": ", 1) for line in control.splitlines() if line and not line[0].isspace()
    )
    assert fields["Package"] == "nri-plrm"
    assert fields["Version"] == "@VERSION@" and fields["Architecture"] == "@ARCH@"
    assert fields["Depends"].startswith("python@PYVER@")
    assert "python3-grpcio" not in control and "python3-protobuf" not in control
    build = (DEB / "build.sh").read_text()
    assert "/etc/default/nri-plrm /etc/nri-plrm/config.toml" in build
    assert "nri-plrm_${version}_${arch}.deb" in build


def test_remove_leaves_no_dangling_enablement_link(tmp_path: Path) -> None:
    """Issue 31 item 13: after `apt remove`, multi-user.target.wants/nri-plrm.service (pointing
    at the removed unit file) is gone; an administrator's own unit in /etc and other links stay."""
    wants = tmp_path / "etc" / "systemd" / "system" / "multi-user.target.wants"
    wants.mkdir(parents=True)
    link = wants / "nri-plrm.service"
    link.symlink_to("/lib/systemd/system/nri-plrm.service")
    other = wants / "containerd.service"
    other.symlink_to("/lib/systemd/system/containerd.service")
    (tmp_path / "lib" / "systemd" / "system").mkdir(parents=True)
    (tmp_path / "lib" / "systemd" / "system" / "containerd.service").write_text("")

    assert run_script("postrm", tmp_path, "upgrade").returncode == 0
    assert link.is_symlink(), "an upgrade keeps the unit enabled"
    assert run_script("prerm", tmp_path, "remove").returncode == 0
    result = run_script("postrm", tmp_path, "remove")
    assert result.returncode == 0, result.stderr
    assert not link.is_symlink()
    assert other.is_symlink()

    custom = tmp_path / "etc" / "systemd" / "system" / "nri-plrm.service"
    custom.write_text("[Service]\n")
    link.symlink_to("/etc/systemd/system/nri-plrm.service")
    assert run_script("postrm", tmp_path, "remove").returncode == 0
    assert link.is_symlink(), "a link to the administrator's own unit file is not dangling"


def test_build_ships_the_dashboard_and_the_example_config() -> None:
    """Issue 31 items 5 and 13: the dashboard and the example `nri-plrm run` names are packaged."""
    build = (DEB / "build.sh").read_text()
    assert (
        '"$repo/packaging/grafana/nri-plrm.json" \\\n'
        '    "$root/usr/share/nri-plrm/grafana/nri-plrm.json"' in build
    )
    assert 'install -m 0644 "$repo/packaging/config.toml" "$doc/config.toml"' in build
    from nri_plrm.cli.run import EXAMPLE_CONFIG

    assert EXAMPLE_CONFIG == "/usr/share/doc/nri-plrm/config.toml"
