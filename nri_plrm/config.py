"""The plugin's TOML configuration: parsing, validation with every error listed, reload diffs.

Every error reads ``key.path: value: rule``. :func:`parse_config` collects all of them and raises
one :class:`ConfigError`; unknown keys are errors too, with a did-you-mean suggestion. The
kubelet's own configuration rules apply (topology manager policies and options, CPU manager
policy options and their incompatible pairs, reserved CPUs and memory); settings that start but
limit the plugin are listed by :func:`startup_warnings`.
Rules that need the machine (reserved CPUs exist, reserved memory fits a NUMA node) are checked
by :func:`validate_for_topology` once the topology is known.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import os
import re
import stat
import sys
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from nri_plrm.cpuset import CPUSet, CPUSetError
from nri_plrm.engine.cpu_options import (
    ALIGN_BY_SOCKET,
    OPTION_MATURITY,
    CPUManagerConfig,
    CPUManagerConfigError,
    align_by_socket_hardware_problem,
    align_by_socket_policy_problem,
    incompatible_options,
    parse_option_value,
)
from nri_plrm.engine.facade import EngineConfig
from nri_plrm.engine.memory_state import MemoryManagerConfig
from nri_plrm.engine.topology_manager import (
    DEFAULT_MAX_ALLOWABLE_NUMA_NODES,
    OPTION_MAX_ALLOWABLE,
    OPTION_PREFER_CLOSEST,
    TopologyManagerConfig,
    TopologyManagerConfigError,
    parse_policy_option,
)
from nri_plrm.quantity import QuantityError, format_bytes, memory_bytes
from nri_plrm.topology.model import Topology

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

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

_PLUGIN_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_HUGEPAGES_KEY = re.compile(r"^hugepages-(.+)$")


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


@dataclass(frozen=True)
class TopologyManagerSettings:
    """``[topology_manager]``."""

    policy: str = "single-numa-node"
    scope: str = "pod"
    prefer_closest_numa_nodes: bool = False
    max_allowable_numa_nodes: int = DEFAULT_MAX_ALLOWABLE_NUMA_NODES


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


def load_config(path: str | Path) -> Config:
    """Read and validate a TOML file; raises ConfigError listing every problem.

    Only a regular file (or a symlink to one) of at most :data:`MAX_CONFIG_BYTES` is read; a FIFO
    or device at the path is refused without blocking (opened with ``O_NONBLOCK``).
    """
    p = Path(path)
    raw = _read_config_bytes(p)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError([f"{p}: not valid UTF-8: {exc.reason}"]) from exc
    return parse_config(text, str(p))


def _read_config_bytes(p: Path) -> bytes:
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise ConfigError([f"{p}: cannot read the config file: {exc.strerror or exc}"]) from exc
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ConfigError(
                [f"{p}: mode {stat.filemode(st.st_mode)}: the config file must be a regular file"]
            )
        too_big = ConfigError(
            [f"{p}: larger than {MAX_CONFIG_BYTES} bytes: not a configuration file"]
        )
        if st.st_size > MAX_CONFIG_BYTES:
            raise too_big
        chunks: list[bytes] = []
        size = 0
        while chunk := os.read(fd, MAX_CONFIG_BYTES + 1 - size):
            chunks.append(chunk)
            size += len(chunk)
            if size > MAX_CONFIG_BYTES:
                raise too_big
        return b"".join(chunks)
    except OSError as exc:
        raise ConfigError([f"{p}: cannot read the config file: {exc.strerror or exc}"]) from exc
    finally:
        os.close(fd)


def parse_config(text: str, source: str = "<string>") -> Config:
    """Parse and validate TOML text; raises ConfigError listing every problem."""
    try:
        data = tomllib.loads(text)
        return _Parser(source).parse(data)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError([f"{source}: not valid TOML: {exc}"]) from exc
    except RecursionError as exc:
        raise ConfigError(
            [f"{source}: not valid TOML: arrays or tables nested too deeply to read"]
        ) from exc


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


_T = TypeVar("_T")


class _Parser:
    """Walks the TOML document table by table, collecting errors instead of stopping."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.errors: list[str] = []

    def error(self, key: str, value: object, rule: str) -> None:
        self.errors.append(f"{clip(key)}: {format_value(value)}: {rule}")

    def parse(self, data: Mapping[str, Any]) -> Config:
        names = [f.name for f in dataclasses.fields(Config) if f.name != "source"]
        self._unknown("", data, names)
        tables = {name: self._section(data, name) for name in names}
        tm = self._topology_manager(tables["topology_manager"])
        cm = self._cpu_manager(tables["cpu_manager"])
        config = Config(
            nri=self._nri(tables["nri"]),
            state=self._state(tables["state"]),
            pod_resources=self._pod_resources(tables["pod_resources"]),
            metrics=self._metrics(tables["metrics"]),
            log=self._log(tables["log"]),
            topology=self._topology(tables["topology"]),
            kubernetes=self._kubernetes(tables["kubernetes"]),
            topology_manager=tm,
            cpu_manager=cm,
            memory_manager=self._memory_manager(tables["memory_manager"]),
            source=self.source,
        )
        problem = align_by_socket_policy_problem(tm.policy)
        if cm.option(ALIGN_BY_SOCKET) and problem is not None:
            self.error(f"cpu_manager.options.{ALIGN_BY_SOCKET}", True, problem)
        lookup, budget = config.kubernetes.lookup_timeout, config.nri.request_timeout
        if isinstance(lookup, float) and isinstance(budget, float) and lookup >= budget:
            self.error(
                "kubernetes.lookup_timeout",
                lookup,
                f"must be less than nri.request_timeout ({budget:g} s): RunPodSandbox waits "
                "this long for a pod missing from the API cache and must still answer within "
                "the runtime's request budget",
            )
        if self.errors:
            errors = sorted(self.errors, key=self._order(names))
            if len(errors) > MAX_ERRORS:
                more = len(errors) - MAX_ERRORS + 1
                errors = [
                    *errors[: MAX_ERRORS - 1],
                    f"{clip(self.source)}: {more} more errors not listed",
                ]
            raise ConfigError(errors)
        return config

    @staticmethod
    def _order(names: list[str]) -> Callable[[str], tuple[int, str]]:
        """Errors sorted by table (in documented order), then by key path."""
        rank = {name: i for i, name in enumerate(names)}

        def key(error: str) -> tuple[int, str]:
            table = error.split(".", 1)[0].split(":", 1)[0]
            return rank.get(table, -1), error

        return key

    def _section(self, data: Mapping[str, Any], name: str) -> Mapping[str, Any]:
        table = data.get(name, {})
        if not isinstance(table, Mapping):
            self.error(name, table, "must be a table")
            return {}
        return table

    def _unknown(self, prefix: str, table: Mapping[str, Any], known: Collection[str]) -> None:
        for key, value in table.items():
            if key in known:
                continue
            path = f"{prefix}.{key}" if prefix else key
            self.error(path, value, f"unknown key{_did_you_mean(key, known)}")

    def _table(
        self,
        name: str,
        table: Mapping[str, Any],
        defaults: _T,
        *,
        skip: frozenset[str] = frozenset(),
        extra: frozenset[str] = frozenset(),
        **readers: _Reader,
    ) -> _T:
        """Read each field of ``defaults`` not in ``skip`` from the table with its reader.

        Known keys are those fields plus ``extra`` (read by the caller); others are errors.
        """
        fields = [
            f.name
            for f in dataclasses.fields(defaults)  # type: ignore[arg-type]
            if f.name not in skip
        ]
        self._unknown(name, table, [*fields, *extra])
        values: dict[str, object] = {}
        for key in fields:
            if key in table:
                reader = readers.get(key)
                default = getattr(defaults, key)
                if reader is None:
                    reader = _reader_for(default)
                result = reader(self, f"{name}.{key}", table[key])
                if result is not _INVALID:
                    values[key] = result
        return dataclasses.replace(defaults, **values)  # type: ignore[type-var]

    def _nri(self, table: Mapping[str, Any]) -> NRISettings:
        return self._table(
            "nri",
            table,
            NRISettings(),
            socket=_path,
            plugin_name=_plugin_name,
            plugin_index=_plugin_index,
            registration_timeout=_seconds,
            request_timeout=_seconds,
        )

    def _state(self, table: Mapping[str, Any]) -> StateSettings:
        return self._table(
            "state",
            table,
            StateSettings(),
            dir=_path,
            kubelet_state_dir=_optional_path,
            kubelet_cpu_manager_state=_optional_path,
        )

    def _pod_resources(self, table: Mapping[str, Any]) -> PodResourcesSettings:
        settings = self._table(
            "pod_resources",
            table,
            PodResourcesSettings(),
            socket=_path,
            mode=_socket_mode,
            kubelet_socket=_optional_path,
            kubelet_timeout=_seconds,
            burst=_positive_int,
        )
        if settings.group and not settings.mode & 0o060:
            self.error(
                "pod_resources.group",
                settings.group,
                f"has no effect with mode {settings.mode:04o}; use mode 0660 to let the group "
                "connect",
            )
        if settings.kubelet_socket and settings.kubelet_socket == settings.socket:
            self.error(
                "pod_resources.kubelet_socket",
                settings.kubelet_socket,
                "must differ from pod_resources.socket (it would query itself)",
            )
        return settings

    def _metrics(self, table: Mapping[str, Any]) -> MetricsSettings:
        return self._table("metrics", table, MetricsSettings(), address=_address)

    def _log(self, table: Mapping[str, Any]) -> LogSettings:
        return self._table(
            "log", table, LogSettings(), level=_choice(LOG_LEVELS), format=_choice(LOG_FORMATS)
        )

    def _topology(self, table: Mapping[str, Any]) -> TopologySettings:
        return self._table(
            "topology",
            table,
            TopologySettings(),
            sysfs_root=_path,
            cgroup_root=_optional_path,
            kubepods_cgroup=_cgroup_name,
        )

    def _kubernetes(self, table: Mapping[str, Any]) -> KubernetesSettings:
        return self._table(
            "kubernetes",
            table,
            KubernetesSettings(),
            kubeconfig=_optional_path,
            lookup_timeout=_seconds,
        )

    def _topology_manager(self, table: Mapping[str, Any]) -> TopologyManagerSettings:
        settings = self._table(
            "topology_manager",
            table,
            TopologyManagerSettings(),
            skip=frozenset({"prefer_closest_numa_nodes", "max_allowable_numa_nodes"}),
            extra=frozenset({"options"}),
            policy=_choice(TOPOLOGY_POLICIES),
            scope=_choice(TOPOLOGY_SCOPES),
        )
        options = table.get("options", {})
        if not isinstance(options, Mapping):
            self.error("topology_manager.options", options, "must be a table of option = value")
            return settings
        parsed: dict[str, Any] = {}
        for name, value in options.items():
            key = f"topology_manager.options.{name}"
            try:
                field_name, option = parse_policy_option(name, value)
            except TopologyManagerConfigError as err:
                hint = "" if name in TM_OPTIONS else _did_you_mean(name, TM_OPTIONS)
                self.error(key, value, f"{err}{hint}")
                continue
            parsed[field_name] = option
        return dataclasses.replace(settings, **parsed)

    def _cpu_manager(self, table: Mapping[str, Any]) -> CPUManagerSettings:
        settings = self._table(
            "cpu_manager",
            table,
            CPUManagerSettings(),
            skip=frozenset({"options"}),
            extra=frozenset({"options"}),
            reserved_cpus=_reserved_cpus,
            reserved_cpu_count=_positive_int,
        )
        has_cpus = "reserved_cpus" in table
        has_count = "reserved_cpu_count" in table
        if has_count and not has_cpus:
            settings = dataclasses.replace(settings, reserved_cpus=None)
        if has_cpus and has_count:
            cpus, count = settings.reserved_cpus, settings.reserved_cpu_count
            if cpus is not None and count is not None and len(cpus) != count:
                self.error(
                    "cpu_manager.reserved_cpu_count",
                    count,
                    f'does not match reserved_cpus "{cpus}" ({len(cpus)} CPUs); set only one '
                    "of them",
                )
        options_raw = table.get("options", {})
        if not isinstance(options_raw, Mapping):
            self.error("cpu_manager.options", options_raw, "must be a table of option = value")
            return settings
        options: set[str] = set()
        for name, value in options_raw.items():
            key = f"cpu_manager.options.{name}"
            maturity = OPTION_MATURITY.get(name)
            if maturity is None:
                hint = _did_you_mean(name, OPTION_MATURITY)
                self.error(key, value, f"unknown CPU Manager Policy option: {_q(name)}{hint}")
                continue
            try:
                parsed = parse_option_value(name, value)
            except CPUManagerConfigError as err:
                self.error(key, value, str(err))
                continue
            if maturity == "alpha" and not settings.enable_alpha_options:
                self.error(
                    key,
                    value,
                    f"CPU Manager Policy Alpha-level Options not enabled, but option {_q(name)} "
                    "provided (set cpu_manager.enable_alpha_options = true)",
                )
                continue
            if maturity == "beta" and not settings.enable_beta_options:
                self.error(
                    key,
                    value,
                    f"CPU Manager Policy Beta-level Options not enabled, but option {_q(name)} "
                    "provided (set cpu_manager.enable_beta_options = true)",
                )
                continue
            if parsed:
                options.add(name)
        for option, refusal in incompatible_options(options):
            self.error(f"cpu_manager.options.{option}", True, refusal)
        return dataclasses.replace(settings, options=frozenset(options))

    def _memory_manager(self, table: Mapping[str, Any]) -> MemoryManagerSettings:
        settings = self._table(
            "memory_manager",
            table,
            MemoryManagerSettings(),
            reserved_memory=_reserved_memory,
        )
        if "reserved_memory" in table and not any(
            e.limits.get("memory", 0) > 0 for e in settings.reserved_memory
        ):
            self.error(
                "memory_manager.reserved_memory",
                table["reserved_memory"],
                "[memorymanager] you should specify the system reserved memory (at least one "
                "entry with memory > 0)",
            )
        return settings


