"""What ``nri-plrm state`` shows: the PodResources view of the checkpoint or of a live plugin.

Both sources become the same JSON-able shape: ``{"source", "path", "pods": [...],
"allocatable": {...}}`` where each pod carries the PodResources fields (pod-level ``cpu_ids`` and
``memory``; containers with exclusive ``cpu_ids``, ``memory`` and ``devices``) and, from the
checkpoint, each container's assignment type and the ``cpus``/``mems`` the plugin writes. The
checkpoint and the decision journal after it are read without side effects: nothing is moved
aside, locked or rewritten.
"""

from __future__ import annotations

import argparse
import os
from typing import Any, TextIO

from nri_plrm.base.cpuset import CPUSet
from nri_plrm.base.quantity import format_bytes_human
from nri_plrm.checkpoint.journal import DecisionJournal
from nri_plrm.checkpoint.store import (
    CURRENT_VERSION,
    STATE_FILE,
    CheckpointError,
    CheckpointStore,
)
from nri_plrm.cli.inputs import EXIT_OK, CommandError, load, machine
from nri_plrm.cli.render import count, emit_json, render_table
from nri_plrm.config.settings import Config
from nri_plrm.engine.facade import Engine
from nri_plrm.ledger import NodeLedger
from nri_plrm.ledger.view import PodResourcesView, reported_containers
from nri_plrm.podresources import report
from nri_plrm.podresources.client import PodResourcesClient
from nri_plrm.proto import podresources_api_pb2 as pb
from nri_plrm.topology.model import Topology


class StateError(Exception):
    """The state cannot be shown (names the file or socket and the cause)."""


def read_checkpoint(directory: str) -> dict[str, Any]:
    """The checkpoint's verified ``data``, read-only; raises StateError naming the problem."""
    path = os.path.join(directory, STATE_FILE)
    try:
        found = CheckpointStore(directory).read_only()
    except CheckpointError as exc:
        raise StateError(str(exc)) from exc
    if found is None:
        raise StateError(f"{path}: no checkpoint (the plugin has not written state yet)")
    version, data = found
    if version < CURRENT_VERSION:
        raise StateError(
            f"{path}: version {version} is older than {CURRENT_VERSION}; the running plugin "
            "migrates it on its next write"
        )
    return data


def from_checkpoint(directory: str, topology: Topology, config: Config) -> dict[str, Any]:
    """The checkpoint in ``directory`` and the journal after it, restored into a ledger that
    writes nothing, as a view."""
    data = read_checkpoint(directory)
    ledger = NodeLedger(Engine(topology, config.engine_config()))
    try:
        ledger.restore(data)
    except (KeyError, TypeError, ValueError) as exc:
        raise StateError(
            f"{os.path.join(directory, STATE_FILE)}: does not fit this machine and "
            f"configuration: {exc}"
        ) from exc
    try:
        generation, records, damaged = DecisionJournal(directory).read(quarantine=False)
    except CheckpointError as exc:  # a journal of a newer format
        raise StateError(str(exc)) from exc
    if damaged is not None:
        raise StateError(f"{damaged}; the running plugin sets it aside and re-synchronizes")
    ledger.replay_journal(generation, records)
    return from_view(ledger, "checkpoint", os.path.join(directory, STATE_FILE))


def from_view(view: PodResourcesView, source: str, path: str) -> dict[str, Any]:
    """A view as the ``state`` shape, with each container's assignment."""
    listed = report.list_response(view)
    pods = []
    for pod, message in zip(view.pods(), listed.pod_resources, strict=True):
        entry = _pod(message)
        entry["uid"] = pod.uid
        for container, shown in zip(reported_containers(pod), entry["containers"], strict=True):
            a = container.assignment
            shown["assignment"] = a.assignment.value if a else None
            shown["cpus"] = str(a.cpus) if a else None
            shown["mems"] = str(a.mems) if a else None
        pods.append(entry)
    return {
        "source": source,
        "path": path,
        "pods": pods,
        "allocatable": _allocatable(report.allocatable_response(view)),
    }


