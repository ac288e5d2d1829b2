"""containerd: its version, and whether its NRI plugin lets nri-plrm in on time.

containerd 2.x reads ``/etc/containerd/config.toml`` (format ``version = 3``, ``4`` from 2.3
on; older formats are migrated in memory at start) and the files its ``imports`` name
(relative to the main file's directory, globs allowed), merging plugin tables key by key. The
NRI settings live in the ``[plugins."io.containerd.nri.v1.nri"]`` table; keys written anywhere
else are ignored. Defaults (containerd 2.x): NRI on, external connections on, socket
``/var/run/nri/nri.sock``, registration timeout 5 s, request timeout 2 s. containerd 1.7 had NRI
off by default.
"""

from __future__ import annotations

import glob
import os
import re
import stat
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nri_plrm.config.file import read_config_bytes
from nri_plrm.config.settings import Config, ConfigError
from nri_plrm.doctor.containerd_version import ContainerdVersion
from nri_plrm.doctor.docs import doc_ref
from nri_plrm.doctor.result import Check, fail, ok, warn

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

AREA = "containerd"
DEFAULT_CONFIG_PATH = "/etc/containerd/config.toml"
NRI_PLUGIN = "io.containerd.nri.v1.nri"
NRI_KEYS = frozenset(
    {
        "disable",
        "disable_connections",
        "socket_path",
        "plugin_path",
        "plugin_config_path",
        "plugin_registration_timeout",
        "plugin_request_timeout",
    }
)
DEFAULT_SOCKET = "/var/run/nri/nri.sock"
DEFAULT_REGISTRATION_TIMEOUT = 5.0
DEFAULT_REQUEST_TIMEOUT = 2.0
RECOMMENDED_REQUEST_TIMEOUT = 5.0
"""docs/install.md step 1: head room for Synchronize on busy nodes and for other plugins."""
RUNC_OPTIONS = {
    3: ("io.containerd.cri.v1.runtime", "containerd", "runtimes", "runc", "options"),
    2: ("io.containerd.grpc.v1.cri", "containerd", "runtimes", "runc", "options"),
}
INSTALL_STEP_1 = doc_ref("install.md", "step 1")

_GO_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
_UNIT_SECONDS = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "μs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}


def go_duration(text: str) -> float:
    """Seconds of a Go duration string (``"5s"``, ``"1m30s"``, ``"500ms"``); ValueError if not."""
    if text in ("0", ""):
        return 0.0
    pos, total = 0, 0.0
    for match in _GO_DURATION.finditer(text):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        pos = match.end()
    if pos != len(text) or pos == 0:
        raise ValueError(f'{text!r} is not a Go duration such as "5s" or "500ms"')
    return total


@dataclass(frozen=True)
class ContainerdConfig:
    """What doctor reads of containerd's configuration (main file plus imports)."""

    path: str
    found: bool
    version: int = 1
    nri: Mapping[str, Any] = field(default_factory=dict)
    """The merged ``[plugins."io.containerd.nri.v1.nri"]`` table."""
    misplaced: tuple[str, ...] = ()
    """NRI keys written outside the NRI table (ignored by containerd)."""
    grpc_address: str | None = None
    """``[grpc] address``: containerd's own API socket, when the file sets it."""
    systemd_cgroup: bool | None = None
    """runc's ``SystemdCgroup`` option when the file sets it."""
    files: tuple[str, ...] = ()
    """The files read, main file first."""
    errors: tuple[str, ...] = ()
    """Files that could not be read or parsed, as ``FILE: reason``."""


def _load_toml(path: str) -> dict[str, Any]:
    """``path`` parsed, read as the plugin reads its own config (bounded, never blocking)."""
    return tomllib.loads(read_config_bytes(Path(path)).decode("utf-8"))


def _unreadable(path: str, exc: Exception) -> str:
    return str(exc) if isinstance(exc, ConfigError) else f"{path}: {exc}"


def _dig(table: Mapping[str, Any], keys: tuple[str, ...]) -> Any:
    node: Any = table
    for key in keys:
        if not isinstance(node, Mapping) or key not in node:
            return None
        node = node[key]
    return node


def _nri_table(data: Mapping[str, Any], version: int) -> Mapping[str, Any]:
    plugins = data.get("plugins")
    if not isinstance(plugins, Mapping):
        return {}
    table = plugins.get(NRI_PLUGIN)
    if table is None and version < 2:
        table = plugins.get("nri")
    return table if isinstance(table, Mapping) else {}


def _misplaced(data: Mapping[str, Any], source: str) -> list[str]:
    out = [f"{source}: {key}" for key in sorted(NRI_KEYS & set(data))]
    plugins = data.get("plugins")
    if isinstance(plugins, Mapping):
        out += [f"{source}: plugins.{key}" for key in sorted(NRI_KEYS & set(plugins))]
    return out


