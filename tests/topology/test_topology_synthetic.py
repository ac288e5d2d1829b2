"""The compact spec, the CPU-table JSON format, load_topology and describe."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nri_plrm.base.cpuset import CPUSet
from nri_plrm.topology.machines import MACHINES, load_topology
from nri_plrm.topology.model import TopologyError
from nri_plrm.topology.synthetic import (
    DEFAULT_SPEC,
    MachineSpec,
    cpu_table,
    describe,
    load_cpu_table,
    parse_spec,
    synthetic_topology,
    with_memory,
)

GI = 1 << 30
MI = 1 << 20


def test_default_spec_is_the_bundled_machine() -> None:
    topology = synthetic_topology(DEFAULT_SPEC)
    assert topology.num_cpus == 64 and topology.num_cores == 32
    assert topology.num_sockets == 2 and topology.num_numa_nodes == 4
    assert topology.cpu_info[32].core == 0 and topology.cpu_info[0].core == 0
    assert topology.cpu_info[63].core == 31
    assert topology.numa_nodes[0].cpus == CPUSet.parse("0-7,32-39")
    assert topology.numa_nodes[3].cpus == CPUSet.parse("24-31,56-63")
    assert topology.cpu_info[16].socket == 1 and topology.cpu_info[15].socket == 0
    assert [topology.cpu_info[c].l3 for c in (0, 8, 40, 63)] == [0, 0, 0, 1]
    assert topology.memory_of(2, "memory") == 16 * GI
    assert topology.memory_resources == ("memory",)
    assert [topology.distance(0, n) for n in range(4)] == [10, 11, 21, 21]
    assert [topology.distance(3, n) for n in range(4)] == [21, 21, 11, 10]


def test_keys_left_out_take_the_default() -> None:
    spec = parse_spec("sockets=1, threads_per_core=1")
    assert spec == MachineSpec(1, 2, 8, 1, 16 * GI)
    topology = spec.build()
    assert topology.num_cpus == 16 and topology.cpus_per_core == 1


def test_hugepages() -> None:
    topology = synthetic_topology(
        "sockets=1,numa_per_socket=1,cores_per_numa=4,threads_per_core=2,memory_per_numa=8Gi,"
        "hugepages_2Mi_per_numa=512,hugepages_1Gi_per_numa=2"
    )
    assert topology.memory_of(0, "hugepages-2Mi") == 1 * GI
    assert topology.memory_of(0, "hugepages-1Gi") == 2 * GI
    assert topology.memory_of(0, "memory") == 8 * GI
    assert topology.memory_resources == ("memory", "hugepages-1Gi", "hugepages-2Mi")


def test_zero_hugepages_are_kept_as_a_zero_pool() -> None:
    topology = synthetic_topology("hugepages_1Gi_per_numa=0")
    assert topology.numa_nodes[0].memory == {"memory": 16 * GI, "hugepages-1Gi": 0}


def test_four_way_smt_numbering() -> None:
    topology = synthetic_topology(
        "sockets=1,numa_per_socket=1,cores_per_numa=3,threads_per_core=4,memory_per_numa=1Gi"
    )
    core_1 = CPUSet(c for c, i in topology.cpu_info.items() if i.core == 1)
    assert core_1 == CPUSet([1, 4, 7, 10])


def test_spec_str_round_trips() -> None:
    spec = parse_spec(DEFAULT_SPEC + ",hugepages_2Mi_per_numa=3")
    assert str(spec) == DEFAULT_SPEC + ",hugepages_2Mi_per_numa=3"
    assert parse_spec(str(spec)) == spec


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty"),
        ("sockets", "'sockets' is not key=value"),
        ("sockets=", "'sockets=' is not key=value"),
        ("cpus=4", "unknown key 'cpus'"),
        ("hugepages_2mi_per_numa=1", "unknown key 'hugepages_2mi_per_numa'"),
        ("sockets=1,sockets=2", "key 'sockets' given twice"),
        ("sockets=0", "sockets='0' must be >= 1"),
        ("sockets=two", "sockets='two' must be a whole number >= 1"),
        ("sockets=-1", "sockets='-1' must be a whole number"),
        ("threads_per_core=1.5", "threads_per_core='1.5'"),
        ("memory_per_numa=lots", "memory_per_numa: quantity 'lots'"),
        ("memory_per_numa=0", "memory_per_numa='0' must be more than 0"),
        ("hugepages_1Gi_per_numa=x", "hugepages_1Gi_per_numa='x'"),
        (
            "hugepages_1Gi_per_numa=17",
            r"hugepages per NUMA node \(17Gi\) exceed memory_per_numa=16Gi",
        ),
        ("sockets=64,cores_per_numa=64,threads_per_core=2", "8192 cpus|16384 cpus exceed"),
    ],
)
def test_spec_errors_name_the_key_value_and_rule(text: str, message: str) -> None:
    with pytest.raises(TopologyError, match=message):
        parse_spec(text)


@settings(max_examples=60, deadline=None)
@given(
    sockets=st.integers(1, 4),
    numa=st.integers(1, 4),
    cores=st.integers(1, 8),
    threads=st.integers(1, 4),
)
def test_synthetic_layout_invariants(sockets: int, numa: int, cores: int, threads: int) -> None:
    topology = synthetic_topology(
        f"sockets={sockets},numa_per_socket={numa},cores_per_numa={cores},"
        f"threads_per_core={threads},memory_per_numa=1Gi"
    )
    total_cores = sockets * numa * cores
    assert topology.num_cpus == total_cores * threads
    assert topology.num_numa_nodes == sockets * numa
    for cpu, info in topology.cpu_info.items():
        assert info.core == cpu % total_cores
        assert info.numa == info.core // cores
        assert info.l3 == info.socket == info.numa // numa
    for node in topology.numa_nodes.values():
        assert len(node.cpus) == cores * threads


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="sockethrad_numpcory=,0123456789GiM .-", max_size=80))
def test_spec_parser_fuzz_only_raises_topology_error(text: str) -> None:
    try:
        spec = parse_spec(text)
    except TopologyError:
        return
    assert spec.num_cpus >= 1


def test_cpu_table_round_trips_every_machine() -> None:
    for name in MACHINES:
        if name == "synthetic1024":
            continue
        table = cpu_table(MACHINES[name])
        assert cpu_table(load_cpu_table(json.loads(json.dumps(table)))) == table, name


def test_cpu_table_both_memory_forms_and_distances() -> None:
    topology = load_cpu_table(
        {
            "cpus": [
                {"cpu": 0, "core": 0, "socket": 0, "numa": 0},
                {"cpu": 1, "core": 0, "socket": 0, "numa": 0, "l3": 7, "die": 1},
                {"cpu": 2, "core": 2, "socket": 1, "numa": 1},
            ],
            "memory": {"0": "16Gi", "1": {"memory": "8Gi", "hugepages-2048Ki": "1Gi"}, "2": "4Gi"},
            "distances": {"0": [10, 21, 31], "1": {"0": 21, "1": 10}},
        }
    )
    assert topology.numa_ids == (0, 1, 2)
    assert topology.numa_nodes[2].cpus == CPUSet()
    assert topology.memory_of(0, "memory") == 16 * GI
    assert topology.memory_of(1, "hugepages-2Mi") == 1 * GI
    assert topology.cpu_info[0].l3 == 0 and topology.cpu_info[2].l3 == 1
    assert topology.cpu_info[1].l3 == 7 and topology.cpu_info[1].die == 1
    assert [topology.distance(0, n) for n in range(3)] == [10, 21, 31]
    assert [topology.distance(1, n) for n in range(3)] == [21, 10, 20]
    assert [topology.distance(2, n) for n in range(3)] == [20, 20, 10]


def cpu(n: int, **extra: Any) -> dict[str, Any]:
    return {"cpu": n, "core": n, "socket": 0, "numa": 0, **extra}


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ([], "must be a JSON object"),
        ({}, "'cpus' must be a non-empty list"),
        ({"cpus": []}, "'cpus' must be a non-empty list"),
        ({"cpus": [cpu(0)], "numa": {}}, "unknown key 'numa'"),
        ({"cpus": [5]}, r"cpus\[0\]: 5 must be an object"),
        ({"cpus": [cpu(0, thread=1)]}, r"cpus\[0\]: unknown key 'thread'"),
        ({"cpus": [{"cpu": 0, "socket": 0, "numa": 0}]}, "missing required key 'core'"),
        ({"cpus": [cpu(0, l3=-1)]}, "l3 -1 must be an integer 0..65535"),
        ({"cpus": [cpu(0, l3=True)]}, "l3 True must be an integer 0..65535"),
        ({"cpus": [cpu(10**12)]}, "cpu 1000000000000 must be an integer 0..65535"),
        ({"cpus": [cpu(0), cpu(0)]}, "cpu 0: listed twice"),
        ({"cpus": [cpu(0)], "memory": []}, "'memory' must be an object"),
        ({"cpus": [cpu(0)], "memory": {"x": "1Gi"}}, "memory key 'x' must be a NUMA node id"),
        ({"cpus": [cpu(0)], "memory": {"0": "big"}}, r"memory\['0'\]\['memory'\]: quantity"),
        ({"cpus": [cpu(0)], "memory": {"0": 1.5}}, "1.5 must be a quantity"),
        ({"cpus": [cpu(0)], "memory": {"0": "-1Gi"}}, "must not be negative"),
        ({"cpus": [cpu(0)], "memory": {"0": {"ram": "1Gi"}}}, "unknown memory type"),
        (
            {"cpus": [cpu(0)], "memory": {"0": {"hugepages-1Gi": "1Gi", "hugepages-1024Mi": "0"}}},
            "the same memory type as 'hugepages-1Gi', given twice",
        ),
        ({"cpus": [cpu(0)], "distances": {"0": [10, 20]}}, "2 values; the row needs one per"),
        ({"cpus": [cpu(0)], "distances": {"1": [10]}}, "node 1 has no cpus and no memory"),
        ({"cpus": [cpu(0)], "distances": {"0": {"3": 10}}}, "node 3 is not a NUMA node"),
        ({"cpus": [cpu(0)], "distances": {"0": [0]}}, "distance 0 must be an integer 1..255"),
        ({"cpus": [cpu(0)], "distances": {"0": "10"}}, "must be a list of distances"),
        (
            {"cpus": [cpu(0), {"cpu": 1, "core": 0, "socket": 1, "numa": 0}]},
            "core 0 is in socket 0 and socket 1",
        ),
    ],
)
def test_cpu_table_errors(data: object, message: str) -> None:
    with pytest.raises(TopologyError, match=message):
        load_cpu_table(data, "table.json")


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 300) | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=20,
)
cpu_rows = st.fixed_dictionaries(
    {k: st.integers(-1, 5) for k in ("cpu", "core", "socket", "numa")},
    optional={"l3": st.integers(-1, 3), "die": json_values},
)


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(
        json_values,
        st.fixed_dictionaries(
            {"cpus": st.lists(cpu_rows, max_size=5)},
            optional={
                "memory": st.dictionaries(
                    st.sampled_from(["0", "1", "x"]),
                    st.sampled_from(["1Gi", "2", "-1", {"hugepages-2Mi": "2Mi"}, {"a": 1}]),
                ),
                "distances": st.dictionaries(st.sampled_from(["0", "1", "2"]), json_values),
            },
        ),
    )
)
def test_cpu_table_fuzz_only_raises_topology_error(data: object) -> None:
    try:
        topology = load_cpu_table(data)
    except TopologyError:
        return
    assert topology.num_cpus >= 1


def test_load_topology_reads_files_machines_and_specs(tmp_path: Path) -> None:
    path = tmp_path / "machine.json"
    path.write_text(json.dumps(cpu_table(MACHINES["topoDualSocketHT"])))
    assert cpu_table(load_topology(str(path))) == cpu_table(MACHINES["topoDualSocketHT"])
    assert load_topology("topoDualSocketHT") is MACHINES["topoDualSocketHT"]
    assert load_topology("sockets=1").num_sockets == 1


def test_load_topology_errors(tmp_path: Path) -> None:
    with pytest.raises(TopologyError, match="no such cpu-table file"):
        load_topology(str(tmp_path / "missing.json"))
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    with pytest.raises(TopologyError, match=r"bad\.json: not valid JSON"):
        load_topology(str(bad))
    wrong = tmp_path / "wrong.json"
    wrong.write_text('{"cpus": [{"cpu": 0}]}')
    with pytest.raises(TopologyError, match=r"wrong.json: cpus\[0\]: missing required key"):
        load_topology(str(wrong))
    with pytest.raises(TopologyError, match="'machine': not a cpu-table file, a test machine name"):
        load_topology("machine")


def test_describe_default_machine() -> None:
    description = describe(MACHINES["default"])
    json.dumps(description)
    assert description["num_cpus"] == 64 and description["threads_per_core"] == 2
    assert description["cpus"] == "0-63"
    assert description["memory_total"] == {"memory": 64 * GI}
    assert description["sockets"][1] == {
        "id": 1,
        "cpus": "16-31,48-63",
        "cores": 16,
        "numa_nodes": [2, 3],
    }
    node = description["numa_nodes"][1]
    assert node == {
        "id": 1,
        "cpus": "8-15,40-47",
        "cores": 8,
        "sockets": [0],
        "uncore_caches": [0],
        "memory": {"memory": 16 * GI},
        "memory_quantity": {"memory": "16Gi"},
        "distances": [11, 10, 21, 21],
    }


def test_describe_memory_only_node_and_hugepages() -> None:
    topology = load_cpu_table(
        {
            "cpus": [cpu(0)],
            "memory": {"0": {"memory": "1Gi", "hugepages-2Mi": "4Mi"}, "1": "2Gi"},
        }
    )
    description = describe(topology)
    assert description["memory_total"] == {"memory": 3 * GI, "hugepages-2Mi": 4 * MI}
    assert description["numa_nodes"][1]["cpus"] == ""
    assert description["numa_nodes"][1]["cores"] == 0


def test_with_memory_keeps_cpus_and_distances() -> None:
    base = synthetic_topology(DEFAULT_SPEC)
    topology = with_memory(MACHINES["topoDualSocketHT"], {"memory": 4 * GI})
    assert topology.memory_of(1, "memory") == 4 * GI
    assert cpu_table(topology)["cpus"] == cpu_table(MACHINES["topoDualSocketHT"])["cpus"]
    assert with_memory(base, {"memory": GI}).distance(0, 2) == 21
