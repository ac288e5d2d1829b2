"""Readers of the kubelet's ``cpu_manager_state`` and ``memory_manager_state`` files.

They check that the files nri-plrm writes (``nri_plrm.checkpoint.kubelet``) are what a 1.37
kubelet reads back: V4/V3/V2 for CPU and V3/V1 for memory, JSON keys matched
case-insensitively, checksums verified; a file a kubelet would refuse raises
:class:`KubeletCheckpointError` with the kubelet's wording. Only tests and benchmarks read
kubelet files, so the readers live here rather than in the package.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from nri_plrm.base.cpuset import CPUSet, CPUSetError
from nri_plrm.checkpoint.kubelet import (
    LEGACY_CPU_TYPE,
    CPUManagerState,
    KubeletCheckpointError,
    MemoryManagerState,
    NUMANodeState,
    cpu_hash_text,
    fnv1a_32,
    go_string,
    memory_checkpoint_checksum,
    string_checksum,
)
from nri_plrm.checkpoint.kubelet_export import go_field
from nri_plrm.engine.memory_state import MemoryTable
from nri_plrm.engine.spec import MemoryBlock

V3_CPU_TYPE = "CPUManagerCheckpointV3"
"""The type name a 1.36 kubelet's V3 CPU checksum is computed over."""


@dataclass(frozen=True)
class DecodedCPUState:
    """A CPU manager file as read: the state and the format it was in."""

    state: CPUManagerState
    format: str
    """``v2``, ``v3`` or ``v4``."""


@dataclass(frozen=True)
class DecodedMemoryState:
    """A memory manager file as read: the state and the format it was in."""

    state: MemoryManagerState
    format: str
    """``v1`` or ``v3``."""


def _has(obj: Mapping[str, Any], name: str) -> bool:
    lowered = name.lower()
    return any(key.lower() == lowered for key in obj)


def _json_object(raw: bytes | str, what: str) -> dict[str, Any]:
    try:
        obj = json.loads(raw)
    except (UnicodeDecodeError, ValueError) as exc:
        raise KubeletCheckpointError(f"{what}: {exc}") from exc
    if not isinstance(obj, dict):
        raise KubeletCheckpointError(
            f"{what}: json: cannot unmarshal {type(obj).__name__} into a checkpoint object"
        )
    return obj


def _str_field(obj: Mapping[str, Any], name: str, default: str = "") -> str:
    value = go_field(obj, name)
    if value is None:
        return default
    if not isinstance(value, str):
        raise KubeletCheckpointError(f"json: cannot unmarshal {value!r} into string field {name}")
    return value


def _int_field(obj: Mapping[str, Any], name: str) -> int:
    value = go_field(obj, name)
    if value is None:
        return 0
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise KubeletCheckpointError(f"json: cannot unmarshal {value!r} into uint64 field {name}")
    return value


def _dict_field(obj: Mapping[str, Any], name: str) -> dict[str, Any]:
    value = go_field(obj, name)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise KubeletCheckpointError(f"json: cannot unmarshal {value!r} into map field {name}")
    return value


def _cpuset(text: str, context: str) -> CPUSet:
    try:
        return CPUSet.parse(text)
    except CPUSetError as exc:
        raise KubeletCheckpointError(
            f"could not restore state from checkpoint: {context}: {exc}"
        ) from exc


def _raw_cpu_state(obj: Mapping[str, Any]) -> tuple[str, str, dict[str, dict[str, str]]]:
    entries = _dict_field(obj, "entries")
    for pod, containers in entries.items():
        if not isinstance(containers, dict) or not all(
            isinstance(v, str) for v in containers.values()
        ):
            raise KubeletCheckpointError(
                f"json: cannot unmarshal entries of pod {pod!r}: {containers!r} "
                "must map container names to cpuset strings"
            )
    return _str_field(obj, "policyName"), _str_field(obj, "defaultCpuSet"), entries


