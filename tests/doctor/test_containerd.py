"""doctor's containerd checks against fake config trees, real sockets and fake binaries."""

from __future__ import annotations

import dataclasses
import os
import re
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from nri_plrm.config.file import parse_config
from nri_plrm.config.settings import Config, NRISettings
from nri_plrm.doctor import containerd
from nri_plrm.doctor.containerd import ContainerdConfig, go_duration, read_containerd_config
from nri_plrm.doctor.containerd_version import ContainerdVersion
from nri_plrm.doctor.result import Status

REPO = Path(__file__).resolve().parents[2]
INSTALL_TOML = re.findall(r"```toml\n(.*?)```", (REPO / "docs/install.md").read_text(), re.S)[0]
V2_ENABLED = """version = 2
[plugins."io.containerd.nri.v1.nri"]
  disable = false
  socket_path = "/var/run/nri/nri.sock"
  plugin_request_timeout = "5s"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
  SystemdCgroup = true
"""
V2_DISABLED = V2_ENABLED.replace("disable = false", "disable = true")
V3_DISABLED = INSTALL_TOML.replace("disable = false\n", "disable = true\n", 1)


def write(path: Path, text: str) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return str(path)


def plugin_config(**nri: object) -> Config:
    return dataclasses.replace(Config(), nri=dataclasses.replace(NRISettings(), **nri))


V2_VERSION = ContainerdVersion("/run/containerd/containerd.sock", (2, 1, 4), "v2.1.4")
V1_VERSION = ContainerdVersion("/run/containerd/containerd.sock", (1, 7, 27), "1.7.27")


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("5s", 5.0), ("500ms", 0.5), ("1m30s", 90.0), ("1.5h", 5400.0), ("0", 0.0), ("250us", 2.5e-4)],
)
def test_go_durations(text: str, seconds: float) -> None:
    assert go_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["5", "5 s", "s", "5seconds", "-5s", "5s "])
def test_bad_go_durations(text: str) -> None:
    with pytest.raises(ValueError, match="Go duration"):
        go_duration(text)


# --------------------------------------------------------------------------- config files


def test_install_guide_section_passes_every_check(tmp_path: Path) -> None:
    cfg = read_containerd_config(write(tmp_path / "config.toml", INSTALL_TOML))
    assert cfg.version == 3 and cfg.nri["plugin_request_timeout"] == "5s"
    config = plugin_config(request_timeout=5.0)
    assert containerd.check_config_file(cfg).status is Status.OK
    assert containerd.check_nri_enabled(cfg, V2_VERSION).status is Status.OK
    timeouts = containerd.check_timeouts(cfg, config)
    assert timeouts.status is Status.OK, timeouts
    assert "registration 5s, request 5s" in timeouts.message


def test_v2_config_enabled_and_its_runc_driver(tmp_path: Path) -> None:
    cfg = read_containerd_config(write(tmp_path / "config.toml", V2_ENABLED))
    assert cfg.version == 2 and cfg.systemd_cgroup is True
    check = containerd.check_nri_enabled(cfg, V2_VERSION)
    assert check.status is Status.OK and "set in the config" in check.message


def test_v3_and_v4_read_the_v3_runc_table(tmp_path: Path) -> None:
    runc = ".containerd.runtimes.runc.options]\nSystemdCgroup = true\n"
    v3 = INSTALL_TOML + '[plugins."io.containerd.cri.v1.runtime"' + runc
    cfg = read_containerd_config(write(tmp_path / "v3.toml", v3))
    assert cfg.systemd_cgroup is True
    v4 = v3.replace("version = 3", "version = 4")
    cfg = read_containerd_config(write(tmp_path / "v4.toml", v4))
    assert cfg.version == 4 and cfg.systemd_cgroup is True
    assert containerd.check_config_file(cfg).status is Status.OK
    assert containerd.check_nri_enabled(cfg, V2_VERSION).status is Status.OK
    # The version 2 CRI table name means nothing in a version 3 file.
    old = INSTALL_TOML + '[plugins."io.containerd.grpc.v1.cri"' + runc
    assert read_containerd_config(write(tmp_path / "old.toml", old)).systemd_cgroup is None


