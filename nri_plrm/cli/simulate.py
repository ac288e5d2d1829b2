"""``nri-plrm simulate``: the dry run through the daemon's own code path.

For each pod, in the order given, the kubelet translation builds the NRI messages containerd
would send (``nri_plrm.translate.pod_to_cri``), and the real
:class:`nri_plrm.plugin.handlers.Plugin`
handlers answer them against an in-memory runtime:

1. ``RunPodSandbox``: the plugin admits the pod (it has the manifests through a
   ``StaticPodSpecSource``, so it decides on the whole pod, exactly like the kubelet) or
   rejects it with the kubelet's reason and message; a rejected pod creates no containers.
2. ``CreateContainer`` for each container in the kubelet's order (init containers, sidecars,
   app containers): the adjustment is applied to the new container, the ``update`` entries to
   the other containers, as containerd does. A regular init container then "completes": the
   runtime reports it stopped (``StopContainer``) before the next container is created.
3. Unsolicited ``UpdateContainers`` are applied the same way.

The result shows what each container would run with (cpus, mems, CFS quota as applied), the
assignment type, the pod-level CPUs and memory as PodResources reports them (pod scope only),
rejections, the node shared pool, and what each NUMA node has left (capacity, allocatable and
available CPUs, memory and hugepages: :func:`nri_plrm.engine.availability.free_per_numa`, the
numbers the NodeResourceTopology export publishes). ``to_json()`` has the fixed shape of the
CLI's ``--output json`` (``free_per_numa`` is an addition); ``to_table()`` is the human view.

Scope and policy come from the config: pods written for container scope (e.g.
``examples/container-scope-mixed.yaml``) need a container-scope config
(``--config examples/container-scope.toml``); with the default pod-scope config they are
simulated in pod scope, as a kubelet configured that way would.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TextIO

from nri_plrm.base.cpuset import CPUSet
from nri_plrm.base.quantity import format_bytes, memory_bytes
from nri_plrm.cli.inputs import EXIT_OK, EXIT_REJECTED, UsageError, load, machine
from nri_plrm.cli.render import count, emit_json, render_table
from nri_plrm.cli.simulate_devices import KUBELET_POLICY_KEY, DeviceChoice, devices_cause
from nri_plrm.cli.simulate_resize import (
    ResizeOutcome,
    ResizeRequest,
    parse_resize,
    resized_pod,
    run_resize,
)
from nri_plrm.config.settings import Config, ConfigError, validate_for_topology
from nri_plrm.engine.availability import (
    NumaAvailability,
    free_per_numa,
    free_per_numa_to_dict,
)
from nri_plrm.engine.explain import explain_rejection
from nri_plrm.engine.facade import Engine
from nri_plrm.engine.spec import (
    MEMORY,
    AdmissionError,
    ContainerKind,
    ContainerSpec,
    Device,
    PodSpec,
)
from nri_plrm.ledger import NodeLedger
from nri_plrm.nri.handlers import NRIError
from nri_plrm.plugin.handlers import Plugin
from nri_plrm.podsource.base import StaticPodSpecSource
from nri_plrm.proto import nri_api_pb2 as api
from nri_plrm.topology.model import Topology
from nri_plrm.topology.synthetic import DEFAULT_SPEC, describe, with_memory
from nri_plrm.translate.manifest_to_pod import ManifestError, load_manifests
from nri_plrm.translate.pod_to_cri import (
    creation_order,
    machine_page_sizes,
    nri_container,
    nri_pod_sandbox,
)

DEFAULT_MEMORY_PER_NUMA = "16Gi"
"""Memory given to each NUMA node of a machine that names none (the kubelet's test machines),
as on the bundled default machine; the default config's reserved 512Mi then fits."""

REJECTED_AT_CREATE = "CreateContainerError"
"""Reason shown when the runtime refused a container after the pod was admitted."""


@dataclass(frozen=True)
class SimulatedContainer:
    """One container as the runtime would run it."""

    name: str
    kind: str
    """``init``, ``sidecar`` or ``app``."""
    assignment: str
    """``pod_exclusive``, ``pod_shared``, ``node_exclusive`` or ``node_shared``."""
    cpus: CPUSet
    mems: CPUSet
    cpu_quota: int | None
    """The CFS quota the container runs with (-1: disabled); None when none is set."""
    exited: bool = False
    """True for a regular init container that has completed."""
    devices: tuple[tuple[str, Device], ...] = ()
    """(resource, device) the kubelet allocated to the container (``--devices``)."""


@dataclass(frozen=True)
class SimulatedPod:
    """One pod: admitted or rejected (with the kubelet's reason and message)."""

    namespace: str
    name: str
    uid: str
    admitted: bool
    reason: str = ""
    message: str = ""
    explanation: str = ""
    """Why a rejected pod was rejected, in operator terms (``nri_plrm.engine.explain``)."""
    cpu_ids: CPUSet = field(default_factory=CPUSet)
    """Pod-level exclusive CPUs as PodResources reports them (pod scope, pod-level pods)."""
    memory: tuple[tuple[str, int, tuple[int, ...]], ...] = ()
    """Pod-level memory blocks: (memory type, bytes, NUMA nodes)."""
    containers: tuple[SimulatedContainer, ...] = ()


@dataclass(frozen=True)
class SimulationResult:
    """The outcome of a dry run."""

    topology: dict[str, Any]
    policy: str
    scope: str
    shared_pool: CPUSet
    pods: tuple[SimulatedPod, ...]
    free: tuple[NumaAvailability, ...] = ()
    """Capacity, allocatable and available resources per NUMA node after the pods."""
    resizes: tuple[ResizeOutcome, ...] = ()
    """``--resize`` requests, in order, performed or refused (the pods show the final state)."""

    def to_json(self) -> dict[str, Any]:
        """The ``--output json`` document (fixed shape; ``config``, ``free_per_numa`` and, with
        ``--resize``, ``resizes`` are additions)."""
        doc: dict[str, Any] = {
            "topology": self.topology,
            "config": {
                "topology_manager_policy": self.policy,
                "topology_manager_scope": self.scope,
            },
            "shared_pool": str(self.shared_pool),
            "pods": [
                {
                    "namespace": p.namespace,
                    "name": p.name,
                    "admitted": p.admitted,
                    "reason": p.reason,
                    "message": p.message,
                    "explanation": p.explanation,
                    "cpu_ids": p.cpu_ids.sorted(),
                    "memory": [
                        {"memory_type": t, "size": size, "numa": list(numa)}
                        for t, size, numa in p.memory
                    ],
                    "containers": [
                        {
                            "name": c.name,
                            "assignment": c.assignment,
                            "cpus": str(c.cpus),
                            "mems": str(c.mems),
                            "cpu_quota": c.cpu_quota,
                            **_devices_json(c),
                        }
                        for c in p.containers
                    ],
                }
                for p in self.pods
            ],
            "free_per_numa": free_per_numa_to_dict(self.free),
        }
        if self.resizes:
            doc["resizes"] = [r.to_json() for r in self.resizes]
        return doc

    def to_table(self) -> str:
        """A readable table: one line per container, rejections with reason and message."""
        topo = self.topology
        machine_line = ", ".join(
            count(int(topo.get(key, 0)), noun)
            for key, noun in (
                ("num_sockets", "socket"),
                ("num_numa_nodes", "NUMA node"),
                ("num_cores", "core"),
                ("num_cpus", "CPU"),
            )
        )
        lines = [
            f"machine: {machine_line}; topology manager {self.policy}, scope {self.scope}",
            "",
        ]
        header = ("POD", "CONTAINER", "KIND", "ASSIGNMENT", "CPUS", "MEMS", "QUOTA")
        rows: list[tuple[str, ...]] = []
        notes: list[str] = []
        for p in self.pods:
            label = f"{p.namespace}/{p.name}"
            if not p.admitted:
                rows.append((label, "-", "-", "REJECTED", "-", "-", "-"))
                notes.append(f"{label}: rejected: {p.reason}: {p.message}")
                if p.explanation:
                    notes.append(f"  cause: {p.explanation}")
                continue
            if p.reason:
                notes.append(f"{label}: {p.reason}: {p.message}")
            if p.cpu_ids:
                memory = ", ".join(
                    ("" if t == MEMORY else f"{t} ")
                    + f"{format_bytes(size)} on NUMA {','.join(map(str, numa))}"
                    for t, size, numa in p.memory
                )
                notes.append(
                    f"{label}: pod CPUs {p.cpu_ids}" + (f"; pod memory {memory}" if memory else "")
                )
            for c in p.containers:
                quota = "-" if c.cpu_quota is None else str(c.cpu_quota)
                kind = c.kind + (" (exited)" if c.exited else "")
                if c.devices:
                    held = ", ".join(f"{r} {d.id} ({_numa_text(d)})" for r, d in c.devices)
                    notes.append(f"{label}/{c.name}: devices {held}")
                rows.append(
                    (label, c.name, kind, c.assignment, str(c.cpus), str(c.mems) or "-", quota)
                )
        widths = [max(len(r[i]) for r in (header, *rows)) for i in range(len(header))]
        for r in (header, *rows):
            lines.append("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip())
        lines.append("")
        lines.extend(notes)
        if self.resizes:
            lines.append("resizes:")
            lines.extend("  " + line for r in self.resizes for line in r.to_lines())
        lines.append(f"node shared pool: {self.shared_pool}")
        return "\n".join(lines) + "\n" + self.free_table()

    def free_table(self) -> str:
        """What each NUMA node has left: one row per node and resource."""
        if not self.free:
            return ""
        rows = []
        for numa in self.free:
            for r in numa.resources:
                show = str if r.name == "cpu" else format_bytes
                rows.append(
                    (numa.node, r.name, show(r.capacity), show(r.allocatable), show(r.available))
                )
        header = ("NUMA", "RESOURCE", "CAPACITY", "ALLOCATABLE", "AVAILABLE")
        return "\nfree per NUMA node:\n" + render_table(header, rows)


@dataclass
class _RuntimeContainer:
    msg: api.Container
    cpus: str = ""
    mems: str = ""
    quota: int | None = None
    exited: bool = False


class InMemoryRuntime:
    """The containerd side: holds containers and applies the plugin's adjustments and updates."""

    def __init__(self) -> None:
        self.containers: dict[str, _RuntimeContainer] = {}

    def add(self, msg: api.Container) -> _RuntimeContainer:
        """Register a created container with the resources it was created with."""
        cpu = msg.linux.resources.cpu
        ctr = _RuntimeContainer(
            msg,
            cpus=cpu.cpus,
            mems=cpu.mems,
            quota=cpu.quota.value if cpu.HasField("quota") else None,
        )
        self.containers[msg.id] = ctr
        return ctr

    @staticmethod
    def apply(ctr: _RuntimeContainer, res: api.LinuxResources) -> None:
        """Apply resources as containerd does: empty strings and zero values change nothing."""
        if res.cpu.cpus:
            ctr.cpus = res.cpu.cpus
        if res.cpu.mems:
            ctr.mems = res.cpu.mems
        if res.cpu.HasField("quota") and res.cpu.quota.value != 0:
            ctr.quota = res.cpu.quota.value

    def apply_updates(self, updates: Iterable[api.ContainerUpdate]) -> None:
        """Apply ``ContainerUpdate`` entries; unknown ids are skipped, as containerd does."""
        for update in updates:
            ctr = self.containers.get(update.container_id)
            if ctr is not None:
                self.apply(ctr, update.linux.resources)

    async def update_containers(self, updates: list[api.ContainerUpdate]) -> list[Any]:
        """The plugin's unsolicited ``UpdateContainers``; nothing fails in memory."""
        self.apply_updates(updates)
        return []


def simulate(
    manifest_paths: Sequence[str | Path],
    topology: Topology,
    config: Config | None = None,
    resizes: Sequence[ResizeRequest] = (),
    devices: DeviceChoice | None = None,
) -> SimulationResult:
    """Dry-run the pods of the manifests on ``topology`` with ``config`` (defaults if None),
    then the ``resizes`` in order; ``devices``: the node's devices, which the kubelet hands out
    at each pod's admission.

    Raises ``nri_plrm.translate.manifest_to_pod.ManifestError`` for bad manifests,
    ``nri_plrm.config.settings.ConfigError`` when the config does not fit the machine and
    ``nri_plrm.cli.inputs.UsageError`` for a resize naming no pod or container of them.
    """
    return simulate_pods(load_manifests(manifest_paths), topology, config, resizes, devices)


def simulate_pods(
    pods: Sequence[PodSpec],
    topology: Topology,
    config: Config | None = None,
    resizes: Sequence[ResizeRequest] = (),
    devices: DeviceChoice | None = None,
) -> SimulationResult:
    """Dry-run already parsed pods (see :func:`simulate`)."""
    config = config or Config()
    validate_for_topology(config, topology)
    known = {(p.namespace, p.name): p for p in pods}
    for request in resizes:
        pod = known.get((request.namespace, request.pod))
        if pod is None:
            raise UsageError(f"--resize {request.target!r}: no pod of that name in the manifests")
        resized_pod(pod, request)
    return asyncio.run(_run(pods, topology, config, resizes, devices))


def engine_for(topology: Topology, config: Config) -> Engine:
    """The engine the daemon would build for this machine and config."""
    return Engine(topology, config.engine_config())


async def _run(
    pods: Sequence[PodSpec],
    topology: Topology,
    config: Config,
    resizes: Sequence[ResizeRequest],
    devices: DeviceChoice | None,
) -> SimulationResult:
    engine = engine_for(topology, config)
    runtime = InMemoryRuntime()
    ledger = NodeLedger(engine)
    source = StaticPodSpecSource(pods)
    plugin = Plugin(ledger, pod_specs=source)
    kubelet = None
    if devices is not None:
        devices.check(topology.numa_ids)
        kubelet = devices.allocator(engine, config)
    plugin.attach(runtime.update_containers)
    page_sizes = machine_page_sizes(topology.memory_resources)
    outcomes: list[tuple[PodSpec, str, str, str, bool]] = []
    created: dict[str, list[tuple[str, str, ContainerKind]]] = {}
    clock = 0
    for pod in pods:
        if kubelet is not None:
            try:
                pod = replace(pod, devices=kubelet.admit(pod))
            except AdmissionError as err:
                outcomes.append((pod, err.reason, err.message, devices_cause(devices), False))
                continue
            source.add(pod)
        sandbox = nri_pod_sandbox(pod)
        try:
            await plugin.run_pod_sandbox(sandbox)
        except NRIError as exc:
            reason, message = _reason(exc)
            outcomes.append((pod, reason, message, _cause(engine, pod, exc), False))
            if kubelet is not None:
                kubelet.release(pod.uid)
            continue
        reason = message = explanation = ""
        admitted = True
        names: list[tuple[str, str, ContainerKind]] = []
        for spec in creation_order(pod):
            clock += 1
            msg = nri_container(pod, spec, page_sizes=page_sizes, created_at=clock)
            try:
                adjust, updates = await plugin.create_container(sandbox, msg)
            except NRIError as exc:
                reason, message = _reason(exc)
                explanation = _cause(engine, pod, exc, spec)
                if isinstance(exc.__cause__, AdmissionError):
                    admitted = False
                    plugin.remove_pod_sandbox(sandbox)
                    if kubelet is not None:
                        kubelet.release(pod.uid)
                else:
                    reason = reason if reason != "NRIError" else REJECTED_AT_CREATE
                break
            ctr = runtime.add(msg)
            if adjust is not None:
                runtime.apply(ctr, adjust.linux.resources)
            runtime.apply_updates(updates)
            ctr.msg.state = api.CONTAINER_RUNNING
            names.append((spec.name, msg.id, spec.kind))
            if spec.kind is ContainerKind.INIT:
                ctr.exited = True
                ctr.msg.state = api.CONTAINER_STOPPED
                runtime.apply_updates(plugin.stop_container(sandbox, ctr.msg))
        await plugin.drain()
        outcomes.append((pod, reason, message, explanation, admitted))
        if admitted:
            created[pod.uid] = names
    await plugin.drain()
    resized = await _resize(plugin, runtime, pods, created, resizes)
    views = {view.uid: view for view in ledger.pods()}
    results: list[SimulatedPod] = []
    for pod, reason, message, explanation, admitted in outcomes:
        view = views.get(pod.uid)
        if not admitted or view is None:
            results.append(
                SimulatedPod(pod.namespace, pod.name, pod.uid, False, reason, message, explanation)
            )
            continue
        kinds = {c.name: c for c in view.containers}
        containers = []
        for name, cid, kind in created.get(pod.uid, []):
            ctr = runtime.containers[cid]
            cview = kinds.get(name)
            assignment = (
                cview.assignment.assignment.value
                if cview is not None and cview.assignment is not None
                else "node_shared"
            )
            containers.append(
                SimulatedContainer(
                    name=name,
                    kind=kind.value,
                    assignment=assignment,
                    cpus=CPUSet.parse(ctr.cpus),
                    mems=CPUSet.parse(ctr.mems),
                    cpu_quota=ctr.quota,
                    exited=ctr.exited,
                    devices=tuple(
                        (r, d) for r, held in pod.devices.get(name, {}).items() for d in held
                    ),
                )
            )
        results.append(
            SimulatedPod(
                pod.namespace,
                pod.name,
                pod.uid,
                True,
                reason,
                message,
                explanation,
                cpu_ids=view.cpus,
                memory=tuple((b.resource, b.size, b.numa_nodes) for b in view.memory),
                containers=tuple(containers),
            )
        )
    return SimulationResult(
        topology=describe(topology),
        policy=config.topology_manager.policy,
        scope=config.topology_manager.scope,
        shared_pool=engine.node_shared_pool(),
        pods=tuple(results),
        free=free_per_numa(engine),
        resizes=resized,
    )


async def _resize(
    plugin: Plugin,
    runtime: InMemoryRuntime,
    pods: Sequence[PodSpec],
    created: dict[str, list[tuple[str, str, ContainerKind]]],
    resizes: Sequence[ResizeRequest],
) -> tuple[ResizeOutcome, ...]:
    """Deliver the ``--resize`` requests in order (``nri_plrm.cli.simulate_resize``)."""
    specs = {(p.namespace, p.name): p for p in pods if p.uid in created}
    out: list[ResizeOutcome] = []

    def apply(cid: str, resources: api.LinuxResources) -> None:
        runtime.apply(runtime.containers[cid], resources)

    for request in resizes:
        pod = specs.get((request.namespace, request.pod))
        if pod is None:
            out.append(ResizeOutcome(request.target, False, "NotAdmitted", "the pod was rejected"))
            continue
        ids = {name: cid for name, cid, _ in created[pod.uid]}
        messages = {cid: runtime.containers[cid].msg for cid in ids.values()}
        outcome, specs[(pod.namespace, pod.name)] = await run_resize(
            plugin, pod, ids, messages, request, apply, runtime.apply_updates
        )
        out.append(outcome)
    return tuple(out)


def _reason(exc: NRIError) -> tuple[str, str]:
    cause = exc.__cause__
    if isinstance(cause, AdmissionError):
        return cause.reason, cause.message
    return "NRIError", str(exc)


def _cause(
    engine: Engine, pod: PodSpec, exc: NRIError, container: ContainerSpec | None = None
) -> str:
    """The operator-terms cause of an admission rejection ("" for other runtime errors)."""
    cause = exc.__cause__
    if isinstance(cause, AdmissionError):
        return explain_rejection(engine, pod, cause, container)
    return ""


def _devices_json(c: SimulatedContainer) -> dict[str, Any]:
    """The ``devices`` entry of a container holding some (absent otherwise: the document of a
    simulation without devices is unchanged)."""
    if not c.devices:
        return {}
    return {
        "devices": [{"resource": r, "id": d.id, "numa": list(d.numa_nodes)} for r, d in c.devices]
    }


def _numa_text(device: Device) -> str:
    nodes = ",".join(map(str, device.numa_nodes))
    return f"NUMA {nodes}" if nodes else "no NUMA node"


def cmd_simulate(args: argparse.Namespace, out: TextIO) -> int:
    """``simulate MANIFEST...``: exit 0, or 3 with ``--fail-on-reject`` and a rejected pod."""
    config = load(args.config)
    topology = machine(args, config, DEFAULT_SPEC)
    note = ""
    if not any(node.memory for node in topology.numa_nodes.values()):
        topology = with_memory(topology, {MEMORY: memory_bytes(DEFAULT_MEMORY_PER_NUMA)})
        note = (
            f"memory: the machine names none; simulated with {DEFAULT_MEMORY_PER_NUMA} per "
            "NUMA node\n"
        )
    try:
        validate_for_topology(config, topology)
    except ConfigError as exc:
        raise UsageError(*exc.located(args.config or "<defaults>")) from exc
    resizes = [parse_resize(text) for text in args.resize or ()]
    devices = DeviceChoice.parse(
        args.devices or (),
        args.kubelet_topology_policy or config.topology_manager.kubelet_policy,
        "--kubelet-topology-policy" if args.kubelet_topology_policy else KUBELET_POLICY_KEY,
    )
    try:
        result = simulate(args.manifests, topology, config, resizes, devices)
    except ManifestError as exc:
        raise UsageError(str(exc)) from exc
    if args.output == "json":
        emit_json(out, result.to_json())
    else:
        out.write(note + result.to_table())
    rejected = [p for p in result.pods if not p.admitted]
    if args.fail_on_reject and rejected:
        return EXIT_REJECTED
    return EXIT_OK
