"""Giving a returned CPU back to the ``kubepods`` cpuset hierarchy on cgroup v1.

On cgroup v1 the kernel removes an offline CPU from ``cpuset.cpus`` of every cpuset (a cpuset
left empty has its tasks moved to the nearest ancestor with CPUs) and never gives it back: the
``kubepods`` tree stays without it, and the runtime then fails to write a container cpuset that
holds it (``EACCES``: a v1 cpuset must be a subset of its parent's). cgroup v2 keeps
``cpuset.cpus`` and changes only ``cpuset.cpus.effective``: nothing to repair there.

:func:`give_back` walks the tree top-down (parents before children) and writes back, into every
cgroup that is not a container's, the returned CPUs that are online now and in its parent's
``cpuset.cpus``. Pod, QoS and ``kubepods`` cgroups are created as copies of their parent and
never narrowed when the kubelet's managers are ``none``, so that is exactly what the kernel took
from them. Container cgroups (children of a pod cgroup) are left to the runtime: the plugin
re-asserts them with ``UpdateContainers`` afterwards. Each write is logged.
"""

from __future__ import annotations

import enum
import logging
import re
from dataclasses import dataclass
from pathlib import Path

from nri_plrm.base.cpuset import CPUSet

log = logging.getLogger("nri_plrm.topology.hotplug.cgroupv1")

KUBEPODS_NAMES = ("kubepods", "kubepods.slice")
"""The kubelet's top cgroup with the ``cgroupfs`` and the ``systemd`` cgroup drivers."""
_POD = re.compile(r"(?:.*-)?pod[0-9a-fA-F_-]{8,}(?:\.slice)?")
"""A pod cgroup: ``pod<uid>`` (cgroupfs) or ``kubepods-<qos>-pod<uid>.slice`` (systemd)."""


class CgroupVersion(str, enum.Enum):
    """The cpuset controller's hierarchy."""

    V1 = "v1"
    V2 = "v2"
    UNKNOWN = "unknown"


def cgroup_version(cgroup_root: Path) -> CgroupVersion:
    """v1 when ``<root>/cpuset`` is a v1 cpuset hierarchy (legacy or hybrid), v2 when the root is
    the unified hierarchy, else unknown."""
    if (cgroup_root / "cpuset" / "cpuset.cpus").is_file():
        return CgroupVersion.V1
    if (cgroup_root / "cgroup.controllers").is_file():
        return CgroupVersion.V2
    return CgroupVersion.UNKNOWN


def kubepods_cpuset(cgroup_root: Path, name: str = "") -> Path | None:
    """The ``kubepods`` cgroup of the v1 cpuset hierarchy (``name``, else the first of
    :data:`KUBEPODS_NAMES` that exists), or None."""
    for candidate in (name,) if name else KUBEPODS_NAMES:
        path = cgroup_root / "cpuset" / candidate
        if (path / "cpuset.cpus").is_file():
            return path
    return None


def is_container_cgroup(path: Path) -> bool:
    """Whether ``path`` is a container's cgroup (its parent is a pod cgroup)."""
    return _POD.fullmatch(path.parent.name) is not None


@dataclass(frozen=True)
class CpusetWrite:
    """One ``cpuset.cpus`` given back (``error`` set when the write failed)."""

    path: Path
    before: CPUSet
    after: CPUSet
    error: str = ""


def read_cpus(path: Path) -> CPUSet:
    """The ``cpuset.cpus`` of the cgroup at ``path``."""
    return CPUSet.parse((path / "cpuset.cpus").read_text().strip())


def give_back(kubepods: Path, returned: CPUSet, online: CPUSet) -> list[CpusetWrite]:
    """Write ``returned`` CPUs that are online back into the hierarchy under ``kubepods``,
    top-down, each cgroup getting only CPUs its parent has; container cgroups are skipped.

    Returns every write attempted, in order; a failed write is logged and its subtree gets
    nothing (its children could not take a CPU their parent lacks).
    """
    writes: list[CpusetWrite] = []
    wanted = returned & online
    if not wanted:
        return writes
    pending = [(kubepods, read_cpus(kubepods.parent))]
    while pending:
        path, parent = pending.pop(0)
        try:
            before = read_cpus(path)
        except (OSError, ValueError) as exc:
            log.warning("hotplug: cgroup v1: cannot read %s/cpuset.cpus: %s", path, exc)
            continue
        after = before | (wanted & parent)
        if after != before:
            try:
                (path / "cpuset.cpus").write_text(str(after))
            except OSError as exc:
                writes.append(CpusetWrite(path, before, after, exc.strerror or str(exc)))
                log.warning(
                    "hotplug: cgroup v1: cannot give cpus %s back to %s (%s -> %s): %s",
                    after - before,
                    path,
                    before or "-",
                    after,
                    exc,
                )
                continue
            writes.append(CpusetWrite(path, before, after))
            log.info(
                "hotplug: cgroup v1: gave cpus %s back to %s (%s -> %s)",
                after - before,
                path,
                before or "-",
                after,
                extra={
                    "plrm": {
                        "event": "hotplug-cgroup-repair",
                        "cgroup": str(path),
                        "before": str(before),
                        "after": str(after),
                    }
                },
            )
        children = sorted(p for p in path.iterdir() if p.is_dir())
        pending.extend((child, after) for child in children if not is_container_cgroup(child))
    return writes


def stranded_tasks(kubepods: Path) -> list[tuple[Path, int]]:
    """Cgroups above the containers' (pod, QoS, ``kubepods``) that hold tasks, with how many.

    They hold none in the kubelet's layout; on cgroup v1 the kernel moves there the tasks of a
    container whose CPUs all went offline, and they stay when the CPUs return (nothing here
    moves them back: the container runs on its pod's CPUs until it is restarted).
    """
    found = []
    pending = [kubepods]
    while pending:
        path = pending.pop(0)
        try:
            count = len((path / "tasks").read_text().split())
            children = sorted(p for p in path.iterdir() if p.is_dir())
        except OSError:
            continue
        if count:
            found.append((path, count))
        pending.extend(child for child in children if not is_container_cgroup(child))
    return found