@pytest.mark.parametrize("text", [V2_DISABLED, V3_DISABLED])
def test_nri_disabled_fails_with_the_key_to_change(tmp_path: Path, text: str) -> None:
    path = write(tmp_path / "config.toml", text)
    check = containerd.check_nri_enabled(read_containerd_config(path), V2_VERSION)
    assert check.status is Status.FAIL
    assert check.message == "NRI is disabled (disable = true)"
    assert "set disable = false" in check.fix and path in check.fix


def test_external_connections_disabled_fails(tmp_path: Path) -> None:
    text = INSTALL_TOML.replace("disable_connections = false", "disable_connections = true")
    cfg = read_containerd_config(write(tmp_path / "config.toml", text))
    check = containerd.check_nri_enabled(cfg, V2_VERSION)
    assert check.status is Status.FAIL and "disable_connections = false" in check.fix


def test_containerd_1x_default_is_off(tmp_path: Path) -> None:
    cfg = read_containerd_config(write(tmp_path / "config.toml", "version = 2\n"))
    assert containerd.check_nri_enabled(cfg, V2_VERSION).status is Status.OK
    check = containerd.check_nri_enabled(cfg, V1_VERSION)
    assert check.status is Status.FAIL and "off by default in containerd 1.x" in check.message


def test_missing_file_means_2x_defaults(tmp_path: Path) -> None:
    cfg = read_containerd_config(str(tmp_path / "absent.toml"))
    file_check = containerd.check_config_file(cfg)
    assert file_check.status is Status.WARN and "no such file" in file_check.message
    assert containerd.check_nri_enabled(cfg, V2_VERSION).status is Status.OK
    assert containerd.nri_socket_path(cfg) == "/var/run/nri/nri.sock"
    timeouts = containerd.check_timeouts(cfg, Config())
    assert timeouts.status is Status.WARN
    assert "request timeout 2s is below the recommended 5s" in timeouts.message


def test_broken_toml_fails(tmp_path: Path) -> None:
    path = write(tmp_path / "config.toml", "version = 3\n[plugins\n")
    check = containerd.check_config_file(read_containerd_config(path))
    assert check.status is Status.FAIL and check.message.startswith(path)


def test_version_1_format_warns_with_migrate(tmp_path: Path) -> None:
    cfg = read_containerd_config(write(tmp_path / "config.toml", "[plugins.nri]\ndisable = true\n"))
    check = containerd.check_config_file(cfg)
    assert check.status is Status.WARN and "containerd config migrate" in check.fix
    assert cfg.nri == {"disable": True}


def test_keys_outside_the_nri_table_are_reported(tmp_path: Path) -> None:
    text = 'version = 3\nplugin_request_timeout = "5s"\n[plugins]\nsocket_path = "/x.sock"\n'
    path = write(tmp_path / "config.toml", text)
    check = containerd.check_config_file(read_containerd_config(path))
    assert check.status is Status.WARN
    assert f"{path}: plugin_request_timeout" in check.message
    assert f"{path}: plugins.socket_path" in check.message


def test_imports_are_merged_key_by_key(tmp_path: Path) -> None:
    main = 'imports = ["conf.d/*.toml"]\n' + INSTALL_TOML
    table = f'version = 3\n[plugins."{containerd.NRI_PLUGIN}"]\n'
    write(tmp_path / "conf.d" / "10-nri.toml", table + "disable = true\n")
    write(tmp_path / "conf.d" / "20-other.toml", table + 'plugin_request_timeout = "7s"\n')
    cfg = read_containerd_config(write(tmp_path / "config.toml", main))
    assert len(cfg.files) == 3
    assert cfg.nri["disable"] is True and cfg.nri["plugin_request_timeout"] == "7s"
    assert cfg.nri["socket_path"] == "/var/run/nri/nri.sock"
    assert containerd.check_nri_enabled(cfg, V2_VERSION).status is Status.FAIL
    assert containerd.check_config_file(cfg).status is Status.OK


def test_broken_import_fails(tmp_path: Path) -> None:
    write(tmp_path / "conf.d" / "bad.toml", "[[[")
    cfg = read_containerd_config(
        write(tmp_path / "config.toml", 'version = 3\nimports = ["conf.d/bad.toml"]\n')
    )
    check = containerd.check_config_file(cfg)
    assert check.status is Status.FAIL and "bad.toml" in check.message


