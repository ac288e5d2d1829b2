"""Rediscover-and-diff after hotplug."""

from __future__ import annotations

from pathlib import Path

from nri_plrm.cpuset import CPUSet
from nri_plrm.topology.diff import TopologyDiff, diff, rediscover
from nri_plrm.topology.fakesysfs import write_sysfs
from nri_plrm.topology.machines import MACHINES
from nri_plrm.topology.synthetic import load_cpu_table, synthetic_topology

GI = 1 << 30


def test_identical_topologies_have_no_diff() -> None:
    result = diff(MACHINES["default"], synthetic_topology("sockets=2"))
    assert not result.changed and result == TopologyDiff()
    assert result.summary() == "no change"


def test_cpus_nodes_and_memory() -> None:
    old = synthetic_topology("sockets=1,numa_per_socket=2,cores_per_numa=2,threads_per_core=2")
    new = load_cpu_table(
        {
            "cpus": [
                {"cpu": 0, "core": 0, "socket": 0, "numa": 0},
                {"cpu": 4, "core": 0, "socket": 0, "numa": 0},
                {"cpu": 1, "core": 1, "socket": 0, "numa": 1},
                {"cpu": 9, "core": 9, "socket": 0, "numa": 2},
            ],
            "memory": {"0": "16Gi", "1": "8Gi", "2": "1Gi"},
        }
    )
    result = diff(old, new)
    assert result.cpus_online == CPUSet([9])
    assert result.cpus_offline == CPUSet([2, 3, 5, 6, 7])
    assert result.cpus_moved == CPUSet([1])
    assert result.numa_added == (2,) and result.numa_removed == ()
    assert result.memory_changed == {1: {"memory": (16 * GI, 8 * GI)}}
    assert result.changed
    assert result.summary() == (
        "cpus online 9; cpus offline 2-3,5-7; cpus moved 1; numa nodes added [2]; "
        f"node 1 memory {16 * GI} -> {8 * GI} bytes"
    )
    assert diff(new, old).numa_removed == (2,)


def test_rediscover_after_cpus_went_offline(sysfs_root: Path) -> None:
    current = MACHINES["default"]
    write_sysfs(current, str(sysfs_root))
    (sysfs_root / "devices/system/cpu/online").write_text("0-3,8-63\n")
    fresh, result = rediscover(current, str(sysfs_root))
    assert result.cpus_offline == CPUSet.parse("4-7")
    assert not result.cpus_online
    # The siblings keep running but their core id is now their own (lowest online thread).
    assert result.cpus_moved == CPUSet.parse("36-39")
    assert [fresh.cpu_info[c].core for c in (35, 36, 39)] == [3, 36, 39]
    assert fresh.numa_nodes[0].cpus == CPUSet.parse("0-3,32-39")
