"""Shared by the live CPU-hotplug scripts (root, a machine you may disturb): a CPU's online
switch, a snapshot of a cgroup v1 cpuset tree, and a scratch tree of cgroups with ``sleep``
processes in them that is always taken down again."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def set_online(cpu: int, online: bool) -> None:
    """Bring ``cpu`` online or take it offline through sysfs."""
    Path(f"/sys/devices/system/cpu/cpu{cpu}/online").write_text("1" if online else "0")


def snapshot(root: Path) -> dict[str, Any]:
    """``cpuset.cpus`` and the task count of ``root`` and every cgroup below it."""
    return {
        str(path.relative_to(root.parent)): {
            "cpuset.cpus": (path / "cpuset.cpus").read_text().strip(),
            "tasks": len((path / "tasks").read_text().split()),
        }
        for path in sorted([root, *(p for p in root.rglob("*") if p.is_dir())])
    }


class ScratchTree:
    """Cgroups made for an experiment and the ``sleep`` processes placed in them."""

    def __init__(self) -> None:
        self.made: list[Path] = []
        self.sleepers: list[subprocess.Popen[bytes]] = []

    def make(self, path: Path, cpus: str, mems: str) -> None:
        """Create the cgroup ``path`` with the given ``cpuset.mems`` and ``cpuset.cpus``."""
        path.mkdir()
        self.made.append(path)
        (path / "cpuset.mems").write_text(mems)
        (path / "cpuset.cpus").write_text(cpus)

    def run_sleeper(self, path: Path) -> None:
        """Start a ``sleep`` and move it into the cgroup ``path``."""
        proc = subprocess.Popen(["sleep", "600"])
        self.sleepers.append(proc)
        (path / "tasks").write_text(str(proc.pid))

    def close(self) -> None:
        """Kill the sleepers, then remove the cgroups innermost first."""
        for proc in self.sleepers:
            proc.kill()
            proc.wait()
        for path in reversed(self.made):
            with contextlib.suppress(OSError):
                path.rmdir()


@contextlib.contextmanager
def scratch_tree() -> Iterator[ScratchTree]:
    """A :class:`ScratchTree` closed on the way out, whatever happened."""
    tree = ScratchTree()
    try:
        yield tree
    finally:
        tree.close()
