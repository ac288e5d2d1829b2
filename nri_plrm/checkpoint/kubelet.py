"""The kubelet's own state files: ``cpu_manager_state`` and ``memory_manager_state``.

Writers produce byte-exact kubelet files, so tools that read the kubelet's checkpoints can read
the plugin's decisions:

- CPU: ``v2`` (kubelet 1.18 to 1.35) or ``v4`` (1.37: the V2 fields inline, carrying the legacy
  V2 checksum, plus ``data`` = JSON of the full state including ``podEntries`` and
  ``dataChecksum``). A 1.36 kubelet or an older tool reads the V2 part and loses only the pod
  entries.
- Memory: ``v1`` (up to 1.35) or ``v3`` (1.37: V1 inline plus ``data``/``dataChecksum``).

Checksums are the kubelet's: FNV-1a 32 over go-spew's ``%#v`` rendering of the checkpoint struct
(``SortKeys``, no pointer addresses, no capacities), with the legacy type names
``CPUManagerCheckpoint`` / ``MemoryManagerCheckpoint`` for the inline parts, and over
``(string)<data>`` for ``dataChecksum``. JSON is Go's ``encoding/json``: declaration-order
fields, sorted map keys, ``<``, ``>``, ``&`` escaped.

:func:`check_kubelet_cpu_manager` reads the kubelet's own ``cpu_manager_state`` leniently to refuse
a node whose kubelet pins CPUs itself. The strict readers (what a 1.37 kubelet accepts) are test
support (``tests/support/kubelet_decode.py``): only the tests read kubelet files back.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from nri_plrm.base.cpuset import CPUSet
from nri_plrm.checkpoint.flusher import Flusher
from nri_plrm.checkpoint.kubelet_export import (
    CPU_MANAGER_STATE_FILE,
    MEMORY_MANAGER_STATE_FILE,
    policy_of,
    read_regular,
    write_owned,
)
from nri_plrm.engine.memory_state import MemoryTable
from nri_plrm.engine.spec import MemoryBlock
from nri_plrm.util.steps import Steps, finish

CPU_FORMATS = ("v2", "v4")
MEMORY_FORMATS = ("v1", "v3")

LEGACY_CPU_TYPE = "CPUManagerCheckpoint"
_LEGACY_MEMORY_TYPE = "MemoryManagerCheckpoint"


class KubeletCheckpointError(ValueError):
    """A kubelet checkpoint that a kubelet would refuse (message in the kubelet's words)."""


@dataclass(frozen=True)
class CPUManagerState:
    """The CPU manager's checkpointed state (``state.CPUManagerCheckpointData``)."""

    policy_name: str
    default_cpuset: CPUSet
    entries: Mapping[str, Mapping[str, CPUSet]] = field(default_factory=dict)
    """Pod UID -> container name -> cpuset."""
    pod_entries: Mapping[str, CPUSet] = field(default_factory=dict)
    """Pod UID -> the pod's whole allocation (pod-level pods only)."""


@dataclass(frozen=True)
class NUMANodeState:
    """One NUMA node of the memory manager's machine state (``state.NUMANodeState``)."""

    number_of_assignments: int
    memory_map: Mapping[str, MemoryTable]
    cells: tuple[int, ...]


@dataclass(frozen=True)
class MemoryManagerState:
    """The memory manager's checkpointed state (``state.MemoryManagerCheckpointData``)."""

    policy_name: str
    machine_state: Mapping[int, NUMANodeState]
    entries: Mapping[str, Mapping[str, Sequence[MemoryBlock]]] = field(default_factory=dict)
    pod_entries: Mapping[str, Sequence[MemoryBlock]] = field(default_factory=dict)


# --- checksum primitives -------------------------------------------------------------------


FNV_OFFSET = 0x811C9DC5
FNV_STEP = 8192
"""Bytes hashed per step of :func:`_checksum_steps`."""


def fnv1a_32(data: bytes | memoryview, h: int = FNV_OFFSET) -> int:
    """32-bit FNV-1a of ``data`` (``h``: the hash of what came before it)."""
    for byte in data:
        h = ((h ^ byte) * 0x01000193) & 0xFFFFFFFF
    return h


def _checksum_steps(text: str) -> Steps[int]:
    """FNV-1a 32 of ``text`` (UTF-8), a step every ``FNV_STEP`` bytes."""
    data = memoryview(text.encode("utf-8"))
    h = FNV_OFFSET
    for start in range(0, len(data), FNV_STEP):
        h = fnv1a_32(data[start : start + FNV_STEP], h)
        yield
    return h


def string_checksum(text: str) -> int:
    """The kubelet's ``checksum.New(text)`` for a string: FNV-1a 32 of ``(string)<text>``."""
    return finish(_checksum_steps("(string)" + text))


def _spew_map(items: Iterable[tuple[str, str]]) -> str:
    return "map[" + " ".join(f"{k}:{v}" for k, v in items) + "]"


def _spew_cpuset(cpus: CPUSet) -> str:
    elems = _spew_map((str(c), "{}") for c in cpus.sorted())
    return "(cpuset.CPUSet){elems:(map[int]struct {})" + elems + "}"


def _spew_entries(entries: Mapping[str, Mapping[str, str]] | None) -> str:
    if entries is None:
        return "<nil>"
    return _spew_map((pod, _spew_map(sorted(entries[pod].items()))) for pod in sorted(entries))


def _entry_texts(entries: Mapping[str, Mapping[str, CPUSet]]) -> dict[str, dict[str, str]]:
    return {pod: {n: str(c) for n, c in cs.items()} for pod, cs in entries.items()}


def cpu_hash_text(
    policy: str,
    default_cpuset: str,
    entries: Mapping[str, Mapping[str, str]] | None,
    pod_entries: Mapping[str, CPUSet] | None = None,
    *,
    type_name: str = LEGACY_CPU_TYPE,
) -> str:
    """go-spew ``%#v`` text of the V2 struct, or of the V3 struct when ``pod_entries`` is given.

    The cpuset fields are strings in the struct, so they are hashed exactly as stored. ``entries``
    None renders Go's nil map (``<nil>``); the kubelet itself always hashes an allocated map.
    """
    text = (
        f"(*state.{type_name}){{PolicyName:(string){policy} "
        f"DefaultCPUSet:(string){default_cpuset} "
        f"Entries:(map[string]map[string]string){_spew_entries(entries)} "
    )
    if pod_entries is not None:
        pods = _spew_map(
            (pod, "{CPUSet:" + _spew_cpuset(pod_entries[pod]) + "}") for pod in sorted(pod_entries)
        )
        text += f"PodEntries:(state.PodCPUAssignments){pods} "
    return text + "Checksum:(checksum.Checksum)0}"


def cpu_checkpoint_checksum(
    state: CPUManagerState, *, type_name: str = LEGACY_CPU_TYPE, with_pod_entries: bool = False
) -> int:
    """The kubelet's checksum of a V2 (legacy type name) or V3 CPU checkpoint of ``state``."""
    text = cpu_hash_text(
        state.policy_name,
        str(state.default_cpuset),
        _entry_texts(state.entries),
        state.pod_entries if with_pod_entries else None,
        type_name=type_name,
    )
    return finish(_checksum_steps(text))


def _spew_blocks(blocks: Sequence[MemoryBlock]) -> str:
    return (
        "["
        + " ".join(
            "{NUMAAffinity:([]int)["
            + " ".join(str(n) for n in b.numa_nodes)
            + f"] Type:(v1.ResourceName){b.resource} Size:(uint64){b.size}}}"
            for b in blocks
        )
        + "]"
    )


def memory_checkpoint_hash_text(state: MemoryManagerState) -> str:
    """go-spew ``%#v`` text of the V1 memory checkpoint struct (legacy type name)."""
    nodes = []
    for numa in sorted(state.machine_state):
        node = state.machine_state[numa]
        tables = _spew_map(
            (
                name,
                f"<*>{{TotalMemSize:(uint64){t.total} SystemReserved:(uint64){t.system_reserved} "
                f"Allocatable:(uint64){t.allocatable} Reserved:(uint64){t.reserved} "
                f"Free:(uint64){t.free}}}",
            )
            for name, t in sorted(node.memory_map.items())
        )
        cells = "[" + " ".join(str(c) for c in node.cells) + "]"
        nodes.append(
            (
                str(numa),
                f"<*>{{NumberOfAssignments:(int){node.number_of_assignments} "
                f"MemoryMap:(map[v1.ResourceName]*state.MemoryTable){tables} "
                f"Cells:([]int){cells}}}",
            )
        )
    entries = _spew_map(
        (pod, _spew_map((name, _spew_blocks(b)) for name, b in sorted(state.entries[pod].items())))
        for pod in sorted(state.entries)
    )
    return (
        f"(*state.{_LEGACY_MEMORY_TYPE}){{PolicyName:(string){state.policy_name} "
        f"MachineState:(state.NUMANodeMap){_spew_map(nodes)} "
        f"Entries:(state.ContainerMemoryAssignments){entries} Checksum:(checksum.Checksum)0}}"
    )


def memory_checkpoint_checksum(state: MemoryManagerState) -> int:
    """The kubelet's checksum of a V1 memory checkpoint (also the V3 inline checksum)."""
    return finish(_checksum_steps(memory_checkpoint_hash_text(state)))


# --- Go encoding/json ------------------------------------------------------------------------

_GO_ESCAPES: dict[int, str] = {
    **{c: f"\\u{c:04x}" for c in (*range(0x20), ord("<"), ord(">"), ord("&"), 0x2028, 0x2029)},
    ord('"'): '\\"',
    ord("\\"): "\\\\",
    ord("\n"): "\\n",
    ord("\r"): "\\r",
    ord("\t"): "\\t",
}
"""What Go's ``encoding/json`` writes for each character it escapes (``str.translate`` table)."""
_GO_SPECIAL = re.compile(r'["\\\x00-\x1f<>&\u2028\u2029]')
"""Those characters (every other one is written as it is)."""


_GO_ONLY = (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"))
"""Characters Go escapes and Python's ``json`` does not (besides U+2028 and U+2029)."""


def go_string(s: str) -> str:
    """Go ``json.Marshal`` of a string."""
    if _GO_SPECIAL.search(s) is None:
        return f'"{s}"'
    if "\b" in s or "\f" in s or "\u2028" in s or "\u2029" in s:
        return f'"{s.translate(_GO_ESCAPES)}"'
    # Python's C encoder escapes the rest as Go does (a large ``data`` text is mostly quotes)
    out = json.dumps(s, ensure_ascii=False)
    for ch, escaped in _GO_ONLY:
        if ch in out:
            out = out.replace(ch, escaped)
    return out


def _go_json(value: Any) -> str:
    """Go ``json.Marshal`` of plain values; dicts keep their insertion order (fields in
    declaration order); callers sort map keys themselves."""
    if isinstance(value, str):
        return go_string(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, dict):
        return "{" + ",".join(f"{go_string(k)}:{_go_json(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_go_json(v) for v in value) + "]"
    raise TypeError(f"go json: unsupported value {value!r}")


JSON_STEP_DEPTH = 3
"""Objects and arrays down to this depth are encoded a member per step."""


def _go_json_steps(value: Any, depth: int = JSON_STEP_DEPTH) -> Steps[str]:
    """:func:`_go_json` of ``value``, a step after each member down to ``depth`` levels."""
    if depth > 0 and isinstance(value, dict):
        members = yield from _members_steps(value, depth)
        return "{" + ",".join(members) + "}"
    if depth > 0 and isinstance(value, (list, tuple)):
        items = []
        for item in value:
            items.append((yield from _go_json_steps(item, depth - 1)))
            yield
        return "[" + ",".join(items) + "]"
    return _go_json(value)


def _members_steps(fields: Mapping[str, Any], depth: int = JSON_STEP_DEPTH) -> Steps[list[str]]:
    """The ``"key":value`` members of a JSON object, a step after each."""
    members = []
    for key, value in fields.items():
        members.append(f"{go_string(key)}:{(yield from _go_json_steps(value, depth - 1))}")
        yield
    return members


def _entries_json(entries: Mapping[str, Mapping[str, CPUSet]]) -> dict[str, Any]:
    return {
        pod: {name: str(cpus) for name, cpus in sorted(entries[pod].items())}
        for pod in sorted(entries)
    }


def _blocks_json(blocks: Sequence[MemoryBlock]) -> list[dict[str, Any]]:
    return [
        {"numaAffinity": list(b.numa_nodes), "type": b.resource, "size": b.size} for b in blocks
    ]


def _machine_state_json(machine: Mapping[int, NUMANodeState]) -> dict[str, Any]:
    return {
        str(numa): {
            "numberOfAssignments": machine[numa].number_of_assignments,
            "memoryMap": {
                name: t.to_dict() for name, t in sorted(machine[numa].memory_map.items())
            },
            "cells": list(machine[numa].cells),
        }
        for numa in sorted(machine, key=str)
    }


def _memory_entries_json(
    entries: Mapping[str, Mapping[str, Sequence[MemoryBlock]]],
) -> dict[str, Any]:
    return {
        pod: {name: _blocks_json(b) for name, b in sorted(entries[pod].items())}
        for pod in sorted(entries)
    }


# --- writers ---------------------------------------------------------------------------------


def encode_cpu_manager_state(state: CPUManagerState, fmt: str = "v4") -> bytes:
    """The bytes of a kubelet ``cpu_manager_state`` file in format ``v2`` or ``v4``."""
    return finish(cpu_manager_state_steps(state, fmt))


def cpu_manager_state_steps(state: CPUManagerState, fmt: str = "v4") -> Steps[bytes]:
    """:func:`encode_cpu_manager_state` in steps (see ``nri_plrm.util.steps``)."""
    if fmt not in CPU_FORMATS:
        raise ValueError(f"cpu manager checkpoint format {fmt!r}: must be one of {CPU_FORMATS}")
    fields: dict[str, Any] = {
        "policyName": state.policy_name,
        "defaultCpuSet": str(state.default_cpuset),
    }
    if state.entries:
        fields["entries"] = _entries_json(state.entries)
    pod_entries = {
        pod: ({"cpuSet": str(cpus)} if cpus else {})
        for pod, cpus in sorted(state.pod_entries.items())
    }
    text = cpu_hash_text(state.policy_name, str(state.default_cpuset), _entry_texts(state.entries))
    yield
    checksum = yield from _checksum_steps(text)
    return (yield from _checkpoint_steps(fields, checksum, fmt == "v4", pod_entries))


def encode_memory_manager_state(state: MemoryManagerState, fmt: str = "v3") -> bytes:
    """The bytes of a kubelet ``memory_manager_state`` file in format ``v1`` or ``v3``."""
    return finish(memory_manager_state_steps(state, fmt))


def memory_manager_state_steps(state: MemoryManagerState, fmt: str = "v3") -> Steps[bytes]:
    """:func:`encode_memory_manager_state` in steps (see ``nri_plrm.util.steps``)."""
    if fmt not in MEMORY_FORMATS:
        raise ValueError(
            f"memory manager checkpoint format {fmt!r}: must be one of {MEMORY_FORMATS}"
        )
    fields: dict[str, Any] = {
        "policyName": state.policy_name,
        "machineState": _machine_state_json(state.machine_state),
    }
    if state.entries:
        fields["entries"] = _memory_entries_json(state.entries)
    pod_entries = {
        pod: {"memoryBlocks": _blocks_json(blocks)}
        for pod, blocks in sorted(state.pod_entries.items())
    }
    yield
    text = memory_checkpoint_hash_text(state)
    yield
    checksum = yield from _checksum_steps(text)
    return (yield from _checkpoint_steps(fields, checksum, fmt == "v3", pod_entries))


def _checkpoint_steps(
    fields: dict[str, Any], checksum: int, with_data: bool, pod_entries: dict[str, Any]
) -> Steps[bytes]:
    """The legacy ``fields`` with their ``checksum``; ``with_data`` (the 1.37 formats) adds
    ``data`` (the fields plus any ``podEntries``, as JSON text) and its ``dataChecksum``. The
    fields are encoded once, for both."""
    members = yield from _members_steps(fields)
    doc = [*members, f'"checksum":{checksum}']
    if with_data:
        data = list(members)
        if pod_entries:
            data.append('"podEntries":' + (yield from _go_json_steps(pod_entries)))
        text = "{" + ",".join(data) + "}"
        data_checksum = yield from _checksum_steps("(string)" + text)
        doc += [f'"data":{go_string(text)}', f'"dataChecksum":{data_checksum}']
    return ("{" + ",".join(doc) + "}").encode("utf-8")


def kubelet_cpu_policy(path: str | os.PathLike[str]) -> str | None:
    """The policy named in a kubelet ``cpu_manager_state`` file, or None when there is none.

    Lenient on purpose (no checksum check): it answers "is a kubelet CPU manager active here?".
    Reads ``data.policyName`` of V4 files and the top-level ``policyName`` otherwise. Raises
    OSError when the path is not a regular file (a FIFO there is never waited on).
    """
    raw = read_regular(path)
    return None if raw is None else policy_of(raw)


def check_kubelet_cpu_manager(path: str | os.PathLike[str]) -> None:
    """Raise KubeletCheckpointError when the kubelet's CPU manager runs the ``static`` policy.

    Two managers pinning the same CPUs would undo each other's work, so the plugin refuses to
    start; the kubelet on a plugin node must run with ``cpuManagerPolicy: none``.
    """
    policy = kubelet_cpu_policy(path)
    if policy == "static":
        raise KubeletCheckpointError(
            f"kubelet checkpoint {path}: policyName 'static': the kubelet's CPU manager is "
            "pinning CPUs on this node; set cpuManagerPolicy: none, memoryManagerPolicy: None and "
            "topologyManagerPolicy: none in the kubelet configuration, drain the node, delete "
            "the kubelet's cpu_manager_state and memory_manager_state, restart the kubelet, "
            "then start nri-plrm"
        )


# --- from the engine ---------------------------------------------------------------------------


class CPUManagerView(Protocol):
    """What the exporter reads of ``nri_plrm.engine.cpu_manager.CPUManager``."""

    @property
    def default_cpuset(self) -> CPUSet: ...
    def entries(self) -> dict[str, dict[str, CPUSet]]: ...
    def pod_entries(self) -> dict[str, CPUSet]: ...


class MemoryManagerView(Protocol):
    """What the exporter reads of ``nri_plrm.engine.memory_manager.MemoryManager``.

    ``machine_state`` values need ``number_of_assignments``, ``cells`` and ``memory_map`` (rows
    with ``total``, ``system_reserved``, ``allocatable``, ``reserved``, ``free``).
    """

    @property
    def machine_state(self) -> Mapping[int, Any]: ...

    def pods(self) -> tuple[str, ...]: ...
    def containers(self, pod_uid: str) -> tuple[str, ...]: ...
    def container_blocks(self, pod_uid: str, name: str) -> tuple[MemoryBlock, ...] | None: ...
    def pod_blocks(self, pod_uid: str) -> tuple[MemoryBlock, ...] | None: ...


def cpu_state_from_manager(manager: CPUManagerView, policy: str = "static") -> CPUManagerState:
    """The kubelet-format view of the engine's CPU manager."""
    return CPUManagerState(policy, manager.default_cpuset, manager.entries(), manager.pod_entries())


def memory_state_from_manager(
    manager: MemoryManagerView, policy: str = "Static"
) -> MemoryManagerState:
    """The kubelet-format view of the engine's memory manager."""
    machine = {
        numa: NUMANodeState(
            node.number_of_assignments,
            {
                name: MemoryTable(t.total, t.system_reserved, t.allocatable, t.reserved, t.free)
                for name, t in node.memory_map.items()
            },
            tuple(node.cells),
        )
        for numa, node in manager.machine_state.items()
    }
    entries: dict[str, dict[str, tuple[MemoryBlock, ...]]] = {}
    pod_entries: dict[str, tuple[MemoryBlock, ...]] = {}
    for uid in manager.pods():
        for name in manager.containers(uid):
            blocks = manager.container_blocks(uid, name)
            if blocks is not None:
                entries.setdefault(uid, {})[name] = blocks
        pod_blocks = manager.pod_blocks(uid)
        if pod_blocks is not None:
            pod_entries[uid] = pod_blocks
    return MemoryManagerState(policy, machine, entries, pod_entries)


# --- export to files -------------------------------------------------------------------------


def write_kubelet_state(
    directory: str | os.PathLike[str],
    cpu: CPUManagerState | None,
    memory: MemoryManagerState | None,
    *,
    cpu_format: str = "v4",
    memory_format: str = "v3",
    flusher: Flusher | None = None,
) -> list[Path]:
    """Write ``cpu_manager_state`` / ``memory_manager_state`` into ``directory`` atomically
    (with ``flusher``, synced in its background thread rather than before returning).

    Files are mode 0644 (readable by monitoring tools, as the kubelet's are). A file the plugin
    did not write is never replaced (ForeignFileError, see ``kubelet_export``): a kubelet running
    with ``cpuManagerPolicy: none`` keeps its own ``cpu_manager_state`` in its root directory.
    Returns the paths written.
    """
    files = finish(kubelet_files_steps(cpu, memory, cpu_format, memory_format))
    return write_owned(directory, files, 0o644, flusher=flusher)


def kubelet_files_steps(
    cpu: CPUManagerState | None,
    memory: MemoryManagerState | None,
    cpu_format: str = "v4",
    memory_format: str = "v3",
) -> Steps[dict[str, bytes]]:
    """The contents of the kubelet-format files, by name, in steps (see ``nri_plrm.util.steps``)."""
    files = {}
    if cpu is not None:
        files[CPU_MANAGER_STATE_FILE] = yield from cpu_manager_state_steps(cpu, cpu_format)
    if memory is not None:
        files[MEMORY_MANAGER_STATE_FILE] = yield from memory_manager_state_steps(
            memory, memory_format
        )
    return files
