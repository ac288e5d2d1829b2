"""The kubelet: its resource managers must be off on an nri-plrm node.

Reads the kubelet's configuration file (``KubeletConfiguration``, often
``/var/lib/kubelet/config.yaml``) and its CPU and Memory Manager state files. Two managers
pinning the same CPUs undo each other's work: the kubelet must run ``cpuManagerPolicy: none``,
``memoryManagerPolicy: None`` and ``topologyManagerPolicy: none`` (docs/install.md, step 2).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from nri_plrm.base.cpuset import CPUSet, CPUSetError
from nri_plrm.base.quantity import QuantityError, format_bytes, memory_bytes
from nri_plrm.checkpoint.kubelet import kubelet_cpu_policy
from nri_plrm.checkpoint.kubelet_export import MEMORY_MANAGER_STATE_FILE
from nri_plrm.config.file import read_config_bytes
from nri_plrm.config.settings import Config, ConfigError
from nri_plrm.doctor.docs import doc_ref
from nri_plrm.doctor.kubelet_process import FLAG_KEYS, KubeletProcess
from nri_plrm.doctor.result import Check, fail, ok, warn

AREA = "kubelet"
DEFAULT_CONFIG_PATH = "/var/lib/kubelet/config.yaml"
INSTALL_STEP_2 = doc_ref("install.md", "step 2")
SWITCH_OFF = (
    "set cpuManagerPolicy: none, memoryManagerPolicy: None and topologyManagerPolicy: none in "
    f"the kubelet configuration, drain the node, remove the kubelet's cpu_manager_state and "
    f"memory_manager_state, restart the kubelet ({INSTALL_STEP_2})"
)


@dataclass(frozen=True)
class KubeletConfig:
    """The kubelet's settings: its configuration file as read (``data`` empty when missing or
    broken) and, when a kubelet runs, the keys its command-line flags override."""

    path: str
    found: bool
    data: Mapping[str, Any] = field(default_factory=dict)
    error: str = ""
    process: KubeletProcess | None = None

    @property
    def known(self) -> bool:
        """Whether there are settings to check (a readable file or a running kubelet)."""
        return (self.found and not self.error) or self.process is not None

    def value(self, key: str) -> Any:
        """A key as the kubelet applies it: the flag's value, else the file's, else None."""
        flags = self.process.flags if self.process is not None else {}
        if key == "featureGates" and key in flags:
            base = self.data.get(key)
            return {**(base if isinstance(base, Mapping) else {}), **flags[key]}
        return flags[key] if key in flags else self.data.get(key)

    def get(self, key: str, default: Any) -> Any:
        """:meth:`value`, or ``default`` when unset (the kubelet's own default)."""
        value = self.value(key)
        return default if value is None else value

    def source(self, key: str) -> str:
        """Where a key's value comes from: a flag, the file, or the kubelet's default."""
        if self.process is not None and key in self.process.flags:
            flag = next(f for f, k in FLAG_KEYS.items() if k == key)
            return f"flag --{flag} of kubelet pid {self.process.pid}"
        return f"in {self.path}" if key in self.data else "the kubelet's default"


def config_path(explicit: str | None, process: KubeletProcess | None) -> str:
    """The file to read: ``--kubelet-config``, else the running kubelet's ``--config``, else
    the kubeadm default."""
    if explicit:
        return explicit
    if process is not None and process.config:
        return process.config
    return DEFAULT_CONFIG_PATH


def read_kubelet_config(path: str, process: KubeletProcess | None = None) -> KubeletConfig:
    """Read ``path``; never raises for a missing or broken file."""
    if not os.path.lexists(path):
        return KubeletConfig(path, found=False, process=process)
    try:
        data = yaml.safe_load(read_config_bytes(Path(path)).decode("utf-8"))
    except (ConfigError, UnicodeDecodeError, yaml.YAMLError) as exc:
        error = str(exc).replace("\n", " ")
        return KubeletConfig(path, found=True, error=error, process=process)
    if not isinstance(data, Mapping):
        return KubeletConfig(path, found=True, error="not a YAML mapping", process=process)
    return KubeletConfig(path, found=True, data=data, process=process)


def check_config_file(kc: KubeletConfig) -> Check:
    """The kubelet configuration exists and is a KubeletConfiguration."""
    running = f"kubelet pid {kc.process.pid}" if kc.process is not None else ""
    if not kc.found:
        if kc.process is not None and kc.process.config is None:
            return ok(
                AREA,
                "config",
                f"{running} runs without --config: its flags and defaults are checked",
            )
        where = f"{running} names it with --config" if running else "no kubelet is running"
        return warn(
            AREA,
            "config",
            f"{kc.path}: no such file ({where}): the kubelet's managers cannot be checked",
            "pass the kubelet's --config file with --kubelet-config (see `systemctl cat "
            "kubelet`); a kubelet configured by flags needs --cpu-manager-policy=none "
            f"--memory-manager-policy=None --topology-manager-policy=none ({INSTALL_STEP_2})",
        )
    if kc.error:
        return fail(AREA, "config", f"{kc.path}: {kc.error}", "fix the kubelet configuration file")
    kind = kc.data.get("kind")
    if kind != "KubeletConfiguration":
        return fail(
            AREA,
            "config",
            f"{kc.path}: kind {kind!r}: not a KubeletConfiguration",
            "pass the kubelet's configuration file with --kubelet-config",
        )
    version = kc.data.get("apiVersion", "no apiVersion")
    return ok(AREA, "config", f"{kc.path} ({version}{', ' + running if running else ''})")


def _policy_check(
    kc: KubeletConfig, name: str, key: str, default: str, off: str, severity: str
) -> Check:
    policy = str(kc.get(key, default))
    source = kc.source(key)
    if policy.lower() == off.lower():
        return ok(AREA, name, f"{key}: {policy} ({source})")
    message = (
        f"{key}: {policy} ({source}): the kubelet's manager and nri-plrm would fight over the node"
    )
    if source.startswith("flag "):
        flag = source.split()[1]
        fix = f"set {flag}={off} on the kubelet's command line (or drop it); " + SWITCH_OFF
    else:
        fix = f"set {key}: {off} in {kc.path}; " + SWITCH_OFF
    if severity == "warn":
        return warn(AREA, name, message, fix)
    return fail(AREA, name, message, fix)


def check_managers(kc: KubeletConfig) -> list[Check]:
    """The CPU, Memory and Topology Managers are off (none / None / none)."""
    if not kc.known:
        return []
    return [
        _policy_check(kc, "cpu-manager", "cpuManagerPolicy", "none", "none", "fail"),
        _policy_check(kc, "memory-manager", "memoryManagerPolicy", "None", "None", "fail"),
        # Without CPU and Memory Managers the kubelet's topology manager still admits pods by
        # device hints alone, so its verdicts can differ from the plugin's placement.
        _policy_check(kc, "topology-manager", "topologyManagerPolicy", "none", "none", "warn"),
    ]


def check_reserved_cpus(kc: KubeletConfig, config: Config) -> Check | None:
    """The kubelet's ``reservedSystemCPUs`` equals the plugin's ``[cpu_manager]`` reservation."""
    if not kc.known:
        return None
    value = kc.value("reservedSystemCPUs")
    cm = config.cpu_manager
    ours = str(cm.reserved_cpus) if cm.reserved_cpus is not None else f"{cm.reserved_cpu_count}"
    ours_text = (
        f'reserved_cpus = "{cm.reserved_cpus}"'
        if cm.reserved_cpus is not None
        else f"reserved_cpu_count = {cm.reserved_cpu_count}"
    )
    if value is None or value == "":
        return ok(
            AREA,
            "reserved-cpus",
            f"reservedSystemCPUs unset; the plugin reserves {ours_text} ({config.source})",
        )
    try:
        theirs = CPUSet.parse(str(value))
    except CPUSetError as exc:
        return fail(
            AREA, "reserved-cpus", f"reservedSystemCPUs {value!r}: {exc}", f"fix it in {kc.path}"
        )
    if cm.reserved_cpus is not None and theirs == cm.reserved_cpus:
        return ok(AREA, "reserved-cpus", f"reservedSystemCPUs {theirs} = plugin's {ours}")
    return warn(
        AREA,
        "reserved-cpus",
        f"reservedSystemCPUs {theirs} differs from the plugin's {ours_text}",
        f'set [cpu_manager] reserved_cpus = "{theirs}" in {config.source} (mirror the kubelet, '
        f"{INSTALL_STEP_2})",
    )


def _kubelet_reserved_memory(value: Any) -> dict[int, dict[str, int]]:
    """``reservedMemory`` as bytes per NUMA node and resource; ValueError naming the entry."""
    if not isinstance(value, list):
        raise ValueError("not a list")
    out: dict[int, dict[str, int]] = {}
    for i, entry in enumerate(value):
        node = entry.get("numaNode") if isinstance(entry, Mapping) else None
        limits = entry.get("limits") if isinstance(entry, Mapping) else None
        if not isinstance(node, int) or not isinstance(limits, Mapping):
            raise ValueError(f"entry {i}: needs numaNode (a number) and limits (a mapping)")
        try:
            sizes = {str(k): memory_bytes(v) for k, v in limits.items()}
        except QuantityError as exc:
            raise ValueError(f"entry {i}: {exc}") from exc
        out.setdefault(node, {}).update(sizes)
    return out


def _memory_text(reserved: Mapping[int, Mapping[str, int]]) -> str:
    return "; ".join(
        f"node {node}: " + ", ".join(f"{k} {format_bytes(v)}" for k, v in sorted(sizes.items()))
        for node, sizes in sorted(reserved.items())
    )


def check_reserved_memory(kc: KubeletConfig, config: Config) -> Check | None:
    """The kubelet's ``reservedMemory`` equals the plugin's ``[memory_manager]`` reservation."""
    if not kc.known:
        return None
    value = kc.value("reservedMemory")
    ours = config.memory_manager.reserved()
    if not value:
        return ok(
            AREA,
            "reserved-memory",
            f"reservedMemory unset; the plugin reserves {_memory_text(ours) or 'nothing'}",
        )
    try:
        theirs = _kubelet_reserved_memory(value)
    except ValueError as exc:
        return fail(AREA, "reserved-memory", f"reservedMemory: {exc}", f"fix it in {kc.path}")
    if theirs == ours:
        return ok(AREA, "reserved-memory", f"reservedMemory = plugin's ({_memory_text(ours)})")
    entries = ", ".join(
        f"{{ numa_node = {node}, "
        + ", ".join(f'"{k}" = "{format_bytes(v)}"' for k, v in sorted(sizes.items()))
        + " }"
        for node, sizes in sorted(theirs.items())
    )
    return warn(
        AREA,
        "reserved-memory",
        f"reservedMemory ({_memory_text(theirs)}) differs from the plugin's "
        f"({_memory_text(ours) or 'nothing'})",
        f"set [memory_manager] reserved_memory = [ {entries} ] in {config.source} (mirror the "
        f"kubelet, {INSTALL_STEP_2})",
    )


def check_feature_gates(kc: KubeletConfig) -> Check | None:
    """``PodLevelResources`` is on (default on from Kubernetes 1.34)."""
    if not kc.known:
        return None
    gates = kc.value("featureGates") or {}
    if not isinstance(gates, Mapping):
        return fail(
            AREA, "feature-gates", f"featureGates {gates!r}: not a mapping", f"fix {kc.path}"
        )
    listed = ", ".join(f"{k}={v}" for k, v in sorted(gates.items())) or "none set"
    if gates.get("PodLevelResources") is False:
        return warn(
            AREA,
            "feature-gates",
            f"featureGates: {listed}: PodLevelResources is off: pods with .spec.resources are "
            "refused; only classic Guaranteed pods get exclusive CPUs",
            f"set featureGates: {{PodLevelResources: true}} in {kc.path} (and on the API server)",
        )
    return ok(AREA, "feature-gates", f"featureGates: {listed}")


def check_cgroup_driver(kc: KubeletConfig, systemd_cgroup: bool | None) -> Check | None:
    """The kubelet's cgroup driver matches containerd's runc ``SystemdCgroup`` option."""
    if not kc.known:
        return None
    driver = str(kc.get("cgroupDriver", "cgroupfs"))
    if systemd_cgroup is None:
        return ok(AREA, "cgroup-driver", f"cgroupDriver: {driver} (containerd's runc option unset)")
    runtime = "systemd" if systemd_cgroup else "cgroupfs"
    if driver == runtime:
        return ok(AREA, "cgroup-driver", f"cgroupDriver: {driver}, same as containerd's runc")
    return fail(
        AREA,
        "cgroup-driver",
        f"cgroupDriver: {driver} but containerd's runc uses {runtime} "
        f"(SystemdCgroup = {str(systemd_cgroup).lower()})",
        f"use the same driver in both: cgroupDriver in {kc.path} or SystemdCgroup in "
        "containerd's runc options",
    )


def check_state_files(config: Config, process: KubeletProcess | None = None) -> Check:
    """No kubelet CPU or Memory Manager state file names a static policy, and the plugin looks
    for them where a running kubelet keeps them (its ``--root-dir``)."""
    cpu_path = config.state.kubelet_cpu_manager_state
    if not cpu_path:
        return ok(AREA, "state-files", "[state] kubelet_cpu_manager_state is empty: not checked")
    memory_path = os.path.join(os.path.dirname(cpu_path), MEMORY_MANAGER_STATE_FILE)
    if process is not None and process.root_dir is not None:
        root = os.path.normpath(process.root_dir)
        if os.path.normpath(os.path.dirname(cpu_path)) != root:
            expected = os.path.join(root, os.path.basename(cpu_path))
            return warn(
                AREA,
                "state-files",
                f"kubelet pid {process.pid} keeps its state in --root-dir {root}, but the "
                f"plugin's [state] kubelet_cpu_manager_state is {cpu_path}",
                f'set [state] kubelet_cpu_manager_state = "{expected}" in {config.source}',
            )
    found: list[str] = []
    static: list[str] = []
    for path in (cpu_path, memory_path):
        if not os.path.exists(path):
            continue
        try:
            policy = kubelet_cpu_policy(path)
        except OSError as exc:
            found.append(f"{os.path.basename(path)}: unreadable ({exc.strerror or exc})")
            continue
        found.append(f"{os.path.basename(path)}: {policy or 'no policy'}")
        if policy is not None and policy.lower() == "static":
            static.append(f"{path}: policyName {policy!r}")
    if static:
        return fail(
            AREA,
            "state-files",
            "; ".join(static) + ": the kubelet ran a static manager here (nri-plrm refuses "
            "to start while cpu_manager_state says static)",
            SWITCH_OFF,
        )
    if not found:
        return ok(
            AREA, "state-files", f"no cpu_manager_state or memory_manager_state beside {cpu_path}"
        )
    return ok(AREA, "state-files", "; ".join(found))


def check_devices(kc: KubeletConfig, config: Config) -> Check:
    """Where the device hints come from, and what the kubelet's topology setting means for the
    devices (docs/design.md section 11): always OK, it explains."""
    if not config.pod_resources.kubelet_socket:
        return ok(
            AREA,
            "devices",
            "[pod_resources] kubelet_socket is empty: CPUs and memory follow only the devices "
            "in a container's own request (NRI linux.devices, scope container); set it to the "
            "kubelet's PodResources socket to align pods with their device plugin devices",
        )
    policy = kc.value("topologyManagerPolicy") if kc.known else None
    if policy in (None, "", "none"):
        placed = (
            f"topologyManagerPolicy {policy or 'none (default)'}: the kubelet places devices "
            "without NUMA alignment among them"
        )
    else:
        placed = (
            f"topologyManagerPolicy {policy}: the kubelet aligns devices among themselves, and "
            "its verdicts may differ from the plugin's (see topology-manager)"
        )
    pr = config.pod_resources
    if not pr.kubelet_device_checkpoint:
        source = (
            f"device hints from {pr.kubelet_socket} within {pr.device_timeout:g} s (a Get at "
            "each RunPodSandbox; [pod_resources] kubelet_device_checkpoint, the kubelet's "
            "device-plugins/kubelet_internal_checkpoint, spares it)"
        )
    elif os.access(pr.kubelet_device_checkpoint, os.R_OK):
        source = (
            f"device hints from the kubelet's checkpoint {pr.kubelet_device_checkpoint} when "
            f"current, else from {pr.kubelet_socket} within {pr.device_timeout:g} s"
        )
    else:
        source = (
            f"device hints from {pr.kubelet_socket} within {pr.device_timeout:g} s: "
            f"kubelet_device_checkpoint {pr.kubelet_device_checkpoint} is not readable here"
        )
    assumed = config.topology_manager.kubelet_policy
    if policy not in (None, "") and assumed != policy:
        placed += (
            f"; [topology_manager] kubelet_policy says {assumed}: simulate --devices plays "
            "another kubelet than this one"
        )
    return ok(
        AREA,
        "devices",
        f"{source}; {placed}; the plugin aligns CPUs and memory with wherever they land",
    )
