"""kubelet checkpoint formats: every published checksum vector, byte-exact files, the reader."""

from __future__ import annotations

import contextlib
import json
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kubelet_decode import decode_cpu_manager_state, decode_memory_manager_state

from nri_plrm.base.cpuset import CPUSet
from nri_plrm.checkpoint.kubelet import (
    CPUManagerState,
    KubeletCheckpointError,
    MemoryManagerState,
    MemoryTable,
    NUMANodeState,
    check_kubelet_cpu_manager,
    cpu_checkpoint_checksum,
    cpu_hash_text,
    encode_cpu_manager_state,
    encode_memory_manager_state,
    fnv1a_32,
    go_string,
    kubelet_cpu_policy,
    memory_checkpoint_checksum,
    memory_checkpoint_hash_text,
    string_checksum,
    write_kubelet_state,
)
from nri_plrm.engine.spec import MemoryBlock

P = CPUSet.parse


def _h(text: str) -> int:
    return fnv1a_32(text.encode())


# --- §6.1 hash texts and checksums ---------------------------------------------------------


def test_fnv1a_known_values() -> None:
    assert fnv1a_32(b"") == 0x811C9DC5
    assert fnv1a_32(b"a") == 0xE40C292C


def test_v2_empty_entries_354655845() -> None:
    state = CPUManagerState("none", P("4-6"))
    assert cpu_hash_text("none", "4-6", {}) == (
        "(*state.CPUManagerCheckpoint){PolicyName:(string)none DefaultCPUSet:(string)4-6 "
        "Entries:(map[string]map[string]string)map[] Checksum:(checksum.Checksum)0}"
    )
    assert cpu_checkpoint_checksum(state) == 354655845


def test_v2_entries_3610638499() -> None:
    state = CPUManagerState(
        "none", P("1-3"), {"pod": {"container2": P("1-3"), "container1": P("4-6")}}
    )
    assert cpu_checkpoint_checksum(state) == 3610638499


def test_v2_nil_entries_194140474() -> None:
    assert _h(cpu_hash_text("none", "4-6", None)) == 194140474


def test_string_checksum_657950972() -> None:
    assert string_checksum('{"policyName":"none","defaultCPUSet":"4-6"}') == 657950972


V3_STATE = CPUManagerState(
    "static",
    P("1-2"),
    {"pod1": {"container1": P("5-6"), "container2": P("3-4")}},
    {"pod2": P("7-9")},
)


def test_v3_checksums_2284712151_and_766259872() -> None:
    v3 = cpu_checkpoint_checksum(
        V3_STATE, type_name="CPUManagerCheckpointV3", with_pod_entries=True
    )
    legacy = cpu_checkpoint_checksum(V3_STATE, with_pod_entries=True)
    assert v3 == 2284712151
    assert legacy == 766259872


@pytest.mark.parametrize(
    ("type_name", "policy", "default", "entries", "expected"),
    [
        (
            "CPUManagerCheckpointV3",
            "static",
            "7-9",
            {"pod": {"container1": "4-6", "container2": "1-3"}},
            1942532442,
        ),
        ("CPUManagerCheckpoint", "none", "7-9", {}, 98002435),
        (
            "CPUManagerCheckpoint",
            "static",
            "1-3",
            {"pod": {"container1": "4-6", "container2": "7-9"}},
            1659543133,
        ),
    ],
)
def test_v3_with_empty_pod_entries(
    type_name: str, policy: str, default: str, entries: dict[str, dict[str, str]], expected: int
) -> None:
    assert _h(cpu_hash_text(policy, default, entries, {}, type_name=type_name)) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            '{"policyName":"static","defaultCPUSet":"7-9","entries":{"pod":{"container1":"4-6",'
            '"container2":"1-3"}}}',
            1420829534,
        ),
        ('{"policyName":"none","defaultCPUSet":"1.3"}', 3033143655),
        ('{"policyName":"none","defaultCPUSet":"4-6","unknownField":"value"}', 3492408555),
        (
            '{"policyName":"static","defaultCPUSet":"1-3","entries":{"pod":{"container":"4-5"}},'
            '"podEntries":{"pod":{"cpuSet":"4-6"}}}',
            234652157,
        ),
        (
            '{"policyName":"static","defaultCPUSet":"1-3","entries":{"pod1":{"container":"4-5"},'
            '"pod2":{"container":"7-8"}},"podEntries":{"pod1":{"cpuSet":"4-6"},'
            '"pod2":{"cpuSet":"7-9"}}}',
            2086345991,
        ),
    ],
)
def test_data_string_checksums(text: str, expected: int) -> None:
    assert string_checksum(text) == expected


