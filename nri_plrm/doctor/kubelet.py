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
from typing import Any

import yaml

from nri_plrm.checkpoint.kubelet import kubelet_cpu_policy
from nri_plrm.config import Config
from nri_plrm.cpuset import CPUSet, CPUSetError
from nri_plrm.doctor.result import Check, fail, ok, warn
from nri_plrm.quantity import QuantityError, format_bytes, memory_bytes

AREA = "kubelet"
DEFAULT_CONFIG_PATH = "/var/lib/kubelet/config.yaml"
INSTALL_STEP_2 = "docs/install.md, step 2"
SWITCH_OFF = (
    "set cpuManagerPolicy: none, memoryManagerPolicy: None and topologyManagerPolicy: none in "
    f"the kubelet configuration, drain the node, remove the kubelet's cpu_manager_state and "
    f"memory_manager_state, restart the kubelet ({INSTALL_STEP_2})"
)
MEMORY_MANAGER_STATE_FILE = "memory_manager_state"


@dataclass(frozen=True)
class KubeletConfig:
    """The kubelet configuration file as read (``data`` empty when missing or broken)."""

    path: str
    found: bool
    data: Mapping[str, Any] = field(default_factory=dict)
    error: str = ""

    def get(self, key: str, default: Any) -> Any:
        """A top-level key, or ``default`` when unset (the kubelet's own default)."""
        value = self.data.get(key)
        return default if value is None else value


def read_kubelet_config(path: str) -> KubeletConfig:
    """Read ``path``; never raises for a missing or broken file."""
    try:
        with open(path, encoding="utf-8") as handle:
            data = yaml.safe_load(handle)
    except FileNotFoundError:
        return KubeletConfig(path, found=False)
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        return KubeletConfig(path, found=True, error=str(exc).replace("\n", " "))
    if not isinstance(data, Mapping):
        return KubeletConfig(path, found=True, error="not a YAML mapping")
    return KubeletConfig(path, found=True, data=data)


def check_config_file(kc: KubeletConfig) -> Check:
    """The kubelet configuration exists and is a KubeletConfiguration."""
    if not kc.found:
        return warn(
            AREA,
            "config",
            f"{kc.path}: no such file: the kubelet's managers cannot be checked",
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
    return ok(AREA, "config", f"{kc.path} ({kc.data.get('apiVersion', 'no apiVersion')})")


def _policy_check(
    kc: KubeletConfig, name: str, key: str, default: str, off: str, severity: str
) -> Check:
    policy = str(kc.get(key, default))
    if policy.lower() == off.lower():
        source = "set" if key in kc.data else "the kubelet's default"
        return ok(AREA, name, f"{key}: {policy} ({source})")
    message = f"{key}: {policy}: the kubelet's manager and nri-plrm would fight over the node"
    fix = f"set {key}: {off} in {kc.path}; " + SWITCH_OFF
    if severity == "warn":
        return warn(AREA, name, message, fix)
    return fail(AREA, name, message, fix)


def check_managers(kc: KubeletConfig) -> list[Check]:
    """The CPU, Memory and Topology Managers are off (none / None / none)."""
    if not kc.found or kc.error:
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
    if not kc.found or kc.error:
        return None
    value = kc.data.get("reservedSystemCPUs")
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
    if not kc.found or kc.error:
        return None
    value = kc.data.get("reservedMemory")
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
    if not kc.found or kc.error:
        return None
    gates = kc.data.get("featureGates") or {}
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
    if not kc.found or kc.error:
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


def check_state_files(config: Config) -> Check:
    """No kubelet CPU or Memory Manager state file names a static policy."""
    cpu_path = config.state.kubelet_cpu_manager_state
    if not cpu_path:
        return ok(AREA, "state-files", "[state] kubelet_cpu_manager_state is empty: not checked")
    memory_path = os.path.join(os.path.dirname(cpu_path), MEMORY_MANAGER_STATE_FILE)
    found: list[str] = []
    static: list[str] = []
    for path in (cpu_path, memory_path):
        if not os.path.exists(path):
            continue
        policy = kubelet_cpu_policy(path)
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