class _Invalid:
    """Marker returned by a reader that recorded an error."""


_INVALID: Any = _Invalid()
_Reader = Callable[[_Parser, str, Any], Any]


def _reader_for(default: object) -> _Reader:
    if isinstance(default, bool):
        return _bool
    if isinstance(default, float):
        return _positive_float
    if isinstance(default, int):
        return _positive_int
    return _string


def _bool(p: _Parser, key: str, value: Any) -> Any:
    if isinstance(value, bool):
        return value
    p.error(key, value, "must be true or false")
    return _INVALID


def _string(p: _Parser, key: str, value: Any) -> Any:
    if isinstance(value, str):
        return value
    p.error(key, value, "must be a string")
    return _INVALID


def _positive_float(p: _Parser, key: str, value: Any) -> Any:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
        return float(value)
    p.error(key, value, "must be a number greater than 0")
    return _INVALID


def _seconds(p: _Parser, key: str, value: Any) -> Any:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value <= 3600:
        return float(value)
    p.error(key, value, "must be a number of seconds greater than 0 and at most 3600")
    return _INVALID


def _positive_int(p: _Parser, key: str, value: Any) -> Any:
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    p.error(key, value, "must be an integer greater than 0")
    return _INVALID


def _path(p: _Parser, key: str, value: Any) -> Any:
    if not isinstance(value, str) or not value.startswith("/"):
        p.error(key, value, "must be an absolute path")
        return _INVALID
    if "\x00" in value:
        p.error(key, value, "must not contain NUL characters")
        return _INVALID
    return value


