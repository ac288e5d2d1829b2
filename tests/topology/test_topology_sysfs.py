"""Discovery from sysfs: fake-tree round trips, degraded trees and garbage files."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
from fakesysfs import write_sysfs
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nri_plrm.base.cpuset import CPUSet
from nri_plrm.topology.machines import MACHINES
from nri_plrm.topology.model import Topology, TopologyError
from nri_plrm.topology.synthetic import cpu_table, load_cpu_table, synthetic_topology
from nri_plrm.topology.sysfs import (
    default_proc_root,
    discover,
    hugepage_resource,
    online_cpus,
    parse_count,
    parse_cpulist,
    parse_distances,
    parse_id,
    parse_memtotal,
)

GI = 1 << 30
FAST_TMP = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
CPU = "devices/system/cpu"
NODE = "devices/system/node"


def put(root: Path, relative: str, text: str) -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


def same(a: Topology, b: Topology) -> bool:
    return cpu_table(a) == cpu_table(b)


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    sockets=st.integers(1, 3),
    numa=st.integers(1, 3),
    cores=st.integers(1, 4),
    threads=st.integers(1, 4),
    memory_mi=st.integers(64, 4096),
    pages_2mi=st.none() | st.integers(0, 16),
    pages_1gi=st.none() | st.integers(0, 0),
)
def test_fake_sysfs_round_trips_synthetic_machines(
    sockets: int,
    numa: int,
    cores: int,
    threads: int,
    memory_mi: int,
    pages_2mi: int | None,
    pages_1gi: int | None,
) -> None:
    spec = (
        f"sockets={sockets},numa_per_socket={numa},cores_per_numa={cores},"
        f"threads_per_core={threads},memory_per_numa={memory_mi}Mi"
    )
    if pages_2mi is not None:
        spec += f",hugepages_2Mi_per_numa={pages_2mi}"
    if pages_1gi is not None:
        spec += f",hugepages_1Gi_per_numa={pages_1gi}"
    topology = synthetic_topology(spec)
    with tempfile.TemporaryDirectory(dir=FAST_TMP) as root:
        write_sysfs(topology, root)
        assert same(discover(root), topology)


@pytest.mark.parametrize("name", ["default", "synthetic1024"])
def test_round_trip_named_machines(sysfs_root: Path, name: str) -> None:
    write_sysfs(MACHINES[name], str(sysfs_root))
    found = discover(str(sysfs_root))
    assert same(found, MACHINES[name])
    assert found.num_cpus == MACHINES[name].num_cpus


def test_round_trip_table_with_uncore_caches_memory_only_node_and_dies(sysfs_root: Path) -> None:
    rows = [
        {"cpu": c, "core": c % 8, "socket": 0, "numa": 0, "l3": 10 + (c % 8) // 4, "die": 0}
        for c in range(16)
    ]
    rows += [{"cpu": c, "core": c, "socket": 1, "numa": 1, "l3": 1, "die": 1} for c in (16, 17)]
    topology = load_cpu_table(
        {
            "cpus": rows,
            "memory": {"0": {"memory": "4Gi", "hugepages-1Gi": "1Gi"}, "1": "2Gi", "2": "8Gi"},
            "distances": {"0": [10, 12, 32], "1": [12, 10, 32], "2": [32, 32, 10]},
        }
    )
    write_sysfs(topology, str(sysfs_root))
    found = discover(str(sysfs_root))
    assert same(found, topology)
    assert found.cpu_info[5].l3 == 11 and found.cpu_info[17].l3 == 1
    assert found.numa_nodes[2].cpus == CPUSet() and found.memory_of(2, "memory") == 8 * GI


def test_machine_without_numa_information(sysfs_root: Path) -> None:
    topology = synthetic_topology("hugepages_2Mi_per_numa=4")
    write_sysfs(topology, str(sysfs_root), numa=False)
    found = discover(str(sysfs_root))
    assert found.numa_ids == (0,)
    assert found.numa_nodes[0].cpus == CPUSet.parse("0-63")
    assert found.memory_of(0, "memory") == 64 * GI
    assert found.memory_of(0, "hugepages-2Mi") == 4 * 4 * 2 * 1024 * 1024
    assert found.num_cores == 32 and found.num_sockets == 2


def test_proc_root_is_configurable(sysfs_root: Path) -> None:
    write_sysfs(MACHINES["default"], str(sysfs_root / "sys"), numa=False)
    assert (sysfs_root / "proc" / "meminfo").exists()
    shutil.move(str(sysfs_root / "proc"), str(sysfs_root / "elsewhere"))
    assert discover(str(sysfs_root / "sys")).memory_of(0, "memory") == 0
    found = discover(str(sysfs_root / "sys"), proc_root=str(sysfs_root / "elsewhere"))
    assert found.memory_of(0, "memory") == 64 * GI


@pytest.mark.parametrize(
    ("root", "proc"),
    [("/sys", "/proc"), ("/sys/", "/proc"), ("/host/sys", "/host/proc"), ("/tmp/x", "/tmp/x/proc")],
)
def test_default_proc_root(root: str, proc: str) -> None:
    assert default_proc_root(root) == proc


def test_bare_vm_tree_degrades_to_one_core_per_cpu(sysfs_root: Path) -> None:
    put(sysfs_root, f"{CPU}/online", "0-3")
    found = discover(str(sysfs_root))
    assert found.num_cpus == 4 and found.num_cores == 4 and found.num_sockets == 1
    assert found.numa_ids == (0,) and found.numa_nodes[0].memory == {}
    assert all(i.l3 == 0 and i.core == i.cpu for i in found.cpu_info.values())


def test_online_from_cpu_directories_when_the_online_file_is_missing(sysfs_root: Path) -> None:
    for cpu in range(4):
        (sysfs_root / CPU / f"cpu{cpu}").mkdir(parents=True)
    put(sysfs_root, f"{CPU}/cpu2/online", "0")
    put(sysfs_root, f"{CPU}/cpu3/online", "1")
    (sysfs_root / CPU / "cpufreq").mkdir()
    assert discover(str(sysfs_root)).all_cpus == CPUSet([0, 1, 3])
    assert online_cpus(str(sysfs_root)) == CPUSet([0, 1, 3])


def test_absurd_cpu_directory_ids_are_topology_errors(sysfs_root: Path) -> None:
    (sysfs_root / CPU / "cpu0").mkdir(parents=True)
    (sysfs_root / CPU / "cpu70000").mkdir()
    with pytest.raises(TopologyError, match=r"cpu70000: id 70000 exceeds the maximum 65535"):
        discover(str(sysfs_root))


def test_absurd_numa_node_directory_ids_are_topology_errors(sysfs_root: Path) -> None:
    write_sysfs(MACHINES["default"], str(sysfs_root))
    os.remove(sysfs_root / NODE / "online")
    (sysfs_root / NODE / "node5000").mkdir()
    with pytest.raises(TopologyError, match=r"node5000: id 5000 exceeds the maximum 1023"):
        discover(str(sysfs_root))


def test_no_online_cpu_is_an_error(sysfs_root: Path) -> None:
    with pytest.raises(TopologyError, match="no online cpus found"):
        discover(str(sysfs_root))


def test_offline_cpus_are_excluded_and_core_ids_follow_the_online_threads(sysfs_root: Path) -> None:
    write_sysfs(MACHINES["default"], str(sysfs_root))
    put(sysfs_root, f"{CPU}/online", "0,2-32,34-63")
    found = discover(str(sysfs_root))
    assert 1 not in found.cpu_info and 33 not in found.cpu_info
    assert found.cpu_info[32].core == 0
    assert found.numa_nodes[0].cpus == CPUSet.parse("0,2-7,32,34-39")
    put(sysfs_root, f"{CPU}/online", "0-32,34-63")
    put(sysfs_root, f"{CPU}/online", "0,2-63")
    assert discover(str(sysfs_root)).cpu_info[33].core == 33


def test_unknown_package_and_siblings_fallback(sysfs_root: Path) -> None:
    put(sysfs_root, f"{CPU}/online", "0-3")
    for cpu in range(4):
        put(sysfs_root, f"{CPU}/cpu{cpu}/topology/physical_package_id", "-1")
        put(sysfs_root, f"{CPU}/cpu{cpu}/topology/core_id", "-1")
        put(
            sysfs_root,
            f"{CPU}/cpu{cpu}/topology/thread_siblings_list",
            "0,2" if cpu % 2 == 0 else "1,3",
        )
    found = discover(str(sysfs_root))
    assert found.num_sockets == 1 and found.num_cores == 2
    assert [found.cpu_info[c].core for c in range(4)] == [0, 1, 0, 1]


def test_cores_group_by_package_and_core_id_within_a_node(sysfs_root: Path) -> None:
    put(sysfs_root, f"{CPU}/online", "0-3")
    for cpu, (package, core) in enumerate([(0, 0), (1, 0), (0, 0), (1, 0)]):
        put(sysfs_root, f"{CPU}/cpu{cpu}/topology/physical_package_id", str(package))
        put(sysfs_root, f"{CPU}/cpu{cpu}/topology/core_id", str(core))
    found = discover(str(sysfs_root))
    assert [found.cpu_info[c].core for c in range(4)] == [0, 1, 0, 1]
    assert [found.cpu_info[c].l3 for c in range(4)] == [0, 1, 0, 1]


def write_l3(root: Path, cpu: int, index: int, shared: str, cache_id: str | None) -> None:
    base = f"{CPU}/cpu{cpu}/cache/index{index}"
    put(root, f"{base}/level", "3")
    put(root, f"{base}/shared_cpu_list", shared)
    if cache_id is not None:
        put(root, f"{base}/id", cache_id)


def test_uncore_cache_ids(sysfs_root: Path) -> None:
    put(sysfs_root, f"{CPU}/online", "0-5")
    for cpu in range(6):
        put(sysfs_root, f"{CPU}/cpu{cpu}/topology/core_id", str(cpu))
        put(sysfs_root, f"{CPU}/cpu{cpu}/topology/physical_package_id", str(int(cpu in (2, 3))))
        put(sysfs_root, f"{CPU}/cpu{cpu}/cache/index0/level", "2")
        put(sysfs_root, f"{CPU}/cpu{cpu}/cache/index0/shared_cpu_list", str(cpu))
    for cpu in (0, 1):
        write_l3(sysfs_root, cpu, 3, "0-1", "7")
    for cpu in (2, 3):
        write_l3(sysfs_root, cpu, 3, "2-3", None)
    write_l3(sysfs_root, 4, 3, "0-5", "9")
    found = discover(str(sysfs_root))
    assert [found.cpu_info[c].l3 for c in range(6)] == [7, 7, 1, 1, 0, 0]


def test_garbage_uncore_cache_id(sysfs_root: Path) -> None:
    put(sysfs_root, f"{CPU}/online", "0-1")
    write_l3(sysfs_root, 0, 3, "0", "")
    with pytest.raises(TopologyError, match=r"index3/id: '' is not an id"):
        discover(str(sysfs_root))


def test_orphan_online_cpu_lands_on_the_first_node(
    sysfs_root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    write_sysfs(MACHINES["topoDualSocketNoHT"], str(sysfs_root))
    put(sysfs_root, f"{NODE}/node1/cpulist", "4-6")
    found = discover(str(sysfs_root))
    assert found.numa_nodes[0].cpus == CPUSet.parse("0-3,7")
    assert "in no node*/cpulist" in caplog.text


def test_node_dirs_without_online_file(sysfs_root: Path) -> None:
    write_sysfs(MACHINES["default"], str(sysfs_root))
    os.remove(sysfs_root / NODE / "online")
    os.remove(sysfs_root / NODE / "node1" / "distance")
    found = discover(str(sysfs_root))
    assert found.numa_ids == (0, 1, 2, 3)
    assert found.distance(1, 0) == 20 and found.distance(0, 1) == 11


@pytest.mark.parametrize(
    ("relative", "content", "message"),
    [
        (f"{CPU}/online", "0-", "online: cpuset '0-'"),
        (f"{CPU}/cpu3/topology/core_id", "three", r"core_id: 'three' is not an id"),
        (f"{CPU}/cpu3/topology/physical_package_id", "-2", r"physical_package_id: '-2' is not"),
        (f"{CPU}/cpu3/topology/die_id", "1.5", r"die_id: '1.5' is not an id"),
        (f"{CPU}/cpu0/cache/index3/level", "L3", r"index3/level: 'L3' is not an id"),
        (f"{CPU}/cpu0/cache/index3/shared_cpu_list", "x", r"shared_cpu_list: cpuset 'x'"),
        (f"{NODE}/online", "zero", r"node/online: cpuset 'zero'"),
        (f"{NODE}/node1/cpulist", "0-9", "are listed by another node too"),
        (f"{NODE}/node1/meminfo", "Node 1 MemFree: 3 kB", "no 'MemTotal: <n> kB' line"),
        (f"{NODE}/node1/distance", "11 10 x 21", r"distance 'x' is not a number 1..255"),
        (f"{NODE}/node1/distance", "11 10 21", "3 distances for 4 NUMA nodes"),
        (f"{NODE}/node1/distance", "", "distance: empty"),
        (f"{NODE}/node1/hugepages/hugepages-2048kB/nr_hugepages", "many", "'many' is not a count"),
        (f"{NODE}/node1/hugepages/hugepages-2MB/nr_hugepages", "1", "'hugepages-2MB' is not a"),
    ],
)
def test_garbage_files_raise_errors_naming_the_file(
    sysfs_root: Path, relative: str, content: str, message: str
) -> None:
    small = "cores_per_numa=1,hugepages_2Mi_per_numa=2"
    write_sysfs(synthetic_topology(small), str(sysfs_root))
    put(sysfs_root, relative, content)
    with pytest.raises(TopologyError, match=message) as info:
        discover(str(sysfs_root))
    assert str(sysfs_root / relative).rsplit("/", 2)[0] in str(info.value)


def test_non_ascii_file(sysfs_root: Path) -> None:
    put(sysfs_root, f"{CPU}/online", "0-1")
    (sysfs_root / CPU / "cpu0" / "topology").mkdir(parents=True)
    (sysfs_root / CPU / "cpu0" / "topology" / "core_id").write_bytes(b"\xff\n")
    with pytest.raises(TopologyError, match="core_id: not ASCII text"):
        discover(str(sysfs_root))


def test_unreadable_file_is_an_error(sysfs_root: Path) -> None:
    put(sysfs_root, f"{CPU}/online", "0")
    (sysfs_root / CPU / "cpu0" / "topology" / "core_id").mkdir(parents=True)
    with pytest.raises(TopologyError, match="core_id: cannot read"):
        discover(str(sysfs_root))


def test_missing_nr_hugepages_leaves_the_pool_out(sysfs_root: Path) -> None:
    write_sysfs(synthetic_topology("hugepages_2Mi_per_numa=2"), str(sysfs_root))
    os.remove(sysfs_root / NODE / "node0" / "hugepages" / "hugepages-2048kB" / "nr_hugepages")
    found = discover(str(sysfs_root))
    assert "hugepages-2Mi" not in found.numa_nodes[0].memory
    assert found.memory_of(1, "hugepages-2Mi") == 4 << 20


def test_hugepage_resource_names() -> None:
    assert hugepage_resource("p", "hugepages-2048kB") == ("hugepages-2Mi", 2 << 20)
    assert hugepage_resource("p", "hugepages-1048576kB") == ("hugepages-1Gi", 1 << 30)
    assert hugepage_resource("p", "hugepages-64kB") == ("hugepages-64Ki", 64 << 10)
    with pytest.raises(TopologyError, match="'hugepages-0kB' is not"):
        hugepage_resource("p", "hugepages-0kB")


def test_parsers() -> None:
    assert parse_memtotal("m", "Node 3 MemTotal:       16318792 kB\n") == 16318792 * 1024
    assert parse_memtotal("m", "MemFree: 1 kB\nMemTotal:  2 kB\n") == 2048
    assert parse_distances("d", "10 21\n") == [10, 21]
    assert parse_id("i", "-1", allow_unknown=True) == 0
    assert parse_count("c", " 7 ") == 7
    assert parse_cpulist("l", "0-2,7") == CPUSet([0, 1, 2, 7])


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=40))
def test_file_parsers_fuzz_only_raise_topology_error(text: str) -> None:
    for parse in (
        parse_cpulist,
        parse_id,
        parse_count,
        parse_memtotal,
        parse_distances,
        hugepage_resource,
    ):
        try:
            parse("f", text)
        except TopologyError as exc:
            assert str(exc).startswith("f: ")


def test_real_sysfs_if_present() -> None:
    online_path = "/sys/devices/system/cpu/online"
    if not os.path.exists(online_path):
        pytest.skip("no sysfs on this machine")
    with open(online_path) as handle:
        online = CPUSet.parse(handle.read())
    found = discover()
    assert found.all_cpus == online
    assert sum(len(node.cpus) for node in found.numa_nodes.values()) == len(online)