MEMORY_STATE = MemoryManagerState(
    "Static",
    {
        0: NUMANodeState(
            1,
            {"memory": MemoryTable(2147483648, 536870912, 1610612736, 1073741824, 536870912)},
            (0,),
        )
    },
    {"pod1": {"c1": (MemoryBlock((0,), "memory", 1073741824),)}},
    {"pod1": (MemoryBlock((0,), "memory", 1073741824),)},
)


def test_memory_v1_414477793() -> None:
    assert memory_checkpoint_hash_text(MEMORY_STATE) == (
        "(*state.MemoryManagerCheckpoint){PolicyName:(string)Static MachineState:"
        "(state.NUMANodeMap)map[0:<*>{NumberOfAssignments:(int)1 MemoryMap:"
        "(map[v1.ResourceName]*state.MemoryTable)map[memory:<*>{TotalMemSize:(uint64)2147483648 "
        "SystemReserved:(uint64)536870912 Allocatable:(uint64)1610612736 "
        "Reserved:(uint64)1073741824 Free:(uint64)536870912}] Cells:([]int)[0]}] "
        "Entries:(state.ContainerMemoryAssignments)map[pod1:map[c1:[{NUMAAffinity:([]int)[0] "
        "Type:(v1.ResourceName)memory Size:(uint64)1073741824}]]] Checksum:(checksum.Checksum)0}"
    )
    assert memory_checkpoint_checksum(MEMORY_STATE) == 414477793


# --- Go-generated files, byte for byte -------------------------------------------------------

GO_V4 = (
    '{"policyName":"static","defaultCpuSet":"0-1,3-5,7,9-11","entries":{"pod1":{"gu-container-1":'
    '"6","gu-container-2":"2","ngu-container":"8"}},"checksum":2038886615,"data":"{\\"policyName\\":'
    '\\"static\\",\\"defaultCpuSet\\":\\"0-1,3-5,7,9-11\\",\\"entries\\":{\\"pod1\\":{\\"gu-container-1'
    '\\":\\"6\\",\\"gu-container-2\\":\\"2\\",\\"ngu-container\\":\\"8\\"}},\\"podEntries\\":{\\"pod1\\"'
    ':{\\"cpuSet\\":\\"2,6,8\\"}}}","dataChecksum":2104109891}'
)
GO_V4_STATE = CPUManagerState(
    "static",
    P("0-1,3-5,7,9-11"),
    {"pod1": {"ngu-container": P("8"), "gu-container-2": P("2"), "gu-container-1": P("6")}},
    {"pod1": P("2,6,8")},
)

GO_MEMORY_V3 = (
    '{"policyName":"Static","machineState":{"0":{"numberOfAssignments":1,"memoryMap":{"memory":'
    '{"total":2147483648,"systemReserved":536870912,"allocatable":1610612736,"reserved":1073741824,'
    '"free":536870912}},"cells":[0]}},"entries":{"pod1":{"c1":[{"numaAffinity":[0],"type":"memory",'
    '"size":1073741824}]}},"checksum":414477793,"data":"{\\"policyName\\":\\"Static\\",\\"machineState'
    '\\":{\\"0\\":{\\"numberOfAssignments\\":1,\\"memoryMap\\":{\\"memory\\":{\\"total\\":2147483648,'
    '\\"systemReserved\\":536870912,\\"allocatable\\":1610612736,\\"reserved\\":1073741824,\\"free\\":'
    '536870912}},\\"cells\\":[0]}},\\"entries\\":{\\"pod1\\":{\\"c1\\":[{\\"numaAffinity\\":[0],\\"type'
    '\\":\\"memory\\",\\"size\\":1073741824}]}},\\"podEntries\\":{\\"pod1\\":{\\"memoryBlocks\\":'
    '[{\\"numaAffinity\\":[0],\\"type\\":\\"memory\\",\\"size\\":1073741824}]}}}","dataChecksum":'
    "2030367846}"
)


def test_cpu_v4_matches_go_bytes() -> None:
    assert encode_cpu_manager_state(GO_V4_STATE, "v4").decode() == GO_V4
    decoded = decode_cpu_manager_state(GO_V4)
    assert decoded.format == "v4"
    assert decoded.state == GO_V4_STATE


