"""The plugin's configuration: the settings model with the documented defaults, reload diffs,
the checks that need the machine (:func:`validate_for_topology`) and the settings that start
but limit the plugin (:func:`startup_warnings`). Reading the file: :mod:`nri_plrm.config.file`.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field

from nri_plrm.base.cpuset import CPUSet
from nri_plrm.base.quantity import format_bytes
from nri_plrm.engine.cpu_options import (
    ALIGN_BY_SOCKET,
    CPUManagerConfig,
    align_by_socket_hardware_problem,
)
from nri_plrm.engine.facade import EngineConfig
from nri_plrm.engine.memory_state import MemoryManagerConfig
from nri_plrm.engine.spec import ResizeGates
from nri_plrm.engine.topology_manager import (
    DEFAULT_MAX_ALLOWABLE_NUMA_NODES,
    OPTION_MAX_ALLOWABLE,
    OPTION_PREFER_CLOSEST,
    TopologyManagerConfig,
)
from nri_plrm.topology.model import Topology

if sys.version_info >= (3, 11):
    pass
else:  # pragma: no cover - exercised on Python 3.10 only
    pass

DEFAULT_PATH = "/etc/nri-plrm/config.toml"
MAX_CONFIG_BYTES = 1 << 20
"""The largest configuration file read (1 MiB); the documented file is about 3 KiB."""
MAX_ECHO_CHARS = 200
"""Values and key paths echoed in error messages are cut to this many characters."""
MAX_ERRORS = 50
"""Errors listed one per line; the rest are counted in one last line."""

TOPOLOGY_POLICIES = ("none", "best-effort", "restricted", "single-numa-node")
"""The kubelet's topology manager policies (``topologyManagerPolicy``)."""
POD_LEVEL_POLICIES = ("best-effort", "restricted", "single-numa-node")
"""The policies under which the kubelet applies pod-level resource managers (KEP-5526)."""
TOPOLOGY_SCOPES = ("container", "pod")
TM_OPTIONS = (OPTION_PREFER_CLOSEST, OPTION_MAX_ALLOWABLE)
LOG_LEVELS = ("debug", "info", "warning", "error")
LOG_FORMATS = ("text", "json")
LIVE_KEYS = frozenset({"log.level", "log.format"})
"""Keys a SIGHUP applies without a restart."""


class ConfigError(Exception):
    """A configuration the plugin refuses: every error as ``key.path: value: rule``."""

    def __init__(self, errors: list[str]) -> None:
        super().__init__("\n".join(errors))
        self.errors = errors

    def located(self, path: str) -> list[str]:
        """Each error as ``path: error``; errors about the file itself already start with it."""
        prefix = f"{path}: "
        return [e if e.startswith(prefix) else prefix + e for e in self.errors]


@dataclass(frozen=True)
class NRISettings:
    """``[nri]``: how the plugin reaches containerd."""

    socket: str = "/var/run/nri/nri.sock"
    plugin_name: str = "nri-plrm"
    plugin_index: str = "50"
    registration_timeout: float = 5.0
    """Seconds to wait for containerd to answer registration."""
    request_timeout: float = 2.0
    """containerd's ``plugin_request_timeout`` in seconds (handler latency budget)."""
    reconnect: bool = True
    cri_socket: str = "/run/containerd/containerd.sock"
    """containerd's CRI socket: other pods' containers get their cpusets through CRI
    ``UpdateContainerResources`` there (the kubelet's path); "" = never."""


@dataclass(frozen=True)
class StateSettings:
    """``[state]``: checkpoint directory and the kubelet state files."""

    dir: str = "/var/lib/nri-plrm"
    kubelet_state_dir: str = ""
    """Where to export ``cpu_manager_state``/``memory_manager_state``; empty = no export."""
    kubelet_cpu_manager_state: str = "/var/lib/kubelet/cpu_manager_state"
    """A kubelet state file with policy ``static`` here makes the plugin refuse to start."""


