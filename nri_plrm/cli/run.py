"""``nri-plrm run``: load the configuration and run the daemon until it is stopped."""

from __future__ import annotations

import argparse
import asyncio
import os
from typing import TextIO

from nri_plrm.cli.inputs import UsageError, load
from nri_plrm.config.settings import DEFAULT_PATH
from nri_plrm.daemon import service as daemon

EXAMPLE_CONFIG = "/usr/share/doc/nri-plrm/config.toml"
"""The documented example configuration (every key at its default) the .deb installs."""


def missing_config_hint(path: str) -> str:
    """What to do when the configuration file ``path`` does not exist."""
    return (
        f"no configuration file at {path}: create it (every key is optional; an empty file "
        f"runs with the defaults), e.g. `install -D -m 0644 {EXAMPLE_CONFIG} {DEFAULT_PATH}` "
        "from the .deb's documented example (packaging/config.toml in the source; keys in "
        "docs/config.md), or pass --config FILE"
    )


def cmd_run(args: argparse.Namespace, out: TextIO) -> int:
    """``run --config FILE``."""
    if not os.path.lexists(args.config):
        raise UsageError(missing_config_hint(args.config))
    config = load(args.config)
    os.umask(0o077)
    return asyncio.run(daemon.run(config))
