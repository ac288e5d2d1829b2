"""The node itself: its cgroup hierarchy, and the plugin's configuration against its CPUs.

cgroup v2 mounts one unified hierarchy whose root holds ``cgroup.controllers``; cgroup v1 mounts
one directory per controller (``cpuset/``, ``memory/``, ...).
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass

from nri_plrm.config.file import load_config
from nri_plrm.config.host_checks import host_problems
from nri_plrm.config.settings import Config, ConfigError, startup_warnings, validate_for_topology
from nri_plrm.doctor.docs import doc_ref
from nri_plrm.doctor.result import Check, fail, ok, warn
from nri_plrm.topology.model import Topology, TopologyError
from nri_plrm.topology.sysfs import discover

CGROUP_AREA = "cgroup"
CONFIG_AREA = "config"
DEFAULT_CGROUP_ROOT = "/sys/fs/cgroup"
NEEDED_CONTROLLERS = ("cpuset", "memory", "cpu")


def check_cgroup(root: str) -> Check:
    """cgroup v2 with the cpuset, cpu and memory controllers (v1 works, but is on its way out)."""
    controllers_file = os.path.join(root, "cgroup.controllers")
    if os.path.isfile(controllers_file):
        try:
            with open(controllers_file, encoding="ascii") as handle:
                controllers = handle.read().split()
        except (OSError, UnicodeDecodeError) as exc:
            return fail(CGROUP_AREA, "version", f"{controllers_file}: {exc}", "run doctor as root")
        missing = [c for c in NEEDED_CONTROLLERS if c not in controllers]
        if missing:
            return fail(
                CGROUP_AREA,
                "version",
                f"cgroup v2 at {root} without the {', '.join(missing)} controller(s) "
                f"(available: {' '.join(controllers) or 'none'})",
                "enable them on the kernel command line (e.g. remove cgroup_disable=...) and "
                "reboot",
            )
        return ok(CGROUP_AREA, "version", f"cgroup v2 at {root} ({' '.join(controllers)})")
    v1 = [c for c in NEEDED_CONTROLLERS if os.path.isdir(os.path.join(root, c))]
    if v1:
        missing = [c for c in NEEDED_CONTROLLERS if c not in v1]
        if missing:
            return fail(
                CGROUP_AREA,
                "version",
                f"cgroup v1 at {root} without the {', '.join(missing)} hierarchy",
                "mount the missing controller hierarchies, or boot with cgroup v2 "
                "(systemd.unified_cgroup_hierarchy=1)",
            )
        hybrid = (
            " (hybrid: cgroup2 also at unified/)"
            if os.path.isdir(os.path.join(root, "unified"))
            else ""
        )
        return warn(
            CGROUP_AREA,
            "version",
            f"cgroup v1 at {root}{hybrid}: works, but containerd deprecated cgroup v1 in 2.2 "
            "and Kubernetes keeps it in maintenance mode (recent kubelets refuse it unless "
            "failCgroupV1: false)",
            "boot with cgroup v2: add systemd.unified_cgroup_hierarchy=1 to the kernel command "
            "line (the default on Debian 12)",
        )
    return fail(
        CGROUP_AREA,
        "version",
        f"{root}: no cgroup hierarchy (neither cgroup.controllers nor cpuset/ memory/ cpu/)",
        "mount cgroup2 at /sys/fs/cgroup, or pass the mount point with --cgroup-root",
    )


@dataclass(frozen=True)
class PluginConfig:
    """The plugin's configuration as doctor loaded it: the file's, else the defaults."""

    config: Config
    path: str
    found: bool
    errors: tuple[str, ...] = ()


def read_plugin_config(path: str) -> PluginConfig:
    """Load ``path``; on a missing or bad file the built-in defaults stand in (and are named)."""
    defaults = dataclasses.replace(Config(), source=path)
    if not os.path.exists(path):
        return PluginConfig(defaults, path, found=False)
    try:
        return PluginConfig(load_config(path), path, found=True)
    except ConfigError as exc:
        return PluginConfig(defaults, path, found=True, errors=tuple(exc.errors))


def check_plugin_config(pc: PluginConfig) -> Check:
    """The configuration file parses with no error (what ``check-config`` reports)."""
    if not pc.found:
        return warn(
            CONFIG_AREA,
            "file",
            f"{pc.path}: no such file: the built-in defaults are checked instead",
            f"install the package (it ships {pc.path}) or pass your file with --config",
        )
    if pc.errors:
        return fail(
            CONFIG_AREA,
            "file",
            "; ".join(pc.errors),
            f"fix the keys named; `nri-plrm check-config {pc.path}` lists every error",
        )
    return ok(CONFIG_AREA, "file", f"{pc.path}: valid")


def check_plugin_paths(pc: PluginConfig) -> Check:
    """The sockets, state directory and kubelet-format export pass the host checks
    (``nri_plrm.config.host_checks``) that ``check-config`` and ``run`` apply."""
    problems = host_problems(pc.config)
    if problems:
        return fail(
            CONFIG_AREA,
            "paths",
            "; ".join(problems),
            f"move the paths named in {pc.config.source} "
            f"({doc_ref('config.md', 'checks against the host')}); "
            "the plugin refuses to start with them",
        )
    return ok(
        CONFIG_AREA,
        "paths",
        "sockets and state directory in directories only root can write"
        + (
            ", export directory clear of the kubelet's files"
            if pc.config.state.kubelet_state_dir
            else ""
        ),
    )


def discover_machine(sysfs: str) -> tuple[Topology | None, Check]:
    """The machine under ``sysfs`` and the check reporting its discovery."""
    if not os.path.isdir(sysfs):
        return None, fail(
            CONFIG_AREA,
            "machine",
            f"{sysfs}: not a directory: cannot read this machine's CPUs",
            "pass the sysfs mount with --sysfs or set [topology] sysfs_root",
        )
    try:
        topology = discover(sysfs)
    except (OSError, TopologyError) as exc:
        return None, fail(
            CONFIG_AREA,
            "machine",
            f"cannot read the machine from {sysfs}: {exc}",
            "pass a readable sysfs with --sysfs or set [topology] sysfs_root",
        )
    return topology, ok(
        CONFIG_AREA,
        "machine",
        f"{sysfs}: {topology.num_cpus} CPUs, {topology.num_numa_nodes} NUMA node(s), "
        f"{topology.num_sockets} socket(s)",
    )


def check_config_on_machine(pc: PluginConfig, topology: Topology) -> Check:
    """The configuration fits this machine (reserved CPUs and memory exist, NUMA limits)."""
    if pc.errors:
        return fail(
            CONFIG_AREA,
            "on-this-machine",
            f"{pc.path}: not checked against this machine until its errors are fixed",
            f"`nri-plrm check-config {pc.path}`",
        )
    try:
        validate_for_topology(pc.config, topology)
    except ConfigError as exc:
        return fail(
            CONFIG_AREA,
            "on-this-machine",
            "; ".join(exc.errors),
            f"fix the keys named in {pc.config.source}; the plugin refuses to start with them",
        )
    warnings = startup_warnings(pc.config)
    if warnings:
        return warn(
            CONFIG_AREA,
            "on-this-machine",
            "; ".join(warnings),
            f"set [topology_manager] policy in {pc.config.source} ({doc_ref('config.md')})",
        )
    subject = pc.path if pc.found else "the built-in defaults"
    return ok(
        CONFIG_AREA,
        "on-this-machine",
        f"{subject}: fit this machine (policy {pc.config.topology_manager.policy}, "
        f"scope {pc.config.topology_manager.scope})",
    )
