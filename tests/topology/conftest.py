"""Fixtures of the topology tests."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

FAST_TMP = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
"""RAM-backed temp space when the machine has it: fake sysfs trees are thousands of files."""


@pytest.fixture
def sysfs_root() -> Iterator[Path]:
    """An empty directory for a fake sysfs tree (RAM-backed when possible)."""
    with tempfile.TemporaryDirectory(prefix="nri-plrm-sysfs-", dir=FAST_TMP) as root:
        yield Path(root)
