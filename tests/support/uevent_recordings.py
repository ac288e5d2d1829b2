"""Kernel uevent datagrams: the shared recording, the repository's own, and hand-made ones.

Both are JSON lines with ``raw_base64`` (the exact datagram) per message. The shared one is
located via ``$UEVENT_CAPTURE_DIR`` (default ``<repo>/../shared/testdata/uevents``); the
repository's own live in ``tests/data/uevents``.
"""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

_REPO = Path(__file__).resolve().parents[2]
OWN_DIR = _REPO / "tests" / "data" / "uevents"
UEVENT_CAPTURE_ENV = "UEVENT_CAPTURE_DIR"


def shared_root() -> Path:
    """Where the shared recording is looked for: ``$UEVENT_CAPTURE_DIR`` or
    ``<repo>/../shared/testdata/uevents``."""
    env = os.environ.get(UEVENT_CAPTURE_ENV)
    return Path(env) if env else _REPO.parent / "shared" / "testdata" / "uevents"


def shared_dir() -> Path | None:
    """The shared recording directory, or None when it is absent."""
    root = shared_root()
    return root if any(root.glob("*.jsonl")) else None


def missing_shared_reason() -> str:
    """The one-line skip reason of the shared-recording replay tests."""
    return (
        f"recorded kernel uevents not found at {shared_root()}: set {UEVENT_CAPTURE_ENV} to the "
        "uevents directory to run the uevent replay tests"
    )


def datagrams(path: Path) -> list[bytes]:
    """Every datagram of one recording, in the order received."""
    lines = path.read_text().splitlines()
    return [base64.b64decode(json.loads(line)["raw_base64"]) for line in lines if line.strip()]


def kernel_payload(action: str, devpath: str, subsystem: str, seqnum: int = 7) -> bytes:
    """A datagram laid out as the kernel sends it: ``ACTION@DEVPATH`` then NUL-ended keys."""
    items = [
        f"{action}@{devpath}",
        f"ACTION={action}",
        f"DEVPATH={devpath}",
        f"SUBSYSTEM={subsystem}",
        f"SEQNUM={seqnum}",
    ]
    return b"".join(item.encode() + b"\x00" for item in items)
