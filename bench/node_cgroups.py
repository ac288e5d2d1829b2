"""The benchmarks' loads placed as on a Kubernetes node: two sibling cgroups.

On a node, containerd and the plugin (a systemd unit, or a host-installed package) run in
``system.slice``, whose ``cpu.weight`` is systemd's default, 100; the pods run in
``kubepods.slice``, whose weight the kubelet computes from the node's allocatable CPU:
``shares = milliCPU * 1024 / 1000`` (at least 2, at most 262,144), then, on cgroup v2,
``weight = 1 + (shares - 2) * 9999 // 262142``. Inside ``system.slice`` each unit has its own
group: ``containerd.service`` (weight 100; containerd pulls and unpacks images itself) and
``nri-plrm.service`` (the ``CPUWeight=`` of ``systemd/nri-plrm.service``).

The benchmark creates two such siblings under its own cgroup (``nri-plrm-bench-<pid>-<name>``):
``system`` and ``pods`` (:data:`NODE`: the cpu load), or ``runtime`` and ``plugin``
(:func:`units`: the io load, whose writers stand for containerd's image pulls), moves the
processes in, and removes both afterwards, every process moved back to where it was.

cgroup v2 writes ``cpu.weight``; cgroup v1 (a ``cpu`` controller mount) writes ``cpu.shares``
with the same weights converted back (weight 100 is 1024 shares).
What cannot be done (no cpu controller, no permission, a read-only cgroupfs, the v2 rule that a
non-root cgroup holding processes cannot give its children controllers) raises
:class:`Unavailable` with the reason, and nothing is left behind.
"""

from __future__ import annotations

import contextlib
import errno
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

GROUP_PREFIX = "nri-plrm-bench-"
SYSTEM_SLICE_WEIGHT = 100
MIN_SHARES = 2
MAX_SHARES = 262144
SHARES_PER_CPU = 1024
V1_DEFAULT_SHARES = 1024
V2_DEFAULT_WEIGHT = 100
RMDIR_ATTEMPTS = 50
RMDIR_PAUSE_S = 0.02
PLUGIN_UNIT = Path(__file__).resolve().parent.parent / "systemd" / "nri-plrm.service"


class Unavailable(Exception):
    """The node placement cannot be made here; the message says why."""


def milli_cpu_to_shares(milli_cpu: int) -> int:
    """The kubelet's ``MilliCPUToShares``: cpu.shares for ``milli_cpu`` millicores."""
    shares = milli_cpu * SHARES_PER_CPU // 1000
    return max(MIN_SHARES, min(MAX_SHARES, shares))


def shares_to_weight(shares: int) -> int:
    """The kubelet's cgroup v2 conversion of cpu.shares (2..262144) to cpu.weight (1..10000)."""
    return 1 + (shares - MIN_SHARES) * 9999 // (MAX_SHARES - MIN_SHARES)


def kubepods_weight(cpus: int) -> int:
    """cpu.weight of ``kubepods.slice`` when the whole of ``cpus`` CPUs is allocatable."""
    return shares_to_weight(milli_cpu_to_shares(cpus * 1000))


def weight_to_v1_shares(weight: int) -> int:
    """A cgroup v2 weight expressed as cgroup v1 shares (default 100 <-> default 1024)."""
    return max(MIN_SHARES, round(V1_DEFAULT_SHARES * weight / V2_DEFAULT_WEIGHT))


def unit_cpu_weight(unit_text: str) -> int:
    """The ``CPUWeight=`` of a systemd unit's text; ValueError when it sets none."""
    for line in unit_text.splitlines():
        key, _, value = line.strip().partition("=")
        if key == "CPUWeight":
            return int(value)
    raise ValueError("the unit sets no CPUWeight=")


@dataclass(frozen=True)
class Layout:
    """Two sibling groups: their names, and their weights given the machine's CPU count."""

    names: tuple[str, str]
    weights: Callable[[int], tuple[int, int]]


NODE = Layout(("system", "pods"), lambda cpus: (SYSTEM_SLICE_WEIGHT, kubepods_weight(cpus)))
"""``system.slice`` (the runtime and the plugin) beside ``kubepods.slice`` (the pods)."""


def units(plugin_weight: int | None = None) -> Layout:
    """containerd's unit (the runtime, its image pulls) beside the plugin's unit, whose weight
    is ``plugin_weight`` or else the packaged unit's ``CPUWeight=``."""
    weight = plugin_weight
    if weight is None:
        weight = unit_cpu_weight(PLUGIN_UNIT.read_text())
    return Layout(("runtime", "plugin"), lambda cpus: (SYSTEM_SLICE_WEIGHT, weight))


@dataclass(frozen=True)
class CgroupMount:
    """A mounted cgroup hierarchy: ``version`` 1 (with the cpu controller) or 2."""

    version: int
    root: str
    mountpoint: str