def _optional_path(p: _Parser, key: str, value: Any) -> Any:
    if value == "":
        return ""
    if not isinstance(value, str) or not value.startswith("/"):
        p.error(key, value, 'must be an absolute path, or "" to turn it off')
        return _INVALID
    return _path(p, key, value)


def _cgroup_name(p: _Parser, key: str, value: Any) -> Any:
    parts = value.split("/") if isinstance(value, str) else [""]
    if value == "" or all(part not in ("", ".", "..") and "\x00" not in part for part in parts):
        return value
    p.error(key, value, 'must be a cgroup path relative to the cpuset hierarchy, or ""')
    return _INVALID


def _plugin_name(p: _Parser, key: str, value: Any) -> Any:
    if isinstance(value, str) and _PLUGIN_NAME.match(value):
        return value
    p.error(key, value, "must be a non-empty name of letters, digits, '.', '_' or '-'")
    return _INVALID


def _plugin_index(p: _Parser, key: str, value: Any) -> Any:
    if isinstance(value, str) and len(value) == 2 and value.isascii() and value.isdigit():
        return value
    p.error(key, value, 'must be exactly 2 digits as a string (e.g. "50")')
    return _INVALID


def _socket_mode(p: _Parser, key: str, value: Any) -> Any:
    mode: int | None = None
    if isinstance(value, str) and re.fullmatch(r"0?[0-7]{3}", value):
        mode = int(value, 8)
    elif isinstance(value, int) and not isinstance(value, bool):
        mode = value
    if mode not in (0o600, 0o660):
        p.error(key, value, 'must be "0600" (owner only) or "0660" (owner and group)')
        return _INVALID
    return mode