def from_socket(path: str) -> dict[str, Any]:
    """A running plugin's (or kubelet's) PodResources endpoint as the ``state`` shape."""
    check = (
        "is the plugin running (systemctl status nri-plrm) with [pod_resources] enabled, "
        "and is this its [pod_resources] socket?"
    )
    if not os.path.exists(path):
        raise StateError(f"PodResources socket {path} does not exist: {check}")
    client = PodResourcesClient(path, timeout=5.0, log_failures=False)
    try:
        listed = client.list()
        allocatable = client.allocatable() if listed is not None else None
    finally:
        client.close()
    if listed is None or allocatable is None:
        code, details = client.last_error or ("UNKNOWN", "no reply")
        details = details.rsplit("error: ", 1)[-1]  # gRPC's innermost cause
        raise StateError(f"PodResources socket {path} does not answer ({code}: {details}); {check}")
    return {
        "source": "socket",
        "path": path,
        "pods": [_pod(p) for p in listed.pod_resources],
        "allocatable": _allocatable(allocatable),
    }


def _memory(blocks: Any) -> list[dict[str, Any]]:
    return [
        {"memory_type": m.memory_type, "size": m.size, "numa": [n.ID for n in m.topology.nodes]}
        for m in blocks
    ]


def _pod(message: pb.PodResources) -> dict[str, Any]:
    return {
        "namespace": message.namespace,
        "name": message.name,
        "cpu_ids": list(message.cpu_ids),
        "memory": _memory(message.memory),
        "containers": [
            {
                "name": c.name,
                "assignment": None,
                "cpus": None,
                "mems": None,
                "cpu_ids": list(c.cpu_ids),
                "memory": _memory(c.memory),
                "devices": [
                    {"resource_name": d.resource_name, "device_ids": list(d.device_ids)}
                    for d in c.devices
                ],
            }
            for c in message.containers
        ],
    }


def _allocatable(message: pb.AllocatableResourcesResponse) -> dict[str, Any]:
    return {"cpu_ids": list(message.cpu_ids), "memory": _memory(message.memory)}


def _ids(values: list[int]) -> str:
    return str(CPUSet(values)) or "-"


def _mem_text(blocks: list[dict[str, Any]]) -> str:
    return (
        " ".join(
            f"{b['memory_type']}={format_bytes_human(b['size'])}@{','.join(map(str, b['numa']))}"
            for b in blocks
        )
        or "-"
    )


def table(data: dict[str, Any]) -> str:
    """The ``state`` shape as a readable table."""
    rows: list[list[object]] = []
    for pod in data["pods"]:
        label = f"{pod['namespace']}/{pod['name']}"
        rows.append([label, "(pod)", "", "", "", _ids(pod["cpu_ids"]), _mem_text(pod["memory"])])
        for c in pod["containers"]:
            rows.append(
                [
                    "",
                    c["name"],
                    c["assignment"] or "-",
                    c["cpus"] or "-",
                    c["mems"] or "-",
                    _ids(c["cpu_ids"]),
                    _mem_text(c["memory"]),
                ]
            )
    head = f"source: {data['source']} {data['path']}\n"
    alloc = data["allocatable"]
    cpus = alloc["cpu_ids"]
    tail = (
        f"\nallocatable: {count(len(cpus), 'CPU')} (ids {_ids(cpus)}); "
        f"memory {_mem_text(alloc['memory'])}\n"
    )
    body = render_table(
        ["POD", "CONTAINER", "ASSIGNMENT", "CPUS", "MEMS", "EXCLUSIVE CPUS", "MEMORY"], rows
    )
    return head + body + tail


def cmd_state(args: argparse.Namespace, out: TextIO) -> int:
    """``state``: the checkpoint (read-only) or a running plugin's PodResources view."""
    config = load(args.config)
    try:
        if args.socket is not None:
            data = from_socket(args.socket or config.pod_resources.socket)
        else:
            topology = machine(args, config, None)
            data = from_checkpoint(args.state_dir or config.state.dir, topology, config)
    except StateError as exc:
        raise CommandError(str(exc)) from exc
    if args.output == "json":
        emit_json(out, data)
    else:
        out.write(table(data))
    return EXIT_OK