def _raw_pod_entries(obj: Mapping[str, Any]) -> dict[str, str]:
    out: dict[str, str] = {}
    for pod, entry in _dict_field(obj, "podEntries").items():
        if not isinstance(entry, dict):
            raise KubeletCheckpointError(f"json: cannot unmarshal podEntries[{pod!r}]: {entry!r}")
        out[pod] = _str_field(entry, "cpuSet")
    return out


def _build_cpu_state(
    policy: str, default: str, entries: Mapping[str, Mapping[str, str]], pods: Mapping[str, str]
) -> CPUManagerState:
    return CPUManagerState(
        policy_name=policy,
        default_cpuset=_cpuset(default, f"could not parse default CPU set {go_string(default)}"),
        entries={
            pod: {
                name: _cpuset(
                    text,
                    (
                        f"could not parse cpuset {go_string(text)} for container "
                        f"{go_string(name)} in pod {go_string(pod)}"
                    ),
                )
                for name, text in containers.items()
            }
            for pod, containers in entries.items()
        },
        pod_entries={
            pod: _cpuset(text, f"could not parse cpuset {text!r} of pod {pod!r}")
            for pod, text in pods.items()
        },
    )


def decode_cpu_manager_state(raw: bytes | str) -> DecodedCPUState:
    """Read a ``cpu_manager_state`` file the way a 1.37 kubelet does (V4, then V3, then V2)."""
    obj = _json_object(raw, "could not restore state from checkpoint")
    if _has(obj, "data") or _has(obj, "dataChecksum"):
        return DecodedCPUState(_decode_cpu_v4(obj), "v4")
    policy, default, entries = _raw_cpu_state(obj)
    stored = go_field(obj, "checksum")
    pod_texts = _raw_pod_entries(obj)
    pods = {
        p: _cpuset(t, f"could not parse cpuset {t!r} of pod {p!r}") for p, t in pod_texts.items()
    }
    for name in (V3_CPU_TYPE, LEGACY_CPU_TYPE):
        text = cpu_hash_text(policy, default, entries, pods, type_name=name)
        if stored == fnv1a_32(text.encode("utf-8")):
            return DecodedCPUState(_build_cpu_state(policy, default, entries, pod_texts), "v3")
    v2_sum = fnv1a_32(cpu_hash_text(policy, default, entries).encode("utf-8"))
    if not pods and stored in (0, v2_sum):
        return DecodedCPUState(_build_cpu_state(policy, default, entries, {}), "v2")
    raise KubeletCheckpointError("could not restore state from checkpoint: checkpoint is corrupted")


def _decode_cpu_v4(obj: Mapping[str, Any]) -> CPUManagerState:
    prefix = "could not restore state from checkpoint: could not load v4 checkpoint"
    data = go_field(obj, "data")
    if data is None:
        raise KubeletCheckpointError(
            f"{prefix}: failed to deserialize cpu manager checkpoint data: "
            "unexpected end of JSON input"
        )
    if not isinstance(data, str):
        raise KubeletCheckpointError(f"{prefix}: data {data!r} is not a string")
    if go_field(obj, "dataChecksum") != string_checksum(data):
        raise KubeletCheckpointError(f"{prefix}: checkpoint is corrupted")
    inner = _json_object(data, f"{prefix}: failed to deserialize cpu manager checkpoint data")
    policy, default, entries = _raw_cpu_state(inner)
    return _build_cpu_state(policy, default, entries, _raw_pod_entries(inner))


def _decode_blocks(value: Any, where: str) -> tuple[MemoryBlock, ...]:
    if not isinstance(value, list):
        raise KubeletCheckpointError(f"json: cannot unmarshal {where}: {value!r} is not a list")
    blocks = []
    for item in value:
        if not isinstance(item, dict):
            raise KubeletCheckpointError(f"json: cannot unmarshal {where}: block {item!r}")
        numa = go_field(item, "numaAffinity") or []
        if not isinstance(numa, list) or not all(
            isinstance(n, int) and not isinstance(n, bool) for n in numa
        ):
            raise KubeletCheckpointError(f"json: cannot unmarshal {where}: numaAffinity {numa!r}")
        blocks.append(MemoryBlock(tuple(numa), _str_field(item, "type"), _int_field(item, "size")))
    return tuple(blocks)