def test_cpu_v2_is_the_inline_part_of_v4() -> None:
    v2 = json.loads(encode_cpu_manager_state(GO_V4_STATE, "v2"))
    assert v2 == {k: v for k, v in json.loads(GO_V4).items() if k not in ("data", "dataChecksum")}
    decoded = decode_cpu_manager_state(json.dumps(v2))
    assert decoded.format == "v2"
    assert decoded.state.pod_entries == {}
    assert decoded.state.entries == GO_V4_STATE.entries


def test_memory_v3_matches_go_bytes() -> None:
    assert encode_memory_manager_state(MEMORY_STATE, "v3").decode() == GO_MEMORY_V3
    decoded = decode_memory_manager_state(GO_MEMORY_V3)
    assert decoded.format == "v3"
    assert decoded.state == MEMORY_STATE


def test_memory_v1_round_trip() -> None:
    raw = encode_memory_manager_state(MEMORY_STATE, "v1")
    assert json.loads(raw)["checksum"] == 414477793
    decoded = decode_memory_manager_state(raw)
    assert decoded.format == "v1"
    assert decoded.state.entries == MEMORY_STATE.entries
    assert decoded.state.pod_entries == {}


def test_empty_state_omits_entries() -> None:
    state = CPUManagerState("static", P("0-3"))
    data = '{"policyName":"static","defaultCpuSet":"0-3"}'
    inline = cpu_checkpoint_checksum(state)
    assert json.loads(encode_cpu_manager_state(state, "v4")) == {
        "policyName": "static",
        "defaultCpuSet": "0-3",
        "checksum": inline,
        "data": data,
        "dataChecksum": string_checksum(data),
    }
    assert inline == _h(cpu_hash_text("static", "0-3", {}))


def test_go_json_escaping_of_html_characters() -> None:
    state = CPUManagerState("a<b>&c", P("0"))
    raw = encode_cpu_manager_state(state, "v2").decode()
    assert '"policyName":"a\\u003cb\\u003e\\u0026c"' in raw
    assert decode_cpu_manager_state(raw).state.policy_name == "a<b>&c"


@pytest.mark.parametrize(
    ("text", "marshalled"),
    [
        ("pod-1234_main", '"pod-1234_main"'),
        ("", '""'),
        ('say "hi"', '"say \\"hi\\""'),
        ("a\\b", '"a\\\\b"'),
        ("tab\there\n", '"tab\\there\\n"'),
        ("\x01\x1f", '"\\u0001\\u001f"'),
        ("<&>", '"\\u003c\\u0026\\u003e"'),
        ("\u2028\u2029", '"\\u2028\\u2029"'),
        ("ünï", '"ünï"'),
    ],
)
def test_go_string_is_go_json_marshal(text: str, marshalled: str) -> None:
    assert go_string(text) == marshalled
    assert json.loads(go_string(text)) == text


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=30))
def test_fuzz_go_string_quick_path_is_the_escaping_one(text: str) -> None:
    escapes = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
    slow = "".join(
        escapes.get(ch)
        or (f"\\u{ord(ch):04x}" if ord(ch) < 0x20 or ch in "<>&\u2028\u2029" else ch)
        for ch in text
    )
    assert go_string(text) == f'"{slow}"'
    assert json.loads(go_string(text)) == text


def test_multi_numa_machine_state_key_order() -> None:
    table = MemoryTable(1, 0, 1, 0, 1)
    machine = {
        n: NUMANodeState(0, {"memory": table, "hugepages-2Mi": table}, (n,)) for n in (2, 10, 1)
    }
    state = MemoryManagerState("Static", machine)
    raw = encode_memory_manager_state(state, "v1").decode()
    assert raw.index('"1":') < raw.index('"10":') < raw.index('"2":')
    assert raw.index('"hugepages-2Mi"') < raw.index('"memory"')
    text = memory_checkpoint_hash_text(state)
    assert text.index("map[1:") < text.index(" 2:<*>") < text.index(" 10:<*>")
    assert decode_memory_manager_state(raw).state == state


# --- the 1.37 reader ---------------------------------------------------------------------------


