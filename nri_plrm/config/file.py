"""Reading the TOML configuration file into a :class:`~nri_plrm.config.settings.Config`: every error
(``key.path: value: rule``, unknown keys with a did-you-mean) collected into one ConfigError;
the kubelet's option rules are the engine's own."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Any, TypeVar

from nri_plrm.engine.cpu_options import (
    ALIGN_BY_SOCKET,
    OPTION_MATURITY,
    CPUManagerConfigError,
    align_by_socket_policy_problem,
    incompatible_options,
    parse_option_value,
)
from nri_plrm.engine.topology_manager import (
    TopologyManagerConfigError,
    parse_policy_option,
)

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

from nri_plrm.config.settings import (
    LOG_FORMATS,
    LOG_LEVELS,
    MAX_CONFIG_BYTES,
    MAX_ERRORS,
    TM_OPTIONS,
    TOPOLOGY_POLICIES,
    TOPOLOGY_SCOPES,
    Config,
    ConfigError,
    CPUManagerSettings,
    KubernetesSettings,
    LogSettings,
    MemoryManagerSettings,
    MetricsSettings,
    NRISettings,
    PodResourcesSettings,
    ResizeSettings,
    StateSettings,
    TopologyManagerSettings,
    TopologySettings,
    clip,
    format_value,
)
from nri_plrm.config.shape import check_depth
from nri_plrm.config.values import (
    INVALID,
    Reader,
    address,
    cgroup_name,
    choice,
    did_you_mean,
    go_quote,
    optional_path,
    path,
    plugin_index,
    plugin_name,
    positive_int,
    reader_for,
    reserved_cpus,
    reserved_memory,
    seconds,
    socket_mode,
)
from nri_plrm.util.bounded_file import InputFileError, read_regular_file


def load_config(path: str | Path) -> Config:
    """Read and validate a TOML file; raises ConfigError listing every problem.

    Only a regular file (or a symlink to one) of at most :data:`MAX_CONFIG_BYTES` is read; a FIFO
    or device at the path is refused without blocking (opened with ``O_NONBLOCK``).
    """
    p = Path(path)
    return config_from_data(read_toml(p), str(p))


def read_toml(p: Path) -> dict[str, Any]:
    """The TOML document of the configuration file ``p``, not yet validated (see
    :func:`load_config` for which files are read); raises ConfigError naming ``p``."""
    raw = read_config_bytes(p)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError([f"{p}: not valid UTF-8: {exc.reason}"]) from exc
    return parse_toml(text, str(p))


def read_config_bytes(p: Path) -> bytes:
    """The bytes of the configuration file ``p``: a regular file of at most 1 MiB, opened
    without blocking (a FIFO or device is refused); raises ``ConfigError`` naming ``p``."""
    try:
        return read_regular_file(p, MAX_CONFIG_BYTES, "config file")
    except InputFileError as exc:
        raise ConfigError([str(exc)]) from exc


def parse_config(text: str, source: str = "<string>") -> Config:
    """Parse and validate TOML text; raises ConfigError listing every problem."""
    return config_from_data(parse_toml(text, source), source)


def parse_toml(text: str, source: str) -> dict[str, Any]:
    """The TOML document of ``text``; raises ConfigError naming ``source``.

    A text nesting deeper than :data:`~nri_plrm.config.shape.MAX_KEY_DEPTH` is refused before it
    is parsed (:func:`~nri_plrm.config.shape.check_depth`): the parser's time and memory grow
    with the square of a key's depth."""
    check_depth(text, source)
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError([f"{source}: not valid TOML: {exc}"]) from exc


def config_from_data(data: Mapping[str, Any], source: str) -> Config:
    """Validate a parsed TOML document read from ``source``; raises ConfigError listing every
    problem."""
    return _Parser(source).parse(data)


_T = TypeVar("_T")


