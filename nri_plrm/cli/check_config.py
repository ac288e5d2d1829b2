"""``nri-plrm check-config``: validate a configuration file, optionally against a machine."""

from __future__ import annotations

import argparse
from typing import TextIO

from nri_plrm.cli.inputs import EXIT_OK, UsageError, load, machine
from nri_plrm.config import ConfigError, validate_for_topology
from nri_plrm.safepaths import host_problems


def cmd_check_config(args: argparse.Namespace, out: TextIO) -> int:
    """``check-config FILE``."""
    config = load(args.file)
    problems = host_problems(config)
    if problems:
        raise UsageError(*(f"{args.file}: {e}" for e in problems))
    if args.topology or args.sysfs:
        topology = machine(args, config, None)
        try:
            validate_for_topology(config, topology)
        except ConfigError as exc:
            raise UsageError(*(f"{args.file}: {e}" for e in exc.errors)) from exc
    out.write(f"{args.file}: ok\n")
    return EXIT_OK