def _v4(data: str, checksum: int | None = None, **inline: object) -> str:
    doc: dict[str, object] = dict(inline)
    doc["data"] = data
    doc["dataChecksum"] = string_checksum(data) if checksum is None else checksum
    return json.dumps(doc)


def test_v4_data_only_file_is_valid_and_inline_part_ignored() -> None:
    data = (
        '{"policyName":"static","defaultCPUSet":"1-3","entries":{"pod":{"container":"4-5"}},'
        '"podEntries":{"pod":{"cpuSet":"4-6"}}}'
    )
    for raw in (
        _v4(data),
        _v4(data, policyName="other", checksum=None),
        _v4(data, checksum=234652157),
    ):
        state = decode_cpu_manager_state(raw).state
        assert state.policy_name == "static"
        assert state.default_cpuset == P("1-3")
        assert state.entries == {"pod": {"container": P("4-5")}}
        assert state.pod_entries == {"pod": P("4-6")}


def test_v4_unknown_fields_ignored() -> None:
    data = '{"policyName":"none","defaultCPUSet":"4-6","unknownField":"value"}'
    assert decode_cpu_manager_state(_v4(data, checksum=3492408555)).state.default_cpuset == P("4-6")


def test_v4_wrong_or_missing_data_checksum() -> None:
    data = '{"policyName":"none","defaultCPUSet":"4-6"}'
    with pytest.raises(
        KubeletCheckpointError, match="could not load v4 checkpoint: checkpoint is corrupted"
    ):
        decode_cpu_manager_state(_v4(data, checksum=1234))
    with pytest.raises(KubeletCheckpointError, match="checkpoint is corrupted"):
        decode_cpu_manager_state(json.dumps({"data": data}))
    with pytest.raises(KubeletCheckpointError, match="unexpected end of JSON input"):
        decode_cpu_manager_state(json.dumps({"dataChecksum": 1}))


def test_v4_bad_cpusets_use_kubelet_wording() -> None:
    expected = re.escape('could not parse default CPU set "1.3"')
    with pytest.raises(KubeletCheckpointError, match=expected):
        decode_cpu_manager_state(
            _v4('{"policyName":"none","defaultCPUSet":"1.3"}', checksum=3033143655)
        )
    data = '{"policyName":"static","defaultCPUSet":"1-3","entries":{"pod":{"container2":"asd"}}}'
    with pytest.raises(
        KubeletCheckpointError,
        match='could not parse cpuset "asd" for container "container2" in pod "pod"',
    ):
        decode_cpu_manager_state(_v4(data))


def test_invalid_json() -> None:
    with pytest.raises(KubeletCheckpointError, match="could not restore state"):
        decode_cpu_manager_state("{")


def test_v3_file_read_with_either_type_name() -> None:
    for checksum in (2284712151, 766259872):
        raw = json.dumps(
            {
                "policyName": "static",
                "defaultCpuSet": "1-2",
                "entries": {"pod1": {"container1": "5-6", "container2": "3-4"}},
                "podEntries": {"pod2": {"cpuSet": "7-9"}},
                "checksum": checksum,
            }
        )
        decoded = decode_cpu_manager_state(raw)
        assert decoded.format == "v3"
        assert decoded.state == V3_STATE


@pytest.mark.parametrize(
    ("policy", "default", "entries", "checksum"),
    [
        ("static", "7-9", {"pod": {"container1": "4-6", "container2": "1-3"}}, 1942532442),
        ("none", "7-9", {}, 98002435),
        ("static", "1-3", {"pod": {"container1": "4-6", "container2": "7-9"}}, 1659543133),
        ("none", "4-6", {}, 354655845),
        ("none", "1-3", {"pod": {"container1": "4-6", "container2": "1-3"}}, 3610638499),
        ("none", "4-6", {}, 0),
    ],
)
def test_v2_and_v3_files_without_pod_entries(
    policy: str, default: str, entries: dict[str, dict[str, str]], checksum: int
) -> None:
    doc: dict[str, object] = {"policyName": policy, "defaultCPUSet": default, "checksum": checksum}
    if entries:
        doc["entries"] = entries
    state = decode_cpu_manager_state(json.dumps(doc)).state
    assert state.policy_name == policy
    assert state.default_cpuset == P(default)


def test_v1_checksum_is_corrupt_for_v2_reader() -> None:
    raw = json.dumps({"policyName": "none", "defaultCpuSet": "1-3", "checksum": 1694838852})
    with pytest.raises(KubeletCheckpointError, match="checkpoint is corrupted"):
        decode_cpu_manager_state(raw)


