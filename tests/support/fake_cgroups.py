"""Fake cgroup trees laid out like the kernel's, and the kernel's reaction to a CPU hotplug.

cgroup v1 (hybrid): ``<root>/cpuset`` is the cpuset hierarchy; every cgroup directory holds
``cpuset.cpus``, ``cpuset.effective_cpus``, ``cpuset.mems``, ``tasks`` and ``cgroup.procs``.
Going offline, the kernel removes the CPU from ``cpuset.cpus`` of every cpuset; coming back, it
gives it back to the root cpuset only (what the recording in tests/data/uevents shows).
cgroup v2: ``<root>`` is the unified hierarchy (``cgroup.controllers``); ``cpuset.cpus`` stays,
only ``cpuset.cpus.effective`` follows the online CPUs.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path

from nri_plrm.base.cpuset import CPUSet

V1_FILES = ("cpuset.mems", "cpuset.effective_mems", "tasks", "cgroup.procs", "notify_on_release")
V2_FILES = ("cgroup.procs", "cgroup.type", "cpuset.mems", "cpuset.mems.effective")


def _write_v1(path: Path, cpus: CPUSet) -> None:
    path.mkdir(parents=True, exist_ok=True)
    for name in V1_FILES:
        (path / name).write_text("0\n" if "mems" in name else "")
    (path / "cpuset.cpus").write_text(f"{cpus}\n")
    (path / "cpuset.effective_cpus").write_text(f"{cpus}\n")


def write_v1_tree(root: Path, cpus: CPUSet, cgroups: Mapping[str, CPUSet]) -> Path:
    """A v1 hierarchy at ``root/cpuset`` (root cpuset = ``cpus``) with ``cgroups`` (paths
    relative to the hierarchy, parents listed first); returns the hierarchy's root."""
    hierarchy = root / "cpuset"
    _write_v1(hierarchy, cpus)
    (hierarchy / "cgroup.sane_behavior").write_text("0\n")
    for rel, own in cgroups.items():
        _write_v1(hierarchy / rel, own)
    return hierarchy


def write_v2_tree(root: Path, cpus: CPUSet, cgroups: Mapping[str, CPUSet]) -> Path:
    """A v2 unified hierarchy at ``root`` with ``cgroups`` and their ``cpuset.cpus``."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "cgroup.controllers").write_text("cpuset cpu io memory hugetlb pids rdma misc\n")
    (root / "cpuset.cpus.effective").write_text(f"{cpus}\n")
    for rel, own in cgroups.items():
        path = root / rel
        path.mkdir(parents=True, exist_ok=True)
        for name in V2_FILES:
            (path / name).write_text("")
        (path / "cpuset.cpus").write_text(f"{own}\n" if own else "\n")
        (path / "cpuset.cpus.effective").write_text(f"{own or cpus}\n")
    return root


def cgroups(hierarchy: Path) -> Iterator[Path]:
    """Every cgroup of a hierarchy, parents before children."""
    yield hierarchy
    yield from sorted(p for p in hierarchy.rglob("*") if p.is_dir())


def read(path: Path, name: str = "cpuset.cpus") -> CPUSet:
    return CPUSet.parse(path.joinpath(name).read_text().strip())


def kernel_v1_offline(hierarchy: Path, cpu: int) -> None:
    """What a v1 kernel does when ``cpu`` goes offline: it leaves every cpuset."""
    for path in cgroups(hierarchy):
        for name in ("cpuset.cpus", "cpuset.effective_cpus"):
            path.joinpath(name).write_text(f"{read(path, name) - CPUSet([cpu])}\n")


def kernel_v1_online(hierarchy: Path, cpu: int) -> None:
    """What a v1 kernel does when ``cpu`` comes back: only the root cpuset gets it."""
    for name in ("cpuset.cpus", "cpuset.effective_cpus"):
        hierarchy.joinpath(name).write_text(f"{read(hierarchy, name) | CPUSet([cpu])}\n")


def snapshot(root: Path) -> dict[str, str]:
    """Every file of a tree and its contents (to prove nothing was written)."""
    return {str(p.relative_to(root)): p.read_text() for p in root.rglob("*") if p.is_file()}