def _address(p: _Parser, key: str, value: Any) -> Any:
    if value == "":
        return ""
    if isinstance(value, str):
        _host, sep, port = value.rpartition(":")
        if sep and port.isdigit() and 0 < int(port) < 65536:
            return value
    p.error(
        key,
        value,
        'must be host:port (e.g. "127.0.0.1:9740", ":9740" for every interface), or "" to '
        "turn it off",
    )
    return _INVALID


def _choice(allowed: tuple[str, ...]) -> _Reader:
    def read(p: _Parser, key: str, value: Any) -> Any:
        if isinstance(value, str) and value in allowed:
            return value
        p.error(key, value, f"must be one of {', '.join(allowed)}")
        return _INVALID

    return read


def _reserved_cpus(p: _Parser, key: str, value: Any) -> Any:
    if not isinstance(value, str):
        p.error(key, value, 'must be a cpuset string (e.g. "0" or "0,32")')
        return _INVALID
    try:
        cpus = CPUSet.parse(value)
    except CPUSetError as exc:
        p.error(key, value, f"not a valid cpuset: {clip(str(exc))}")
        return _INVALID
    if not cpus:
        p.error(
            key,
            value,
            "the static policy requires at least one reserved CPU (kubelet: systemreserved.cpu "
            "+ kubereserved.cpu must be greater than zero)",
        )
        return _INVALID
    return cpus