def test_cpusets_hash_as_stored_strings() -> None:
    text = "1,2,3"
    raw = json.dumps(
        {
            "policyName": "none",
            "defaultCpuSet": text,
            "checksum": _h(cpu_hash_text("none", text, {})),
        }
    )
    assert decode_cpu_manager_state(raw).state.default_cpuset == P("1-3")


def test_memory_reader_rejects_tampering() -> None:
    doc = json.loads(GO_MEMORY_V3)
    doc["dataChecksum"] += 1
    with pytest.raises(KubeletCheckpointError, match="checkpoint is corrupted"):
        decode_memory_manager_state(json.dumps(doc))
    v1 = json.loads(encode_memory_manager_state(MEMORY_STATE, "v1"))
    v1["checksum"] = 414477794
    with pytest.raises(KubeletCheckpointError, match="checkpoint is corrupted"):
        decode_memory_manager_state(json.dumps(v1))
    v1["podEntries"] = {}
    with pytest.raises(KubeletCheckpointError, match=re.escape("1.36 V2")):
        decode_memory_manager_state(json.dumps(v1))


def test_bad_format_names() -> None:
    with pytest.raises(ValueError, match="v3"):
        encode_cpu_manager_state(GO_V4_STATE, "v3")
    with pytest.raises(ValueError, match="v2"):
        encode_memory_manager_state(MEMORY_STATE, "v2")


# --- files, policy check ----------------------------------------------------------------------


def test_write_kubelet_state(tmp_path: Path) -> None:
    d = tmp_path / "export"
    paths = write_kubelet_state(d, GO_V4_STATE, MEMORY_STATE)
    assert [p.name for p in paths] == ["cpu_manager_state", "memory_manager_state"]
    assert (d / "cpu_manager_state").read_text() == GO_V4
    assert (d / "memory_manager_state").read_text() == GO_MEMORY_V3
    assert (d / "cpu_manager_state").stat().st_mode & 0o777 == 0o644
    write_kubelet_state(d, GO_V4_STATE, None, cpu_format="v2")
    assert decode_cpu_manager_state((d / "cpu_manager_state").read_bytes()).format == "v2"


def test_write_kubelet_state_refuses_symlinked_dir(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    with pytest.raises(OSError, match="symlink"):
        write_kubelet_state(tmp_path / "link", GO_V4_STATE, None)


def test_kubelet_static_policy_refuses_start(tmp_path: Path) -> None:
    path = tmp_path / "cpu_manager_state"
    assert kubelet_cpu_policy(path) is None
    check_kubelet_cpu_manager(path)
    path.write_text(json.dumps({"policyName": "none", "defaultCpuSet": "", "checksum": 0}))
    check_kubelet_cpu_manager(path)
    path.write_bytes(encode_cpu_manager_state(GO_V4_STATE))
    assert kubelet_cpu_policy(path) == "static"
    with pytest.raises(KubeletCheckpointError, match="cpuManagerPolicy: none"):
        check_kubelet_cpu_manager(path)
    path.write_text(_v4('{"policyName":"static","defaultCPUSet":"1"}', policyName="none"))
    assert kubelet_cpu_policy(path) == "static"
    path.write_text("not json")
    assert kubelet_cpu_policy(path) is None


# --- fuzz -----------------------------------------------------------------------------------

names = st.text(alphabet='abcdefghijklmnopqrstuvwxyz0123456789-<>&"\\', min_size=1, max_size=10)
cpusets = st.sets(st.integers(0, 127), max_size=12).map(CPUSet)


@settings(max_examples=150, deadline=None)
@given(
    policy=st.sampled_from(["static", "none"]),
    default=cpusets,
    entries=st.dictionaries(
        names, st.dictionaries(names, cpusets, min_size=1, max_size=3), max_size=3
    ),
    pods=st.dictionaries(names, cpusets, max_size=3),
    fmt=st.sampled_from(["v2", "v4"]),
)
def test_fuzz_cpu_round_trip(
    policy: str,
    default: CPUSet,
    entries: dict[str, dict[str, CPUSet]],
    pods: dict[str, CPUSet],
    fmt: str,
) -> None:
    state = CPUManagerState(policy, default, entries, pods)
    raw = encode_cpu_manager_state(state, fmt)
    decoded = decode_cpu_manager_state(raw)
    assert decoded.format == fmt
    assert decoded.state == (state if fmt == "v4" else CPUManagerState(policy, default, entries))


@settings(max_examples=300, deadline=None)
@given(raw=st.binary(max_size=300) | st.text(max_size=300))
def test_fuzz_readers_only_raise_checkpoint_errors(raw: bytes | str) -> None:
    for decode in (decode_cpu_manager_state, decode_memory_manager_state):
        with contextlib.suppress(KubeletCheckpointError):
            decode(raw)


json_scalars = st.none() | st.booleans() | st.integers(-5, 2**40) | st.text(max_size=6)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=12), inner, max_size=3)
    ),
    max_leaves=15,
)
field_names = st.sampled_from(
    [
        "policyName",
        "defaultCpuSet",
        "entries",
        "podEntries",
        "checksum",
        "data",
        "dataChecksum",
        "machineState",
        "memoryMap",
        "cells",
        "numaAffinity",
        "memoryBlocks",
    ]
)