@dataclass(frozen=True)
class PodResourcesSettings:
    """``[pod_resources]``: the PodResources-compatible gRPC endpoint."""

    enabled: bool = True
    socket: str = "/var/lib/nri-plrm/pod-resources.sock"
    mode: int = 0o600
    group: str = ""
    """Group owning the socket (needs ``mode`` 0660 to let it connect); empty = unchanged."""
    kubelet_socket: str = ""
    """The kubelet's PodResources socket to merge ``devices``/``dynamic_resources`` from."""
    kubelet_timeout: float = 1.0
    kubelet_device_checkpoint: str = ""
    """The kubelet Device Manager's checkpoint file: pods' devices known without a ``Get`` at
    ``RunPodSandbox`` when it is current; empty = always ask ``kubelet_socket``."""
    device_timeout: float = 0.1
    """Seconds ``RunPodSandbox`` waits for the kubelet's ``Get`` of the pod's devices (device
    hints); past it the pod is decided without them."""
    qps: float = 100.0
    burst: int = 10


@dataclass(frozen=True)
class MetricsSettings:
    """``[metrics]``: ``/metrics`` and ``/healthz`` listener; empty address = off."""

    address: str = "127.0.0.1:9740"


@dataclass(frozen=True)
class LogSettings:
    """``[log]``."""

    level: str = "info"
    format: str = "text"


@dataclass(frozen=True)
class TopologySettings:
    """``[topology]``."""

    sysfs_root: str = "/sys"
    cgroup_root: str = "/sys/fs/cgroup"
    """Where the cgroup v1 ``cpuset`` hierarchy is repaired after a CPU hotplug; "" = never."""
    kubepods_cgroup: str = ""
    """The kubelet's top cgroup under ``<cgroup_root>/cpuset``; "" = kubepods or kubepods.slice."""


@dataclass(frozen=True)
class KubernetesSettings:
    """``[kubernetes]``: the optional API cache of this node's pods."""

    enabled: bool = False
    kubeconfig: str = ""
    """Empty = in-cluster service account."""
    node_name: str = ""
    """Empty = ``NODE_NAME`` from the environment, else the host name."""
    lookup_timeout: float = 0.5
    node_resource_topology: bool = False
    """Publish this node's NodeResourceTopology object (only with ``enabled``)."""
    fail_refused_pods: bool = True
    """Mark a pod refused at admission ``Failed``, as the kubelet does (only with ``enabled``)."""


@dataclass(frozen=True)
class TopologyManagerSettings:
    """``[topology_manager]``."""

    policy: str = "single-numa-node"
    scope: str = "pod"
    prefer_closest_numa_nodes: bool = False
    max_allowable_numa_nodes: int = DEFAULT_MAX_ALLOWABLE_NUMA_NODES
    kubelet_policy: str = "none"
    """The kubelet's own ``topologyManagerPolicy``, under which its Device Manager places the
    pods' devices (``simulate --devices`` plays it; ``--kubelet-topology-policy`` overrides)."""


@dataclass(frozen=True)
class CPUManagerSettings:
    """``[cpu_manager]``: reserved CPUs (explicit set or count) and static policy options."""

    reserved_cpus: CPUSet | None = field(default_factory=lambda: CPUSet([0]))
    reserved_cpu_count: int | None = None
    options: frozenset[str] = frozenset()
    """The options set to true, by the kubelet's option names."""
    enable_alpha_options: bool = False
    """The kubelet's ``CPUManagerPolicyAlphaOptions`` feature gate."""
    enable_beta_options: bool = True
    """The kubelet's ``CPUManagerPolicyBetaOptions`` feature gate (on by default)."""

    def option(self, name: str) -> bool:
        """True when the option is set to true."""
        return name in self.options


@dataclass(frozen=True)
class ReservedMemory:
    """One ``[[memory_manager.reserved_memory]]`` entry: bytes per resource on a NUMA node."""

    numa_node: int
    limits: Mapping[str, int]


@dataclass(frozen=True)
class MemoryManagerSettings:
    """``[memory_manager]``."""

    reserved_memory: tuple[ReservedMemory, ...] = (
        ReservedMemory(0, {"memory": 512 * 1024 * 1024}),
    )

    def reserved(self) -> dict[int, dict[str, int]]:
        """Reserved bytes per NUMA node and resource name."""
        out: dict[int, dict[str, int]] = {}
        for entry in self.reserved_memory:
            out.setdefault(entry.numa_node, {}).update(entry.limits)
        return out


