"""The running kubelet's command line: where its config file is, and flags that override it.

Command-line flags take precedence over the kubelet's configuration file, so a kubelet started
with ``--cpu-manager-policy=static`` runs the static manager whatever its file says.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

DEFAULT_PROC = "/proc"
FLAG_KEYS = {
    "cpu-manager-policy": "cpuManagerPolicy",
    "memory-manager-policy": "memoryManagerPolicy",
    "topology-manager-policy": "topologyManagerPolicy",
    "topology-manager-scope": "topologyManagerScope",
    "reserved-cpus": "reservedSystemCPUs",
    "cgroup-driver": "cgroupDriver",
    "feature-gates": "featureGates",
}
"""Kubelet flags doctor reads, by their configuration-file key."""


@dataclass(frozen=True)
class KubeletProcess:
    """A running kubelet: its pid, ``--config``, ``--root-dir`` and file keys set by flags."""

    pid: int
    config: str | None
    root_dir: str | None
    flags: Mapping[str, Any] = field(default_factory=dict)


def _feature_gates(text: str) -> dict[str, Any]:
    gates: dict[str, Any] = {}
    for item in text.split(","):
        name, sep, value = item.strip().partition("=")
        if name and sep:
            lowered = value.strip().lower()
            gates[name] = True if lowered == "true" else False if lowered == "false" else value
    return gates


def parse_flags(argv: Sequence[str]) -> dict[str, str]:
    """``--name=value`` and ``--name value`` pairs of ``argv`` (the last one wins)."""
    flags: dict[str, str] = {}
    i = 1
    while i < len(argv):
        arg = argv[i]
        if arg.startswith("--"):
            name, sep, value = arg[2:].partition("=")
            if not sep and i + 1 < len(argv) and not argv[i + 1].startswith("--"):
                value = argv[i + 1]
                i += 1
            flags[name] = value
        i += 1
    return flags


def kubelet_from_argv(pid: int, argv: Sequence[str]) -> KubeletProcess:
    """The kubelet described by its command line."""
    flags = parse_flags(argv)
    overrides: dict[str, Any] = {}
    for flag, key in FLAG_KEYS.items():
        if flag in flags:
            value = flags[flag]
            overrides[key] = _feature_gates(value) if key == "featureGates" else value
    return KubeletProcess(
        pid, flags.get("config") or None, flags.get("root-dir") or None, overrides
    )


def find_kubelet(proc: str = DEFAULT_PROC) -> KubeletProcess | None:
    """The first process under ``proc`` whose program is named ``kubelet``, or None."""
    try:
        entries = sorted(int(e) for e in os.listdir(proc) if e.isdigit())
    except OSError:
        return None
    for pid in entries:
        try:
            with open(os.path.join(proc, str(pid), "cmdline"), "rb") as handle:
                raw = handle.read()
        except OSError:
            continue  # gone, or not ours to read
        argv = [a.decode(errors="replace") for a in raw.split(b"\0") if a]
        if argv and os.path.basename(argv[0]) == "kubelet":
            return kubelet_from_argv(pid, argv)
    return None
