"""What the commands share: exit codes, the two error kinds, and the config and machine options.

Exit codes: 0 success, 1 a runtime failure (e.g. the state cannot be read), 2 bad input (an
invalid configuration, manifest, topology spec or option), 3 ``simulate --fail-on-reject``
with a rejected pod.
"""

from __future__ import annotations

import argparse
import os

from nri_plrm.config.file import load_config
from nri_plrm.config.settings import Config, ConfigError
from nri_plrm.topology.machines import load_topology
from nri_plrm.topology.model import Topology, TopologyError
from nri_plrm.topology.sysfs import discover

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_REJECTED = 3
"""``simulate --fail-on-reject``: the simulation ran and at least one pod was rejected."""


class UsageError(Exception):
    """Bad input from the operator (exit code 2); the message names the input and the rule."""

    def __init__(self, *lines: str) -> None:
        super().__init__("\n".join(lines))
        self.lines = lines


class CommandError(Exception):
    """A runtime failure (exit code 1)."""


def load(path: str | None) -> Config:
    """The configuration in ``path`` (built-in defaults when None); errors become UsageError."""
    if path is None:
        return Config()
    try:
        return load_config(path)
    except ConfigError as exc:
        raise UsageError(*exc.located(path)) from exc


def machine(args: argparse.Namespace, config: Config, default_spec: str | None) -> Topology:
    """The machine of ``--topology`` or ``--sysfs``, else ``default_spec``, else discovered."""
    try:
        if args.topology is not None:
            return load_topology(args.topology)
        if args.sysfs is not None:
            return _discover(args.sysfs, "--sysfs")
        if default_spec is not None:
            return load_topology(default_spec)
        return _discover(config.topology.sysfs_root, "[topology] sysfs_root")
    except TopologyError as exc:
        raise UsageError(str(exc)) from exc


def _discover(root: str, origin: str) -> Topology:
    if not os.path.isdir(root):
        shown = root if root else '""'
        raise UsageError(f"{origin} {shown}: not a directory")
    try:
        return discover(root)
    except OSError as exc:
        raise CommandError(f"cannot read the machine from {root}: {exc}") from exc
