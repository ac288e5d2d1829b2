"""``nri-plrm check-config``: validate a configuration file, and against a machine.

The machine is the one of ``--topology`` or ``--sysfs``, else this machine as the daemon would
discover it (``[topology] sysfs_root``). When that cannot be read, the file's own rules are
still checked and the output says which checks were not made: never a bare ``ok``.
"""

from __future__ import annotations

import argparse
from typing import TextIO

from nri_plrm.cli.inputs import EXIT_OK, CommandError, UsageError, load, machine
from nri_plrm.config.host_checks import host_problems
from nri_plrm.config.kubeconfig import kubeconfig_problems
from nri_plrm.config.settings import ConfigError, validate_for_topology
from nri_plrm.topology.model import Topology

MACHINE_RULES = "reserved CPUs and memory exist, NUMA node limits"


def cmd_check_config(args: argparse.Namespace, out: TextIO) -> int:
    """``check-config FILE``."""
    config = load(args.file)
    problems = host_problems(config) + kubeconfig_problems(config)
    if problems:
        raise UsageError(*(f"{args.file}: {e}" for e in problems))
    given = args.topology is not None or args.sysfs is not None
    try:
        topology = machine(args, config, None)
    except (UsageError, CommandError) as exc:
        if given:
            raise
        out.write(
            f"{args.file}: valid; NOT checked against a machine ({MACHINE_RULES}): "
            f"{exc}; run it on the node or pass --sysfs DIR or --topology SPEC\n"
        )
        return EXIT_OK
    try:
        validate_for_topology(config, topology)
    except ConfigError as exc:
        raise UsageError(*exc.located(args.file)) from exc
    where = "the given machine" if given else f"this machine ({config.topology.sysfs_root})"
    out.write(f"{args.file}: ok, also against {where}: {_summary(topology)}\n")
    return EXIT_OK


def _summary(topology: Topology) -> str:
    cpus, nodes = topology.num_cpus, topology.num_numa_nodes
    return f"{cpus} CPU{'s' * (cpus != 1)}, {nodes} NUMA node{'s' * (nodes != 1)}"