def _imports(data: Mapping[str, Any], main: str) -> list[str]:
    listed = data.get("imports")
    if not isinstance(listed, list):
        return []
    base = os.path.dirname(os.path.abspath(main))
    found: list[str] = []
    for pattern in listed:
        if not isinstance(pattern, str):
            continue
        full = pattern if os.path.isabs(pattern) else os.path.join(base, pattern)
        matches = sorted(glob.glob(full)) if glob.has_magic(full) else [full]
        found += [m for m in matches if os.path.abspath(m) != os.path.abspath(main)]
    return found


def read_containerd_config(path: str) -> ContainerdConfig:
    """Read ``path`` and its imports; never raises for a missing or broken file."""
    if not os.path.exists(path):
        return ContainerdConfig(path, found=False)
    try:
        data = _load_toml(path)
    except (ConfigError, tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        return ContainerdConfig(path, found=True, errors=(_unreadable(path, exc),))
    raw_version = data.get("version", 1)
    version = raw_version if isinstance(raw_version, int) else 1
    nri = dict(_nri_table(data, version))
    misplaced = _misplaced(data, path)
    runc = RUNC_OPTIONS[3 if version >= 3 else 2]
    systemd = _dig(data, ("plugins", *runc, "SystemdCgroup"))
    files, errors = [path], []
    for extra in _imports(data, path):
        if not os.path.lexists(extra):
            continue
        try:
            imported = _load_toml(extra)
        except (ConfigError, tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            errors.append(_unreadable(extra, exc))
            continue
        files.append(extra)
        nri.update(_nri_table(imported, version))
        misplaced += _misplaced(imported, extra)
        extra_systemd = _dig(imported, ("plugins", *runc, "SystemdCgroup"))
        if extra_systemd is not None:
            systemd = extra_systemd
    address = _dig(data, ("grpc", "address"))
    return ContainerdConfig(
        path,
        found=True,
        version=version,
        nri=nri,
        grpc_address=address if isinstance(address, str) and address else None,
        misplaced=tuple(misplaced),
        systemd_cgroup=systemd if isinstance(systemd, bool) else None,
        files=tuple(files),
        errors=tuple(errors),
    )


# --------------------------------------------------------------------------- config


def check_config_file(cfg: ContainerdConfig) -> Check:
    """The config file exists, parses, and is in a format containerd 2.x reads."""
    if not cfg.found:
        return warn(
            AREA,
            "config",
            f"{cfg.path}: no such file; containerd 2.x defaults apply (NRI on, request timeout "
            f"{DEFAULT_REQUEST_TIMEOUT:g}s)",
            f"create {cfg.path} with the NRI section of {INSTALL_STEP_1}, or pass "
            "--containerd-config",
        )
    if cfg.errors and cfg.files == ():
        return fail(
            AREA,
            "config",
            "; ".join(cfg.errors),
            f"fix the file: containerd refuses to start with it ({INSTALL_STEP_1})",
        )
    if cfg.errors:
        return fail(
            AREA, "config", "imports: " + "; ".join(cfg.errors), "fix or remove the imported file"
        )
    read = ", ".join(cfg.files)
    if cfg.version < 2:
        return warn(
            AREA,
            "config",
            f"{read}: config version {cfg.version} is deprecated (containerd 2.x migrates it "
            "in memory at every start)",
            f"convert it with `containerd config migrate > {cfg.path}.new`, review, then move it "
            "in place",
        )
    if cfg.misplaced:
        return warn(
            AREA,
            "config",
            'NRI keys outside [plugins."io.containerd.nri.v1.nri"] are ignored: '
            + ", ".join(cfg.misplaced),
            f'move them into the [plugins."{NRI_PLUGIN}"] table ({INSTALL_STEP_1})',
        )
    return ok(AREA, "config", f"{read} (version {cfg.version})")


def _flag(cfg: ContainerdConfig, key: str, default: bool) -> bool | None:
    value = cfg.nri.get(key, default)
    return value if isinstance(value, bool) else None


def check_nri_enabled(cfg: ContainerdConfig, version: ContainerdVersion) -> Check:
    """NRI is on and accepts external plugins."""
    v1x = version.version is not None and version.version[0] < 2
    disable = _flag(cfg, "disable", default=v1x)
    connections_off = _flag(cfg, "disable_connections", default=False)
    table = f'[plugins."{NRI_PLUGIN}"]'
    if disable is None or connections_off is None:
        key = "disable" if disable is None else "disable_connections"
        return fail(
            AREA,
            "nri",
            f"{table} {key} = {cfg.nri.get(key)!r}: not a boolean",
            f"set {key} = false in {cfg.path}",
        )
    if disable:
        why = "disable = true" if "disable" in cfg.nri else "off by default in containerd 1.x"
        return fail(
            AREA,
            "nri",
            f"NRI is disabled ({why})",
            f"set disable = false in {table} of {cfg.path} and restart containerd "
            f"({INSTALL_STEP_1})",
        )
    if connections_off:
        return fail(
            AREA,
            "nri",
            "NRI accepts no external plugins (disable_connections = true)",
            f"set disable_connections = false in {table} of {cfg.path} and restart containerd",
        )
    source = "set in the config" if "disable" in cfg.nri else "containerd 2.x default"
    return ok(AREA, "nri", f"NRI enabled, external plugins allowed ({source})")


def nri_socket_path(cfg: ContainerdConfig) -> str:
    """The socket containerd's NRI listens on."""
    value = cfg.nri.get("socket_path")
    return value if isinstance(value, str) and value else DEFAULT_SOCKET


def check_nri_socket(cfg: ContainerdConfig, config: Config) -> Check:
    """The plugin dials the socket containerd listens on, and it exists."""
    path = nri_socket_path(cfg)
    if config.nri.socket != path:
        return fail(
            AREA,
            "nri-socket",
            f"containerd listens on {path} but the plugin's [nri] socket is {config.nri.socket}",
            f'set [nri] socket = "{path}" in {config.source} (or socket_path in {cfg.path})',
        )
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return fail(
            AREA,
            "nri-socket",
            f"{path}: no such socket: containerd is not running or its NRI is off",
            "start containerd (`systemctl restart containerd`) after enabling NRI "
            f"({INSTALL_STEP_1})",
        )
    except OSError as exc:
        return fail(AREA, "nri-socket", f"{path}: {exc.strerror}", "run doctor as root")
    if not stat.S_ISSOCK(mode):
        return fail(
            AREA,
            "nri-socket",
            f"{path}: exists but is not a socket",
            f"remove {path} and restart containerd",
        )
    return ok(AREA, "nri-socket", f"{path} is a socket")


def _timeout(cfg: ContainerdConfig, key: str, default: float) -> float:
    value = cfg.nri.get(key)
    if value is None:
        return default
    if not isinstance(value, str):
        raise ValueError(f'{value!r} is not a Go duration string such as "5s"')
    seconds = go_duration(value)
    return seconds if seconds > 0 else default


def check_timeouts(cfg: ContainerdConfig, config: Config) -> Check:
    """containerd's NRI timeouts leave the plugin room and match its own settings."""
    table = f'[plugins."{NRI_PLUGIN}"]'
    try:
        registration = _timeout(cfg, "plugin_registration_timeout", DEFAULT_REGISTRATION_TIMEOUT)
    except ValueError as exc:
        return fail(
            AREA, "nri-timeouts", f"plugin_registration_timeout: {exc}", f'set "5s" in {table}'
        )
    try:
        request = _timeout(cfg, "plugin_request_timeout", DEFAULT_REQUEST_TIMEOUT)
    except ValueError as exc:
        return fail(AREA, "nri-timeouts", f"plugin_request_timeout: {exc}", f'set "5s" in {table}')
    found = f"containerd: registration {registration:g}s, request {request:g}s"
    problems: list[str] = []
    fixes: list[str] = []
    if request < RECOMMENDED_REQUEST_TIMEOUT:
        problems.append(
            f"request timeout {request:g}s is below the recommended "
            f"{RECOMMENDED_REQUEST_TIMEOUT:g}s: a plugin that misses it is disconnected and the "
            "container starts unpinned"
        )
        fixes.append(f'plugin_request_timeout = "{RECOMMENDED_REQUEST_TIMEOUT:g}s" in {table}')
    if config.nri.request_timeout != request:
        problems.append(f"the plugin's [nri] request_timeout is {config.nri.request_timeout:g}")
        fixes.append(f"[nri] request_timeout = {request:g} in {config.source}")
    if config.nri.registration_timeout != registration:
        problems.append(
            f"the plugin's [nri] registration_timeout is {config.nri.registration_timeout:g}"
        )
        fixes.append(f"[nri] registration_timeout = {registration:g} in {config.source}")
    if config.kubernetes.enabled and config.kubernetes.lookup_timeout >= request:
        return fail(
            AREA,
            "nri-timeouts",
            f"{found}; [kubernetes] lookup_timeout {config.kubernetes.lookup_timeout:g} s is not "
            "below the request timeout: a slow API lookup gets the plugin disconnected",
            f"lower [kubernetes] lookup_timeout below {request:g} in {config.source}",
        )
    pr = config.pod_resources
    if pr.kubelet_socket and pr.device_timeout >= request:
        return fail(
            AREA,
            "nri-timeouts",
            f"{found}; [pod_resources] device_timeout {pr.device_timeout:g} s is not below the "
            "request timeout: a kubelet that does not answer gets the plugin disconnected",
            f"lower [pod_resources] device_timeout below {request:g} (0.1 recommended) in "
            f"{config.source}",
        )
    if problems:
        return warn(
            AREA, "nri-timeouts", f"{found}; " + "; ".join(problems), "set " + ", ".join(fixes)
        )
    return ok(AREA, "nri-timeouts", f"{found}; the plugin's [nri] timeouts match")
