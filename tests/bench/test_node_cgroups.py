"""The benchmarks' cpu and io loads placed as on a Kubernetes node (bench.node_cgroups,
bench.load)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.load import cpu_load, io_load
from bench.node_cgroups import (
    GROUP_PREFIX,
    NODE,
    CgroupMount,
    CpuHierarchy,
    NodeCgroups,
    ProcCgroup,
    Unavailable,
    kubepods_weight,
    locate,
    milli_cpu_to_shares,
    parse_mountinfo,
    parse_proc_cgroup,
    shares_to_weight,
    unit_cpu_weight,
    units,
    weight_to_v1_shares,
)

# A hybrid node (systemd's "hybrid" layout: v1 controllers, a v2 mount without controllers).
MOUNTINFO_HYBRID = """\
24 31 0:22 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw
31 23 0:28 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:9 - tmpfs tmpfs ro,mode=755
32 31 0:29 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:10 - cgroup2 cgroup2 rw
33 31 0:30 / /sys/fs/cgroup/systemd rw,nosuid shared:11 - cgroup cgroup rw,xattr,name=systemd
35 31 0:32 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid shared:15 - cgroup cgroup rw,cpu,cpuacct
36 31 0:33 / /sys/fs/cgroup/cpuset rw,nosuid shared:16 - cgroup cgroup rw,cpuset
"""
CGROUP_HYBRID = """\
12:cpuset:/
4:cpu,cpuacct:/system.slice/containerd.service
1:name=systemd:/system.slice/containerd.service
0::/system.slice/containerd.service
"""
# A cgroup v2 node (the default of current distributions and of Kubernetes).
MOUNTINFO_V2 = """\
22 1 259:1 / / rw,relatime shared:1 - ext4 /dev/root rw
35 24 0:30 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 \
rw,nsdelegate,memory_recursiveprot
"""
CGROUP_V2 = "0::/system.slice/nri-plrm.service\n"


@pytest.mark.parametrize(
    ("cpus", "shares", "weight"),
    [(1, 1024, 39), (2, 2048, 79), (4, 4096, 157), (64, 65536, 2500), (256, 262144, 10000)],
)
def test_kubepods_weight_is_the_kubelets(cpus: int, shares: int, weight: int) -> None:
    assert milli_cpu_to_shares(cpus * 1000) == shares
    assert shares_to_weight(shares) == weight
    assert kubepods_weight(cpus) == weight


def test_shares_are_clamped_as_the_kubelet_does() -> None:
    assert milli_cpu_to_shares(0) == 2
    assert milli_cpu_to_shares(1) == 2
    assert milli_cpu_to_shares(1_000_000) == 262144
    assert shares_to_weight(2) == 1


def test_v2_weights_back_to_v1_shares() -> None:
    assert weight_to_v1_shares(100) == 1024
    assert weight_to_v1_shares(79) == 809
    assert weight_to_v1_shares(39) == 399
    assert weight_to_v1_shares(157) == 1608
    assert weight_to_v1_shares(1) == 10


def test_mountinfo_hybrid_lists_the_cpu_mount_and_the_unified_one() -> None:
    assert parse_mountinfo(MOUNTINFO_HYBRID) == [
        CgroupMount(2, "/", "/sys/fs/cgroup/unified"),
        CgroupMount(1, "/", "/sys/fs/cgroup/cpu,cpuacct"),
    ]


def test_mountinfo_unescapes_paths_and_skips_other_filesystems() -> None:
    line = r"40 31 0:40 /a\040b /mnt/my\040cgroups rw shared:1 - cgroup cgroup rw,cpu" + "\n"
    assert parse_mountinfo(MOUNTINFO_V2 + line) == [
        CgroupMount(2, "/", "/sys/fs/cgroup"),
        CgroupMount(1, "/a b", "/mnt/my cgroups"),
    ]


def test_proc_cgroup_v1_and_v2() -> None:
    assert parse_proc_cgroup(CGROUP_HYBRID) == ProcCgroup(
        "/system.slice/containerd.service", "/system.slice/containerd.service"
    )
    assert parse_proc_cgroup(CGROUP_V2) == ProcCgroup(None, "/system.slice/nri-plrm.service")


def test_locate_prefers_the_v1_cpu_controller_on_a_hybrid_node() -> None:
    hierarchy, path = locate(MOUNTINFO_HYBRID, CGROUP_HYBRID)
    assert hierarchy.version == 1
    assert path == "/system.slice/containerd.service"
    assert hierarchy.directory(path) == "/sys/fs/cgroup/cpu,cpuacct/system.slice/containerd.service"


def test_locate_on_cgroup_v2() -> None:
    hierarchy, path = locate(MOUNTINFO_V2, CGROUP_V2)
    assert hierarchy.version == 2
    assert hierarchy.directory(path) == "/sys/fs/cgroup/system.slice/nri-plrm.service"
    assert hierarchy.directory("/") == "/sys/fs/cgroup"


def test_locate_without_a_cpu_hierarchy() -> None:
    only_cpuset = "36 31 0:33 / /sys/fs/cgroup/cpuset rw - cgroup cgroup rw,cpuset\n"
    with pytest.raises(Unavailable, match="no cgroup v1 cpu mount"):
        locate(only_cpuset, "3:cpuset:/\n")


def test_a_container_mount_maps_its_own_root() -> None:
    mount = CgroupMount(2, "/kubepods.slice/pod1", "/sys/fs/cgroup")
    hierarchy = CpuHierarchy(mount)
    assert hierarchy.directory("/kubepods.slice/pod1") == "/sys/fs/cgroup"
    assert hierarchy.directory("/kubepods.slice/pod1/ctr") == "/sys/fs/cgroup/ctr"
    with pytest.raises(Unavailable, match="outside the mount"):
        hierarchy.directory("/kubepods.slice/pod10")


def _v2_tree(tmp_path: Path, controllers: str) -> Path:
    base = tmp_path / "system.slice" / "bench.scope"
    base.mkdir(parents=True)
    (base / "cgroup.controllers").write_text(controllers)
    (base / "cgroup.subtree_control").write_text("\n")
    return base


def test_v2_refuses_under_a_non_root_cgroup_holding_processes(tmp_path: Path) -> None:
    base = _v2_tree(tmp_path, "cpuset cpu io memory pids\n")
    groups = NodeCgroups(CpuHierarchy(CgroupMount(2, "/", str(tmp_path))), str(base), 2)
    with pytest.raises(Unavailable, match="no-internal-processes"):
        groups.enter([os.getpid()], [])
    created = sorted(p.name for p in base.iterdir())
    assert created == ["cgroup.controllers", "cgroup.subtree_control"]
    assert (base / "cgroup.subtree_control").read_text() == "\n"


def test_v2_refuses_without_the_cpu_controller(tmp_path: Path) -> None:
    base = _v2_tree(tmp_path, "memory pids\n")
    groups = NodeCgroups(CpuHierarchy(CgroupMount(2, "/", str(tmp_path))), str(base), 2)
    with pytest.raises(Unavailable, match="no cpu controller"):
        groups.enter([os.getpid()], [])


def _node_placement_unavailable() -> str | None:
    """Why the node placement cannot be made here, or None when it can."""
    if os.geteuid() != 0:
        return "needs root to create cgroups"
    try:
        groups = NodeCgroups.here()
    except Unavailable as err:
        return str(err)
    if not os.access(groups.base, os.W_OK) or os.statvfs(groups.base).f_flag & os.ST_RDONLY:
        return f"{groups.base} is not writable"
    if groups.hierarchy.version == 2 and groups.base != groups.hierarchy.mount.mountpoint:
        return f"cgroup v2 and {groups.base} is not the root (no-internal-processes rule)"
    return None


@pytest.fixture
def base() -> str:
    """The cgroup the node placements are made under; the test skips where they cannot be."""
    reason = _node_placement_unavailable()
    if reason is not None:
        pytest.skip(f"node cgroup placement unavailable: {reason}")
    return NodeCgroups.here().base


def _directory_of(pid: int) -> str:
    return NodeCgroups.here().hierarchy.directory_of(pid)


def _procs(directory: str) -> set[int]:
    return {int(p) for p in Path(directory, "cgroup.procs").read_text().split()}


def _leftovers(base: str) -> list[str]:
    return [n for n in os.listdir(base) if n.startswith(f"{GROUP_PREFIX}{os.getpid()}-")]


def _assert_weights(groups: tuple[str, str], weights: tuple[int, int]) -> None:
    """The two groups carry these cgroup v2 weights (as cpu.shares on cgroup v1)."""
    v1 = NodeCgroups.here().hierarchy.version == 1
    for group, weight in zip(groups, weights, strict=True):
        if v1:
            assert Path(group, "cpu.shares").read_text().strip() == str(weight_to_v1_shares(weight))
        else:
            assert Path(group, "cpu.weight").read_text().strip() == str(weight)


def _sleeper() -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])


def test_cpu_load_with_the_node_placement_then_cleaned_up(base: str) -> None:
    me_before = _directory_of(os.getpid())
    plugin = _sleeper()
    forked_inside = None
    try:
        plugin_before = _directory_of(plugin.pid)
        with cpu_load(measured=[plugin.pid]) as placement:
            assert placement.node_cgroups, placement.detail
            system, pods = placement.cgroups
            assert os.path.dirname(system) == os.path.dirname(pods) == base
            assert _procs(system) == {os.getpid(), plugin.pid}
            assert _directory_of(os.getpid()) == system
            spinners = _procs(pods)
            assert len(spinners) == 2
            for pid in spinners:
                assert b"while True" in Path(f"/proc/{pid}/cmdline").read_bytes()
                assert _directory_of(pid) == pods
            _assert_weights((system, pods), NODE.weights(os.sysconf("SC_NPROCESSORS_ONLN")))
            forked_inside = _sleeper()
            assert _directory_of(forked_inside.pid) == system
        assert _leftovers(base) == []
        assert _directory_of(os.getpid()) == me_before
        assert _directory_of(plugin.pid) == plugin_before
        assert _directory_of(forked_inside.pid) == base
        for pid in spinners:
            assert not Path(f"/proc/{pid}").exists()
    finally:
        for proc in (plugin, forked_inside):
            if proc is not None:
                proc.kill()
                proc.wait()


def test_an_exception_inside_the_block_still_cleans_up(base: str) -> None:
    me_before = _directory_of(os.getpid())
    with pytest.raises(KeyboardInterrupt), cpu_load() as placement:
        assert placement.node_cgroups, placement.detail
        assert _leftovers(base) != []
        raise KeyboardInterrupt
    assert _leftovers(base) == []
    assert _directory_of(os.getpid()) == me_before


def test_one_cgroup_placement_creates_nothing() -> None:
    me_before = Path("/proc/self/cgroup").read_text()
    with cpu_load(node_cgroups=False) as placement:
        assert not placement.node_cgroups
        assert placement.cgroups == ("", "")
        assert Path("/proc/self/cgroup").read_text() == me_before


def test_the_units_layout_weighs_the_plugin_as_its_unit_says() -> None:
    assert unit_cpu_weight("[Service]\nNice=0\nCPUWeight=700\n") == 700
    with pytest.raises(ValueError, match="no CPUWeight"):
        unit_cpu_weight("[Service]\nNice=0\n")
    layout = units(700)
    assert layout.names == ("runtime", "plugin")
    assert layout.weights(2) == layout.weights(64) == (100, 700)
    groups = NodeCgroups(CpuHierarchy(CgroupMount(1, "/", "/sys/fs/cgroup/cpu")), "/x", 2, layout)
    assert groups.describe() == (
        "cgroup v1 under /x: cpu.shares runtime 1024, plugin 7168 (v2 weights 100/700), 2 CPUs"
    )


def test_io_load_with_the_units_placement_then_cleaned_up(base: str, tmp_path: Path) -> None:
    me_before = _directory_of(os.getpid())
    plugin = _sleeper()
    try:
        plugin_before = _directory_of(plugin.pid)
        with io_load(str(tmp_path / "state"), processes=2, measured=[plugin.pid]) as placement:
            assert placement.node_cgroups, placement.detail
            runtime, plugin_group = placement.cgroups
            assert os.path.dirname(runtime) == os.path.dirname(plugin_group) == base
            assert _procs(plugin_group) == {plugin.pid}
            writers = _procs(runtime) - {os.getpid()}
            assert os.getpid() in _procs(runtime) and len(writers) == 2
            for pid in writers:
                assert b"write_files" in Path(f"/proc/{pid}/cmdline").read_bytes()
            _assert_weights((runtime, plugin_group), units().weights(2))
        assert _leftovers(base) == []
        assert _directory_of(os.getpid()) == me_before
        assert _directory_of(plugin.pid) == plugin_before
        for pid in writers:
            assert not Path(f"/proc/{pid}").exists()
    finally:
        plugin.kill()
        plugin.wait()