def _unescape(text: str) -> str:
    """Undo mountinfo's octal escapes (``\\040`` for a space, ...)."""
    out, i = [], 0
    while i < len(text):
        if text[i] == "\\" and text[i + 1 : i + 4].isdigit() and len(text) >= i + 4:
            out.append(chr(int(text[i + 1 : i + 4], 8)))
            i += 4
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def parse_mountinfo(text: str) -> list[CgroupMount]:
    """The cgroup v1 mounts carrying the ``cpu`` controller and the cgroup2 mounts, in order."""
    mounts = []
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if not sep or len(fields) < 5 or len(tail) < 3:
            continue
        fstype, options = tail[0], tail[2].split(",")
        root, mountpoint = _unescape(fields[3]), _unescape(fields[4])
        if fstype == "cgroup2":
            mounts.append(CgroupMount(2, root, mountpoint))
        elif fstype == "cgroup" and "cpu" in options:
            mounts.append(CgroupMount(1, root, mountpoint))
    return mounts


@dataclass(frozen=True)
class ProcCgroup:
    """A process's cgroup paths from ``/proc/PID/cgroup``: v1 cpu hierarchy, unified."""

    v1_cpu: str | None
    unified: str | None


def parse_proc_cgroup(text: str) -> ProcCgroup:
    """Parse ``/proc/PID/cgroup`` (``id:controllers:path`` lines)."""
    v1_cpu = unified = None
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        hierarchy, controllers, path = parts
        if hierarchy == "0" and controllers == "":
            unified = path
        elif "cpu" in controllers.split(","):
            v1_cpu = path
    return ProcCgroup(v1_cpu, unified)


@dataclass(frozen=True)
class CpuHierarchy:
    """The hierarchy holding the cpu controller, and where it is mounted."""

    mount: CgroupMount

    @property
    def version(self) -> int:
        return self.mount.version

    def path_in(self, proc: ProcCgroup) -> str | None:
        """The cgroup path of this hierarchy in a parsed ``/proc/PID/cgroup``."""
        return proc.v1_cpu if self.version == 1 else proc.unified

    def directory(self, cgroup: str) -> str:
        """The directory of cgroup path ``cgroup``; Unavailable when outside the mount."""
        root = self.mount.root.rstrip("/")
        if cgroup != root and not cgroup.startswith(root + "/"):
            raise Unavailable(f"cgroup {cgroup} is outside the mount of {self.mount.root}")
        return os.path.join(self.mount.mountpoint, cgroup[len(root) :].lstrip("/")).rstrip("/")

    def directory_of(self, pid: int) -> str:
        """The directory of process ``pid``'s cgroup in this hierarchy."""
        text = Path(f"/proc/{pid}/cgroup").read_text()
        path = self.path_in(parse_proc_cgroup(text))
        if path is None:
            raise Unavailable(f"process {pid} has no cgroup in the cpu hierarchy")
        return self.directory(path)


def locate(mountinfo: str, proc_cgroup: str) -> tuple[CpuHierarchy, str]:
    """The cpu hierarchy (a v1 ``cpu`` mount first, else cgroup2) and the cgroup path of the
    process whose ``/proc/self/cgroup`` is ``proc_cgroup``; Unavailable when there is none."""
    mounts = parse_mountinfo(mountinfo)
    proc = parse_proc_cgroup(proc_cgroup)
    for version in (1, 2):
        for mount in (m for m in mounts if m.version == version):
            hierarchy = CpuHierarchy(mount)
            path = hierarchy.path_in(proc)
            if path is None:
                continue
            try:
                hierarchy.directory(path)
            except Unavailable:
                continue
            return hierarchy, path
    raise Unavailable("no cgroup v1 cpu mount and no cgroup2 mount holding this process")


def _write(path: str, text: str) -> None:
    """Write a cgroup file; an error names the file (the kernel answers at write time)."""
    try:
        with open(path, "w") as f:
            f.write(text)
    except OSError as err:
        raise type(err)(err.errno, err.strerror, path) from err


def _tokens(path: str) -> list[str]:
    return Path(path).read_text().split()