def _decode_memory_body(obj: Mapping[str, Any]) -> MemoryManagerState:
    machine: dict[int, NUMANodeState] = {}
    for key, node in _dict_field(obj, "machineState").items():
        try:
            numa = int(key)
        except ValueError as exc:
            raise KubeletCheckpointError(
                f"json: cannot unmarshal machineState key {key!r} into int"
            ) from exc
        if not isinstance(node, dict):
            raise KubeletCheckpointError(f"json: cannot unmarshal machineState[{key}]: {node!r}")
        tables = {}
        for name, t in _dict_field(node, "memoryMap").items():
            if not isinstance(t, dict):
                raise KubeletCheckpointError(f"json: cannot unmarshal memoryMap[{name!r}]: {t!r}")
            tables[name] = MemoryTable(
                _int_field(t, "total"),
                _int_field(t, "systemReserved"),
                _int_field(t, "allocatable"),
                _int_field(t, "reserved"),
                _int_field(t, "free"),
            )
        cells = go_field(node, "cells") or []
        if not isinstance(cells, list) or not all(isinstance(c, int) for c in cells):
            raise KubeletCheckpointError(f"json: cannot unmarshal cells {cells!r}")
        machine[numa] = NUMANodeState(_int_field(node, "numberOfAssignments"), tables, tuple(cells))
    entries: dict[str, dict[str, tuple[MemoryBlock, ...]]] = {}
    for pod, containers in _dict_field(obj, "entries").items():
        if not isinstance(containers, dict):
            raise KubeletCheckpointError(f"json: cannot unmarshal entries[{pod!r}]")
        entries[pod] = {
            name: _decode_blocks(blocks, f"entries[{pod!r}][{name!r}]")
            for name, blocks in containers.items()
        }
    pod_entries = {}
    for pod, entry in _dict_field(obj, "podEntries").items():
        if not isinstance(entry, dict):
            raise KubeletCheckpointError(f"json: cannot unmarshal podEntries[{pod!r}]")
        pod_entries[pod] = _decode_blocks(
            go_field(entry, "memoryBlocks") or [], f"podEntries[{pod!r}]"
        )
    return MemoryManagerState(_str_field(obj, "policyName"), machine, entries, pod_entries)


def decode_memory_manager_state(raw: bytes | str) -> DecodedMemoryState:
    """Read a ``memory_manager_state`` file: V3 (``data``) or V1 (checksum verified)."""
    prefix = "could not restore state from checkpoint"
    obj = _json_object(raw, prefix)
    if _has(obj, "data") or _has(obj, "dataChecksum"):
        data = go_field(obj, "data")
        if not isinstance(data, str):
            raise KubeletCheckpointError(
                f"{prefix}: could not load v3 checkpoint: data {data!r} is not a string"
            )
        if go_field(obj, "dataChecksum") != string_checksum(data):
            raise KubeletCheckpointError(
                f"{prefix}: could not load v3 checkpoint: checkpoint is corrupted"
            )
        inner = _json_object(data, f"{prefix}: could not load v3 checkpoint")
        return DecodedMemoryState(_decode_memory_body(inner), "v3")
    if _has(obj, "podEntries"):
        raise KubeletCheckpointError(
            f"{prefix}: memory checkpoint with podEntries and no data field (kubelet 1.36 V2) "
            "is not supported; only V1 and V3 are"
        )
    state = _decode_memory_body(obj)
    stored = go_field(obj, "checksum")
    if stored not in (0, memory_checkpoint_checksum(state)):
        raise KubeletCheckpointError(f"{prefix}: checkpoint is corrupted")
    return DecodedMemoryState(state, "v1")