def _reserved_memory(p: _Parser, key: str, value: Any) -> Any:
    if not isinstance(value, list):
        p.error(key, value, "must be a list of { numa_node = N, memory = Q, hugepages-<size> = Q }")
        return _INVALID
    entries: list[ReservedMemory] = []
    seen: dict[tuple[int, str], int] = {}
    ok = True
    for i, item in enumerate(value):
        path = f"{key}[{i}]"
        if not isinstance(item, Mapping):
            p.error(path, item, "must be a table { numa_node = N, memory = Q }")
            ok = False
            continue
        node = item.get("numa_node")
        if "numa_node" not in item:
            p.errors.append(f"{path}.numa_node: missing: every entry must name its NUMA node")
            ok = False
        elif not isinstance(node, int) or isinstance(node, bool) or node < 0:
            p.error(f"{path}.numa_node", node, "must be an integer >= 0")
            ok = False
        limits: dict[str, int] = {}
        for name, raw in item.items():
            if name == "numa_node":
                continue
            field_key = f"{path}.{name}"
            page = _HUGEPAGES_KEY.match(name)
            if name != "memory" and page is None:
                hint = _did_you_mean(
                    name, ("numa_node", "memory", "hugepages-2Mi", "hugepages-1Gi")
                )
                p.error(field_key, raw, f"unknown key{hint}")
                ok = False
                continue
            if page is not None and not _valid_page_size(page.group(1)):
                p.error(
                    field_key,
                    raw,
                    f"hugepage size {_q(page.group(1))} is not a power-of-two binary quantity "
                    "(e.g. hugepages-2Mi, hugepages-1Gi)",
                )
                ok = False
                continue
            size = _quantity(p, field_key, raw)
            if size is None:
                ok = False
                continue
            if page is not None and size % memory_bytes(page.group(1)):
                p.error(field_key, raw, f"must be a multiple of the {page.group(1)} page size")
                ok = False
                continue
            limits[name] = size
            if isinstance(node, int) and not isinstance(node, bool):
                if (node, name) in seen:
                    p.error(
                        field_key,
                        raw,
                        f"duplicate reservation of {name} on NUMA node {node} (also in entry "
                        f"{seen[(node, name)]})",
                    )
                    ok = False
                seen[(node, name)] = i
        if ok:
            entries.append(ReservedMemory(int(node), limits))  # type: ignore[arg-type]
    return tuple(entries) if ok else _INVALID


def _q(text: str) -> str:
    """A name double-quoted as Go's %q prints it (clipped like every echoed value)."""
    return clip(json.dumps(text))


def _did_you_mean(key: str, known: Collection[str]) -> str:
    close = difflib.get_close_matches(key, list(known), n=1, cutoff=0.6)
    if close:
        return f'; did you mean "{close[0]}"?'
    return f" (known: {', '.join(sorted(known))})"


def _valid_page_size(text: str) -> bool:
    try:
        size = memory_bytes(text)
    except QuantityError:
        return False
    return size >= 4096 and size & (size - 1) == 0


def _quantity(p: _Parser, key: str, value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        p.error(key, value, 'must be a quantity string (e.g. "512Mi") or bytes')
        return None
    try:
        size = memory_bytes(value)
    except QuantityError as exc:
        p.error(key, value, clip(str(exc)))
        return None
    if size < 0:
        p.error(key, value, "must not be negative")
        return None
    return size
