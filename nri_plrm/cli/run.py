"""``nri-plrm run``: load the configuration and run the daemon until it is stopped."""

from __future__ import annotations

import argparse
import asyncio
import os
from typing import TextIO

from nri_plrm import daemon
from nri_plrm.cli.inputs import load


def cmd_run(args: argparse.Namespace, out: TextIO) -> int:
    """``run --config FILE``."""
    config = load(args.config)
    os.umask(0o077)
    return asyncio.run(daemon.run(config))