@settings(max_examples=300, deadline=None)
@given(doc=st.dictionaries(field_names, json_values, max_size=6))
def test_fuzz_structured_documents(doc: dict[str, object]) -> None:
    raw = json.dumps(doc)
    for decode in (decode_cpu_manager_state, decode_memory_manager_state):
        with contextlib.suppress(KubeletCheckpointError):
            decode(raw)


@settings(max_examples=300, deadline=None)
@given(doc=st.dictionaries(field_names, json_values, max_size=6))
def test_fuzz_data_payloads_with_valid_checksums(doc: dict[str, object]) -> None:
    raw = _v4(json.dumps(doc))
    for decode in (decode_cpu_manager_state, decode_memory_manager_state):
        with contextlib.suppress(KubeletCheckpointError):
            decode(raw)


# --- exports of the real engine managers ------------------------------------------------------


def test_export_of_engine_managers_round_trips() -> None:
    from nri_plrm.checkpoint.kubelet import cpu_state_from_manager, memory_state_from_manager
    from nri_plrm.engine.cpu_manager import CPUManager
    from nri_plrm.engine.cpu_options import CPUManagerConfig
    from nri_plrm.engine.memory_manager import MemoryManager
    from nri_plrm.engine.memory_state import MemoryManagerConfig
    from nri_plrm.engine.spec import ContainerKind, ContainerSpec, PodSpec, TopologyHint
    from nri_plrm.topology.synthetic import DEFAULT_SPEC, synthetic_topology

    topo = synthetic_topology(DEFAULT_SPEC)
    cpu = CPUManager(topo, CPUManagerConfig(reserved_cpus=P("0")))
    mem = MemoryManager(topo, MemoryManagerConfig(reserved={0: {"memory": 512 << 20}}))
    gi = 1 << 30
    pod = PodSpec(
        uid="pod-1",
        init_containers=(ContainerSpec("sidecar", ContainerKind.SIDECAR),),
        containers=(
            ContainerSpec(
                "main",
                ContainerKind.APP,
                {"cpu": 2000, "memory": 2 * gi},
                {"cpu": 2000, "memory": 2 * gi},
            ),
        ),
        requests={"cpu": 4000, "memory": 4 * gi},
        limits={"cpu": 4000, "memory": 4 * gi},
    )
    hint = TopologyHint(0b1, True)
    cpu.allocate_pod(pod, hint)
    mem.allocate_pod(pod, hint)
    cpu_state = cpu_state_from_manager(cpu)
    assert cpu_state.pod_entries["pod-1"] == cpu.pod_cpus("pod-1")
    assert cpu_state.entries["pod-1"]["main"] == cpu.assignment("pod-1", "main")
    assert len(cpu_state.pod_entries["pod-1"]) == 4
    mem_state = memory_state_from_manager(mem)
    assert mem_state.pod_entries["pod-1"] == mem.pod_blocks("pod-1")
    assert mem_state.machine_state[0].memory_map["memory"].reserved == 4 * gi
    assert decode_cpu_manager_state(encode_cpu_manager_state(cpu_state)).state == cpu_state
    assert decode_memory_manager_state(encode_memory_manager_state(mem_state)).state == mem_state
    v2 = decode_cpu_manager_state(encode_cpu_manager_state(cpu_state, "v2")).state
    assert v2.entries == cpu_state.entries and v2.pod_entries == {}