# --------------------------------------------------------------------------- socket


@pytest.fixture
def unix_socket(tmp_path: Path) -> Iterator[str]:
    path = str(tmp_path / "nri.sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(1)
    try:
        yield path
    finally:
        server.close()


def with_socket(path: str) -> ContainerdConfig:
    return ContainerdConfig("config.toml", True, 3, {"socket_path": path})


def test_socket_present(unix_socket: str) -> None:
    config = plugin_config(socket=unix_socket)
    check = containerd.check_nri_socket(with_socket(unix_socket), config)
    assert check.status is Status.OK


def test_socket_missing_or_not_a_socket(tmp_path: Path) -> None:
    path = str(tmp_path / "nri.sock")
    check = containerd.check_nri_socket(with_socket(path), plugin_config(socket=path))
    assert check.status is Status.FAIL and "no such socket" in check.message
    Path(path).write_text("")
    check = containerd.check_nri_socket(with_socket(path), plugin_config(socket=path))
    assert check.status is Status.FAIL and "not a socket" in check.message


def test_socket_mismatch_between_containerd_and_plugin(unix_socket: str) -> None:
    check = containerd.check_nri_socket(with_socket(unix_socket), Config())
    assert check.status is Status.FAIL
    assert f'[nri] socket = "{unix_socket}"' in check.fix


# --------------------------------------------------------------------------- timeouts


def test_timeouts_that_differ_from_the_plugin_warn() -> None:
    cfg = ContainerdConfig("c.toml", True, 3, {"plugin_request_timeout": "10s"})
    check = containerd.check_timeouts(cfg, plugin_config(request_timeout=2.0))
    assert check.status is Status.WARN
    assert "[nri] request_timeout = 10" in check.fix


def test_bad_duration_fails() -> None:
    cfg = ContainerdConfig("c.toml", True, 3, {"plugin_request_timeout": "5 seconds"})
    check = containerd.check_timeouts(cfg, Config())
    assert check.status is Status.FAIL and "plugin_request_timeout" in check.message


def test_api_lookup_slower_than_the_request_timeout_fails() -> None:
    config = parse_config(
        "[nri]\nrequest_timeout = 2.0\n[kubernetes]\nenabled = true\nlookup_timeout = 1.5\n"
    )
    cfg = ContainerdConfig("c.toml", True, 3, {"plugin_request_timeout": "1s"})
    check = containerd.check_timeouts(cfg, config)
    assert check.status is Status.FAIL and "lookup_timeout" in check.message


def test_device_lookup_slower_than_the_request_timeout_fails() -> None:
    # The plugin's own request_timeout allows 2 s (the config refuses a device_timeout not
    # below it); containerd's plugin_request_timeout does not.
    config = parse_config(
        '[nri]\nrequest_timeout = 5.0\n[pod_resources]\nkubelet_socket = "/run/k.sock"\n'
        "device_timeout = 2.0\n"
    )
    cfg = ContainerdConfig("c.toml", True, 3, {"plugin_request_timeout": "2s"})
    check = containerd.check_timeouts(cfg, config)
    assert check.status is Status.FAIL and "device_timeout 2 s" in check.message
    assert "below 2" in check.fix
    quick = parse_config('[nri]\nrequest_timeout = 2.0\n[pod_resources]\nkubelet_socket = "/k"\n')
    assert containerd.check_timeouts(cfg, quick).status is not Status.FAIL


def test_a_fifo_at_the_containerd_config_path_is_an_error_not_a_hang(tmp_path: Path) -> None:
    """A FIFO as containerd's config (or an import of it) is reported, never read blocking."""
    fifo = tmp_path / "config.toml"
    os.mkfifo(fifo)
    cfg = read_containerd_config(str(fifo))
    assert cfg.found and len(cfg.errors) == 1 and "must be a regular file" in cfg.errors[0]
    main = tmp_path / "main.toml"
    main.write_text(f'version = 3\nimports = ["{fifo}"]\n')
    cfg = read_containerd_config(str(main))
    assert len(cfg.errors) == 1 and str(fifo) in cfg.errors[0]
