"""``nri-plrm scheduler-extender``'s configuration: the ``[scheduler_extender]`` table of a TOML
file of its own (other tables are ignored; the plugin refuses this one). Every key is optional;
a bad value refuses to start with its key path (``scheduler_extender.scoring: 'fewest': must be
one of least-allocated, most-allocated``). docs/scheduler-extender.md lists the keys.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from nri_plrm.config.file import parse_toml
from nri_plrm.config.settings import ConfigError
from nri_plrm.observability.metrics_server import parse_address

SECTION = "scheduler_extender"
LEAST_ALLOCATED = "least-allocated"
MOST_ALLOCATED = "most-allocated"
SCORINGS = (LEAST_ALLOCATED, MOST_ALLOCATED)
UNKNOWN_PASS = "pass"
UNKNOWN_FAIL = "fail"


@dataclass(frozen=True)
class ExtenderSettings:
    """``[scheduler_extender]``."""

    address: str = "0.0.0.0:9742"
    """Where the extender's HTTP API (``/filter``, ``/prioritize``, ``/bind``, ``/metrics``,
    ``/healthz``) listens."""
    kubeconfig: str = ""
    """A kubeconfig file; ``""`` = the in-cluster service account."""
    resync: float = 300.0
    """Seconds between two full lists of the NodeResourceTopology objects (changes arrive
    through a watch in between)."""
    scoring: str = LEAST_ALLOCATED
    """``least-allocated`` (spread) or ``most-allocated`` (pack), per NUMA node."""
    assume_ttl: float = 60.0
    """Seconds a pod placed on a node counts there while the node's object does not show it."""
    unknown_nodes: str = UNKNOWN_PASS
    """Nodes without a usable object (no nri-plrm there): ``pass`` them (the node decides) or
    ``fail`` them."""
    log_level: str = "info"
    """``debug``, ``info``, ``warning`` or ``error``."""


_CHOICES = {
    "scoring": SCORINGS,
    "unknown_nodes": (UNKNOWN_PASS, UNKNOWN_FAIL),
    "log_level": ("debug", "info", "warning", "error"),
}
_POSITIVE = {"resync": 3600.0, "assume_ttl": 86400.0}


def settings_from_data(data: Mapping[str, Any], source: str) -> ExtenderSettings:
    """Validate the ``[scheduler_extender]`` table of a parsed document; raises ConfigError
    listing every problem as ``source: scheduler_extender.<key>: <value>: <rule>``."""
    table = data.get(SECTION, {})
    if not isinstance(table, Mapping):
        raise ConfigError([f"{source}: {SECTION}: {table!r}: must be a table"])
    known = {f.name: f for f in fields(ExtenderSettings)}
    errors: list[str] = []
    values: dict[str, Any] = {}
    for key, value in table.items():
        path = f"{source}: {SECTION}.{key}"
        if key not in known:
            errors.append(f"{path}: unknown key (known: {', '.join(sorted(known))})")
            continue
        if key in _POSITIVE:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                errors.append(f"{path}: {value!r}: must be a number of seconds")
                continue
            if not math.isfinite(value) or not 0 < value <= _POSITIVE[key]:
                errors.append(f"{path}: {value!r}: must be > 0 and <= {_POSITIVE[key]:g}")
                continue
            values[key] = float(value)
            continue
        if not isinstance(value, str):
            errors.append(f"{path}: {value!r}: must be a string")
            continue
        if key in _CHOICES and value not in _CHOICES[key]:
            errors.append(f"{path}: {value!r}: must be one of {', '.join(_CHOICES[key])}")
            continue
        if key == "address":
            try:
                parse_address(value)
            except ValueError:
                errors.append(f"{path}: {value!r}: must be host:port")
                continue
        values[key] = value
    if errors:
        raise ConfigError(errors)
    return ExtenderSettings(**values)


def parse_settings(text: str, source: str = "<string>") -> ExtenderSettings:
    """Parse TOML text; raises ConfigError."""
    return settings_from_data(parse_toml(text, source), source)


def load_settings(path: str) -> ExtenderSettings:
    """Read and validate a file; raises ConfigError naming it."""
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read(1 << 20)
    except OSError as exc:
        raise ConfigError([f"{path}: cannot read the configuration: {exc.strerror}"]) from exc
    return parse_settings(text, path)
