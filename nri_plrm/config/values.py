"""Readers of single TOML values for :mod:`nri_plrm.config.file`: each returns the value read
or :data:`INVALID` after reporting ``key: value: rule`` to the parser."""

from __future__ import annotations

import difflib
import json
import re
import sys
from collections.abc import Callable, Collection, Mapping
from typing import Any, Protocol

from nri_plrm.base.cpuset import CPUSet, CPUSetError
from nri_plrm.base.quantity import QuantityError, memory_bytes

if sys.version_info >= (3, 11):
    pass
else:  # pragma: no cover - exercised on Python 3.10 only
    pass

from nri_plrm.base.quantity import is_page_size
from nri_plrm.config.settings import (
    ReservedMemory,
    clip,
)

PLUGIN_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
HUGEPAGES_KEY = re.compile(r"^hugepages-(.+)$")


class ErrorSink(Protocol):
    """Collects the errors found while reading (the file parser)."""

    errors: list[str]

    def error(self, key: str, value: object, rule: str) -> None:
        """Record ``key: value: rule``."""
        ...


class Invalid:
    """Marker returned by a reader that recorded an error."""


INVALID: Any = Invalid()
Reader = Callable[[ErrorSink, str, Any], Any]


def reader_for(default: object) -> Reader:
    if isinstance(default, bool):
        return boolean
    if isinstance(default, float):
        return positive_float
    if isinstance(default, int):
        return positive_int
    return string


def boolean(p: ErrorSink, key: str, value: Any) -> Any:
    if isinstance(value, bool):
        return value
    p.error(key, value, "must be true or false")
    return INVALID


def string(p: ErrorSink, key: str, value: Any) -> Any:
    if isinstance(value, str):
        return value
    p.error(key, value, "must be a string")
    return INVALID


def positive_float(p: ErrorSink, key: str, value: Any) -> Any:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
        return float(value)
    p.error(key, value, "must be a number greater than 0")
    return INVALID


def seconds(p: ErrorSink, key: str, value: Any) -> Any:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value <= 3600:
        return float(value)
    p.error(key, value, "must be a number of seconds greater than 0 and at most 3600")
    return INVALID


def positive_int(p: ErrorSink, key: str, value: Any) -> Any:
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    p.error(key, value, "must be an integer greater than 0")
    return INVALID


def path(p: ErrorSink, key: str, value: Any) -> Any:
    if not isinstance(value, str) or not value.startswith("/"):
        p.error(key, value, "must be an absolute path")
        return INVALID
    if "\x00" in value:
        p.error(key, value, "must not contain NUL characters")
        return INVALID
    return value


def optional_path(p: ErrorSink, key: str, value: Any) -> Any:
    if value == "":
        return ""
    if not isinstance(value, str) or not value.startswith("/"):
        p.error(key, value, 'must be an absolute path, or "" to turn it off')
        return INVALID
    return path(p, key, value)


def cgroup_name(p: ErrorSink, key: str, value: Any) -> Any:
    parts = value.split("/") if isinstance(value, str) else [""]
    if value == "" or all(part not in ("", ".", "..") and "\x00" not in part for part in parts):
        return value
    p.error(key, value, 'must be a cgroup path relative to the cpuset hierarchy, or ""')
    return INVALID


def plugin_name(p: ErrorSink, key: str, value: Any) -> Any:
    if isinstance(value, str) and PLUGIN_NAME.match(value):
        return value
    p.error(key, value, "must be a non-empty name of letters, digits, '.', '_' or '-'")
    return INVALID


def plugin_index(p: ErrorSink, key: str, value: Any) -> Any:
    if isinstance(value, str) and len(value) == 2 and value.isascii() and value.isdigit():
        return value
    p.error(key, value, 'must be exactly 2 digits as a string (e.g. "50")')
    return INVALID


def socket_mode(p: ErrorSink, key: str, value: Any) -> Any:
    mode: int | None = None
    if isinstance(value, str) and re.fullmatch(r"0?[0-7]{3}", value):
        mode = int(value, 8)
    elif isinstance(value, int) and not isinstance(value, bool):
        mode = value
    if mode not in (0o600, 0o660):
        p.error(key, value, 'must be "0600" (owner only) or "0660" (owner and group)')
        return INVALID
    return mode


def address(p: ErrorSink, key: str, value: Any) -> Any:
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
    return INVALID


def choice(allowed: tuple[str, ...]) -> Reader:
    def read(p: ErrorSink, key: str, value: Any) -> Any:
        if isinstance(value, str) and value in allowed:
            return value
        p.error(key, value, f"must be one of {', '.join(allowed)}")
        return INVALID

    return read


def reserved_cpus(p: ErrorSink, key: str, value: Any) -> Any:
    if not isinstance(value, str):
        p.error(key, value, 'must be a cpuset string (e.g. "0" or "0,32")')
        return INVALID
    try:
        cpus = CPUSet.parse(value)
    except CPUSetError as exc:
        p.error(key, value, f"not a valid cpuset: {clip(str(exc))}")
        return INVALID
    if not cpus:
        p.error(
            key,
            value,
            "the static policy requires at least one reserved CPU (kubelet: systemreserved.cpu "
            "+ kubereserved.cpu must be greater than zero)",
        )
        return INVALID
    return cpus


def reserved_memory(p: ErrorSink, key: str, value: Any) -> Any:
    if not isinstance(value, list):
        p.error(key, value, "must be a list of { numa_node = N, memory = Q, hugepages-<size> = Q }")
        return INVALID
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
            page = HUGEPAGES_KEY.match(name)
            if name != "memory" and page is None:
                hint = did_you_mean(name, ("numa_node", "memory", "hugepages-2Mi", "hugepages-1Gi"))
                p.error(field_key, raw, f"unknown key{hint}")
                ok = False
                continue
            if page is not None and not is_page_size(page.group(1)):
                p.error(
                    field_key,
                    raw,
                    f"hugepage size {go_quote(page.group(1))} is not a power-of-two binary "
                    "quantity (e.g. hugepages-2Mi, hugepages-1Gi)",
                )
                ok = False
                continue
            size = quantity(p, field_key, raw)
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
    return tuple(entries) if ok else INVALID


def go_quote(text: str) -> str:
    """A name double-quoted as Go's %q prints it (clipped like every echoed value)."""
    return clip(json.dumps(text))


def did_you_mean(key: str, known: Collection[str]) -> str:
    close = difflib.get_close_matches(key, list(known), n=1, cutoff=0.6)
    if close:
        return f'; did you mean "{close[0]}"?'
    return f" (known: {', '.join(sorted(known))})"


def quantity(p: ErrorSink, key: str, value: Any) -> int | None:
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
