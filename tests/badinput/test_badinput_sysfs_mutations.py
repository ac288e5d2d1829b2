"""Malformed sysfs trees of a 1,152-CPU machine (issue 7, bad input): any file replaced with
garbage, emptied, deleted or turned into a directory, one to three at a time. Discovery either
raises ``TopologyError`` naming a path under the tree, or returns a self-consistent topology
(every CPU on exactly one NUMA node and core); never another exception.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakesysfs import write_sysfs
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nri_plrm.topology.model import Topology, TopologyError
from nri_plrm.topology.synthetic import synthetic_topology
from nri_plrm.topology.sysfs import discover

SPEC = "sockets=2,numa_per_socket=6,cores_per_numa=48,threads_per_core=2,memory_per_numa=16Gi"
GARBAGE = [
    b"",
    b"\n",
    b"-1\n",
    b"0-\n",
    b"4294967296\n",
    b"99999999999999999999999\n",
    b"0-1151,\n",
    b"1152-0\n",
    b"0-4000000\n",
    b"\xff\xfe\x00garbage",
    b"a,b,c\n",
    b"0,0,0,0\n",
    b"MemTotal: -5 kB\n",
    b"10 10 10\n",
    b"0x1f\n",
    "٣\n".encode(),
]


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, list[Path]]]:
    root = tmp_path_factory.mktemp("sysfs1152")
    machine = synthetic_topology(SPEC)
    assert machine.num_cpus == 1152
    write_sysfs(machine, str(root / "sys"))
    files = sorted(p for p in root.rglob("*") if p.is_file())
    yield root, files


def consistent(topo: Topology) -> None:
    seen: set[int] = set()
    for node in topo.numa_nodes.values():
        cpus = set(node.cpus)
        assert not cpus & seen, f"cpus {sorted(cpus & seen)[:5]} on two NUMA nodes"
        seen |= cpus
    assert seen == set(topo.all_cpus)
    for cpu in topo.all_cpus:
        assert cpu in topo.cpu_info


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_mutated_1152_cpu_trees_fail_with_a_named_path_or_discover_consistently(
    tree: tuple[Path, list[Path]], data: st.DataObject
) -> None:
    root, files = tree
    picked = data.draw(st.lists(st.sampled_from(files), min_size=1, max_size=3, unique=True))
    saved = {p: p.read_bytes() for p in picked}
    try:
        for path in picked:
            how = data.draw(st.sampled_from(["garbage", "random", "delete", "directory"]))
            if how == "garbage":
                path.write_bytes(data.draw(st.sampled_from(GARBAGE)))
            elif how == "random":
                path.write_bytes(data.draw(st.binary(max_size=64)))
            elif how == "delete":
                path.unlink()
            else:
                path.unlink()
                path.mkdir()
        try:
            topo = discover(str(root / "sys"))
        except TopologyError as exc:
            assert str(root) in str(exc), f"error names no path of the tree: {exc}"
        else:
            consistent(topo)
    finally:
        for path, content in saved.items():
            if path.is_dir():
                shutil.rmtree(path)
            path.write_bytes(content)


def test_unmodified_tree_discovers_1152_cpus(tree: tuple[Path, list[Path]]) -> None:
    root, _ = tree
    topo = discover(str(root / "sys"))
    assert topo.num_cpus == 1152 and topo.num_numa_nodes == 12
    consistent(topo)