@dataclass(frozen=True)
class ResizeSettings:
    """``[resize]``: what decides which in-place resizes are performed; defaults follow kubelet
    1.37's default feature gates (docs/design.md "In-place resize")."""

    exclusive_cpus: bool = False
    """``InPlacePodVerticalScalingExclusiveCPUs`` as kubernetes/kubernetes#140629 (an open pull
    request) implements it."""
    pod_level_resources: bool = True
    """The kubelet's ``InPlacePodLevelResourcesVerticalScaling`` (on by default since 1.36)."""
    pod_budget_cpus: bool = False
    """The plugin's own: a pod budget resize grows or shrinks the pod's reserved CPUs."""


@dataclass(frozen=True)
class Config:
    """The whole configuration; defaults are the documented ones."""

    nri: NRISettings = field(default_factory=NRISettings)
    state: StateSettings = field(default_factory=StateSettings)
    pod_resources: PodResourcesSettings = field(default_factory=PodResourcesSettings)
    metrics: MetricsSettings = field(default_factory=MetricsSettings)
    log: LogSettings = field(default_factory=LogSettings)
    topology: TopologySettings = field(default_factory=TopologySettings)
    kubernetes: KubernetesSettings = field(default_factory=KubernetesSettings)
    topology_manager: TopologyManagerSettings = field(default_factory=TopologyManagerSettings)
    cpu_manager: CPUManagerSettings = field(default_factory=CPUManagerSettings)
    memory_manager: MemoryManagerSettings = field(default_factory=MemoryManagerSettings)
    resize: ResizeSettings = field(default_factory=ResizeSettings)
    source: str = "<defaults>"

    def topology_manager_config(self) -> TopologyManagerConfig:
        """The engine's topology manager settings."""
        tm = self.topology_manager
        return TopologyManagerConfig(
            tm.policy, tm.scope, tm.prefer_closest_numa_nodes, tm.max_allowable_numa_nodes
        )

    def cpu_manager_config(self) -> CPUManagerConfig:
        """The engine's CPU manager (static policy) settings."""
        cm = self.cpu_manager
        return CPUManagerConfig(
            reserved_cpus=cm.reserved_cpus,
            reserved_cpu_count=cm.reserved_cpu_count,
            options={name: True for name in sorted(cm.options)},
        )

    def memory_manager_config(self) -> MemoryManagerConfig:
        """The engine's memory manager (Static policy) settings."""
        return MemoryManagerConfig(reserved=self.memory_manager.reserved())

    def engine_config(self) -> EngineConfig:
        """The allocation engine's settings (topology, CPU and memory managers)."""
        return EngineConfig(
            topology_manager=self.topology_manager_config(),
            cpu_manager=self.cpu_manager_config(),
            memory_manager=self.memory_manager_config(),
            resize=ResizeGates(
                self.resize.exclusive_cpus,
                self.resize.pod_level_resources,
                self.resize.pod_budget_cpus,
            ),
        )

    def flat(self) -> dict[str, object]:
        """Every setting by dotted key path (for diffs and display)."""
        out: dict[str, object] = {}
        for f in dataclasses.fields(self):
            if f.name == "source":
                continue
            section = getattr(self, f.name)
            for sub in dataclasses.fields(section):
                out[f"{f.name}.{sub.name}"] = _display(getattr(section, sub.name))
        return out


@dataclass(frozen=True)
class ConfigChanges:
    """What a reload changes: keys applied live and keys that need a restart."""

    live: tuple[str, ...]
    restart: tuple[str, ...]


def diff_configs(old: Config, new: Config) -> ConfigChanges:
    """Compare two configurations; only ``log.*`` changes apply live (SIGHUP)."""
    a, b = old.flat(), new.flat()
    changed = sorted(k for k in a if a[k] != b[k])
    return ConfigChanges(
        tuple(k for k in changed if k in LIVE_KEYS),
        tuple(k for k in changed if k not in LIVE_KEYS),
    )