class _Parser:
    """Walks the TOML document table by table, collecting errors instead of stopping."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.errors: list[str] = []
        self.unknown_names: list[tuple[str, str, Collection[str]]] = []
        """Errors about an unknown name: the error, the name and the names it could have meant;
        the did-you-mean hint is looked up only for the errors listed (at most MAX_ERRORS, when
        a file may hold a hundred thousand unknown keys)."""

    def error(
        self, key: str, value: object, rule: str, *, unknown: tuple[str, Collection[str]] = ("", ())
    ) -> None:
        """Record ``key: value: rule``; ``unknown``: the unknown name and the known names, for a
        did-you-mean hint after the rule."""
        text = f"{clip(key)}: {format_value(value)}: {rule}"
        name, known = unknown
        if known:
            self.unknown_names.append((text, name, known))
        else:
            self.errors.append(text)

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
            resize=self._table("resize", tables["resize"], ResizeSettings()),
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
        device = config.pod_resources.device_timeout
        if isinstance(device, float) and isinstance(budget, float) and device >= budget:
            self.error(
                "pod_resources.device_timeout",
                device,
                f"must be less than nri.request_timeout ({budget:g} s): RunPodSandbox waits "
                "this long for the kubelet's answer and must still answer within the runtime's "
                "request budget",
            )
        if self.errors or self.unknown_names:
            raise ConfigError(self._listed(names))
        return config

    def _listed(self, names: list[str]) -> list[str]:
        """The errors in order, at most MAX_ERRORS lines, the last counting the rest."""
        order = self._order(names)
        found = [(error, "", ()) for error in self.errors] + self.unknown_names
        found.sort(key=lambda entry: (bool(entry[2]), order(entry[0])))
        listed = found if len(found) <= MAX_ERRORS else found[: MAX_ERRORS - 1]
        errors = [
            error + (did_you_mean(name, known) if known else "") for error, name, known in listed
        ]
        if len(found) > MAX_ERRORS:
            more = len(found) - MAX_ERRORS + 1
            errors.append(f"{clip(self.source)}: {more} more errors not listed")
        return errors

    @staticmethod
    def _order(names: list[str]) -> Callable[[str], tuple[int, str]]:
        """Errors by table (in documented order), then by key path; :meth:`_listed` puts
        unknown keys after every other error (a real error must not hide behind many of them
        under the cap)."""
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
            self.error(path, value, "unknown key", unknown=(key, known))

    def _table(
        self,
        name: str,
        table: Mapping[str, Any],
        defaults: _T,
        *,
        skip: frozenset[str] = frozenset(),
        extra: frozenset[str] = frozenset(),
        **readers: Reader,
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
                    reader = reader_for(default)
                result = reader(self, f"{name}.{key}", table[key])
                if result is not INVALID:
                    values[key] = result
        return dataclasses.replace(defaults, **values)  # type: ignore[type-var]

    def _nri(self, table: Mapping[str, Any]) -> NRISettings:
        return self._table(
            "nri",
            table,
            NRISettings(),
            socket=path,
            plugin_name=plugin_name,
            plugin_index=plugin_index,
            registration_timeout=seconds,
            request_timeout=seconds,
            cri_socket=optional_path,
        )

    def _state(self, table: Mapping[str, Any]) -> StateSettings:
        return self._table(
            "state",
            table,
            StateSettings(),
            dir=path,
            kubelet_state_dir=optional_path,
            kubelet_cpu_manager_state=optional_path,
        )

    def _pod_resources(self, table: Mapping[str, Any]) -> PodResourcesSettings:
        settings = self._table(
            "pod_resources",
            table,
            PodResourcesSettings(),
            socket=path,
            mode=socket_mode,
            kubelet_socket=optional_path,
            kubelet_timeout=seconds,
            kubelet_device_checkpoint=optional_path,
            device_timeout=seconds,
            burst=positive_int,
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
        return self._table("metrics", table, MetricsSettings(), address=address)

    def _log(self, table: Mapping[str, Any]) -> LogSettings:
        return self._table(
            "log", table, LogSettings(), level=choice(LOG_LEVELS), format=choice(LOG_FORMATS)
        )

    def _topology(self, table: Mapping[str, Any]) -> TopologySettings:
        return self._table(
            "topology",
            table,
            TopologySettings(),
            sysfs_root=path,
            cgroup_root=optional_path,
            kubepods_cgroup=cgroup_name,
        )

    def _kubernetes(self, table: Mapping[str, Any]) -> KubernetesSettings:
        return self._table(
            "kubernetes",
            table,
            KubernetesSettings(),
            kubeconfig=optional_path,
            lookup_timeout=seconds,
        )

    def _topology_manager(self, table: Mapping[str, Any]) -> TopologyManagerSettings:
        settings = self._table(
            "topology_manager",
            table,
            TopologyManagerSettings(),
            skip=frozenset({"prefer_closest_numa_nodes", "max_allowable_numa_nodes"}),
            extra=frozenset({"options"}),
            policy=choice(TOPOLOGY_POLICIES),
            scope=choice(TOPOLOGY_SCOPES),
            kubelet_policy=choice(TOPOLOGY_POLICIES),
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
                near = (name, ()) if name in TM_OPTIONS else (name, TM_OPTIONS)
                self.error(key, value, clip(str(err)), unknown=near)
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
            reserved_cpus=reserved_cpus,
            reserved_cpu_count=positive_int,
        )
        has_cpus = "reserved_cpus" in table
        has_count = "reserved_cpu_count" in table
        if has_count and not has_cpus:
            settings = dataclasses.replace(settings, reserved_cpus=None)
        cpus_valid = not any(e.startswith("cpu_manager.reserved_cpus:") for e in self.errors)
        if has_cpus and has_count and cpus_valid:
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
                self.error(
                    key,
                    value,
                    f"unknown CPU Manager Policy option: {go_quote(name)}",
                    unknown=(name, OPTION_MATURITY),
                )
                continue
            try:
                parsed = parse_option_value(name, value)
            except CPUManagerConfigError as err:
                self.error(key, value, clip(str(err)))
                continue
            if maturity == "alpha" and not settings.enable_alpha_options:
                self.error(
                    key,
                    value,
                    "CPU Manager Policy Alpha-level Options not enabled, but option "
                    f"{go_quote(name)} provided (set cpu_manager.enable_alpha_options = true)",
                )
                continue
            if maturity == "beta" and not settings.enable_beta_options:
                self.error(
                    key,
                    value,
                    "CPU Manager Policy Beta-level Options not enabled, but option "
                    f"{go_quote(name)} provided (set cpu_manager.enable_beta_options = true)",
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
            reserved_memory=reserved_memory,
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