@dataclass
class NodeCgroups:
    """The two sibling groups of ``layout``, created by :meth:`enter` and removed by
    :meth:`leave`; ``dirs`` holds their directories while they exist."""

    hierarchy: CpuHierarchy
    base: str
    cpus: int
    layout: Layout = NODE
    dirs: tuple[str, str] = ("", "")
    weights: tuple[int, int] = (0, 0)
    origins: dict[int, str] = field(default_factory=dict)
    enabled_cpu: bool = False

    @classmethod
    def here(cls, cpus: int | None = None, layout: Layout = NODE) -> NodeCgroups:
        """For this process's cgroup; ``cpus`` allocatable (default: every online CPU)."""
        try:
            mountinfo = Path("/proc/self/mountinfo").read_text()
            proc_cgroup = Path("/proc/self/cgroup").read_text()
        except OSError as err:
            raise Unavailable(f"cannot read /proc/self: {err.strerror}") from err
        hierarchy, path = locate(mountinfo, proc_cgroup)
        online = cpus if cpus is not None else os.sysconf("SC_NPROCESSORS_ONLN")
        return cls(hierarchy, hierarchy.directory(path), online, layout)

    def describe(self) -> str:
        """One line: version, weights, where."""
        pairs = list(zip(self.layout.names, self.layout.weights(self.cpus), strict=True))
        if self.hierarchy.version == 2:
            values = "cpu.weight " + ", ".join(f"{name} {w}" for name, w in pairs)
        else:
            shares = ", ".join(f"{name} {weight_to_v1_shares(w)}" for name, w in pairs)
            values = f"cpu.shares {shares} (v2 weights {'/'.join(str(w) for _, w in pairs)})"
        return f"cgroup v{self.hierarchy.version} under {self.base}: {values}, {self.cpus} CPUs"

    def enter(self, first_pids: Sequence[int], second_pids: Sequence[int]) -> None:
        """Create the groups, set their weights and move the processes in (``first_pids`` to
        the first group of the layout); on failure undo everything and raise Unavailable
        naming what failed."""
        try:
            self._create()
            for pids, group in zip((first_pids, second_pids), self.dirs, strict=True):
                for pid in pids:
                    self._move_in(pid, group)
        except (OSError, Unavailable) as err:
            self.leave()
            raise Unavailable(_reason(err)) from err

    def _create(self) -> None:
        prefix = os.path.join(self.base, f"{GROUP_PREFIX}{os.getpid()}-")
        if self.hierarchy.version == 2:
            self._enable_cpu_v2()
        self.weights = self.layout.weights(self.cpus)
        made: list[str] = []
        try:
            for name, weight in zip(self.layout.names, self.weights, strict=True):
                directory = prefix + name
                os.mkdir(directory)
                made.append(directory)
                if self.hierarchy.version == 2:
                    _write(os.path.join(directory, "cpu.weight"), f"{weight}\n")
                else:
                    shares = weight_to_v1_shares(weight)
                    _write(os.path.join(directory, "cpu.shares"), f"{shares}\n")
        finally:
            padded = [*made, "", ""]
            self.dirs = (padded[0], padded[1])

    def _enable_cpu_v2(self) -> None:
        if "cpu" not in _tokens(os.path.join(self.base, "cgroup.controllers")):
            raise Unavailable(f"cgroup v2: no cpu controller in {self.base}/cgroup.controllers")
        if "cpu" in _tokens(os.path.join(self.base, "cgroup.subtree_control")):
            return
        if self.base.rstrip("/") != self.hierarchy.mount.mountpoint.rstrip("/"):
            raise Unavailable(
                f"cgroup v2: {self.base} holds this process and is not the root, so it cannot "
                "give children the cpu controller (no-internal-processes rule)"
            )
        _write(os.path.join(self.base, "cgroup.subtree_control"), "+cpu\n")
        self.enabled_cpu = True

    def _move_in(self, pid: int, group: str) -> None:
        self.origins.setdefault(pid, self.hierarchy.directory_of(pid))
        _write(os.path.join(group, "cgroup.procs"), f"{pid}\n")

    def leave(self) -> list[str]:
        """Move every process back (to where it was, else the base cgroup), remove the groups;
        returns the problems met (empty when all went well)."""
        problems = []
        for group in (g for g in self.dirs if g and os.path.isdir(g)):
            problems.extend(self._remove(group))
        self.dirs = ("", "")
        if self.enabled_cpu:
            try:
                _write(os.path.join(self.base, "cgroup.subtree_control"), "-cpu\n")
            except OSError as err:
                problems.append(f"disabling cpu in {self.base}: {err.strerror}")
            self.enabled_cpu = False
        return problems

    def _remove(self, group: str) -> list[str]:
        """Empty ``group`` (processes back where they came from) and remove it, retrying
        while exiting tasks are released or a process forked meanwhile is moved out."""
        for _ in range(RMDIR_ATTEMPTS):
            try:
                for token in _tokens(os.path.join(group, "cgroup.procs")):
                    origin = self.origins.get(int(token), self.base)
                    with contextlib.suppress(ProcessLookupError):
                        _write(os.path.join(origin, "cgroup.procs"), token)
                os.rmdir(group)
                return []
            except OSError as err:
                if err.errno != errno.EBUSY:
                    return [f"removing {group}: {_reason(err)}"]
            time.sleep(RMDIR_PAUSE_S)
        return [f"removing {group}: still busy after {RMDIR_ATTEMPTS} attempts"]


def _reason(err: BaseException) -> str:
    if isinstance(err, OSError):
        return f"{err.filename or 'cgroupfs'}: {err.strerror}"
    return str(err)