def validate_for_topology(config: Config, topology: Topology) -> None:
    """Check the machine-dependent rules; raises ConfigError listing every problem."""
    errors: list[str] = []
    tm = config.topology_manager
    if tm.policy != "none" and topology.num_numa_nodes > tm.max_allowable_numa_nodes:
        errors.append(
            f"topology_manager.options.{OPTION_MAX_ALLOWABLE}: {tm.max_allowable_numa_nodes}: "
            f"unsupported on machines with more than {tm.max_allowable_numa_nodes} NUMA Nodes "
            f"(this machine has {topology.num_numa_nodes})"
        )
    cm = config.cpu_manager
    if cm.reserved_cpus is not None:
        missing = cm.reserved_cpus - topology.all_cpus
        if missing:
            errors.append(
                f'cpu_manager.reserved_cpus: "{cm.reserved_cpus}": CPUs {missing} do not exist '
                f"(online CPUs: {topology.all_cpus})"
            )
        elif cm.reserved_cpus == topology.all_cpus:
            errors.append(
                f'cpu_manager.reserved_cpus: "{cm.reserved_cpus}": must leave at least one CPU '
                "allocatable"
            )
    if cm.reserved_cpu_count is not None and cm.reserved_cpu_count >= topology.num_cpus:
        errors.append(
            f"cpu_manager.reserved_cpu_count: {cm.reserved_cpu_count}: must be less than the "
            f"{topology.num_cpus} online CPUs"
        )
    problem = align_by_socket_hardware_problem(topology)
    if cm.option(ALIGN_BY_SOCKET) and problem is not None:
        errors.append(f"cpu_manager.options.{ALIGN_BY_SOCKET}: true: {problem}")
    for i, entry in enumerate(config.memory_manager.reserved_memory):
        key = f"memory_manager.reserved_memory[{i}]"
        if entry.numa_node not in topology.numa_nodes:
            errors.append(
                f"{key}.numa_node: {entry.numa_node}: NUMA node does not exist "
                f"(nodes: {', '.join(map(str, topology.numa_ids))})"
            )
            continue
        for name, size in entry.limits.items():
            total = topology.memory_of(entry.numa_node, name)
            if size > total:
                errors.append(
                    f'{key}.{name}: "{format_bytes(size)}": exceeds the {format_bytes(total)} '
                    f"of {name} on NUMA node {entry.numa_node}"
                )
    if errors:
        raise ConfigError(errors)


def startup_warnings(config: Config) -> list[str]:
    """Settings that start but limit what the plugin does (logged once at start-up)."""
    policy = config.topology_manager.policy
    if policy in POD_LEVEL_POLICIES:
        return []
    return [
        f'topology_manager.policy: "{policy}": pod-level resource managers need policy '
        f"{', '.join(POD_LEVEL_POLICIES[:-1])} or {POD_LEVEL_POLICIES[-1]}; under "
        f'"{policy}" nothing is NUMA-aligned and pods with pod-level resources get no pod '
        "budget or pod shared pool (only their equivalent-Guaranteed containers get exclusive "
        "CPUs and memory, from the node, as the kubelet does)"
    ]


def format_value(value: object) -> str:
    """A value as it appears in error messages (JSON-like, strings quoted), at most
    :data:`MAX_ECHO_CHARS` characters."""
    if isinstance(value, CPUSet):
        return clip(json.dumps(str(value)))
    try:
        return clip(json.dumps(value, default=str))
    except RecursionError:
        return "<nested too deeply to show>"
    except (TypeError, ValueError):
        return clip(repr(value))


def clip(text: str, limit: int = MAX_ECHO_CHARS) -> str:
    """``text`` cut to ``limit`` characters, the cut marked with the full length."""
    if len(text) <= limit:
        return text
    tail = f"... ({len(text)} characters)"
    return text[: limit - len(tail)] + tail


def _display(value: object) -> object:
    if isinstance(value, CPUSet):
        return str(value)
    if isinstance(value, frozenset):
        return sorted(value, key=str)
    if isinstance(value, tuple):
        return [_display(v) for v in value]
    if isinstance(value, ReservedMemory):
        return {
            "numa_node": value.numa_node,
            **{k: format_bytes(v) for k, v in value.limits.items()},
        }
    if isinstance(value, Mapping):
        return dict(value)
    return value
