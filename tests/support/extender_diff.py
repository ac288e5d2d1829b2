"""Random machines, configurations and API pods for the scheduler-extender differential, and a
node that admits through the real ledger and publishes its NodeResourceTopology object through
the exporter's own code path (``nrt_object`` over ``free_per_numa`` and ``exact_attributes`` of
the ledger's engine, the pods of the ledger's read model)."""

from __future__ import annotations

import random
from typing import Any

from nri_plrm.config.file import parse_config
from nri_plrm.engine.availability import free_per_numa
from nri_plrm.engine.explain import explain_rejection
from nri_plrm.engine.facade import Engine
from nri_plrm.engine.spec import AdmissionError, PodSpec
from nri_plrm.ledger import NodeLedger
from nri_plrm.podsource.convert import PodObjectError, pod_spec_from_api
from nri_plrm.podsource.nrt import nrt_object
from nri_plrm.podsource.nrt_exact_state import exact_attributes
from nri_plrm.topology.model import Topology
from nri_plrm.topology.synthetic import synthetic_topology
from nri_plrm.translate.nri_to_pod import PodIntent, PodMode, QOSClass, ResourceValues

POLICIES = ("none", "best-effort", "restricted", "single-numa-node")
CPU_OPTION_SETS: tuple[tuple[str, ...], ...] = (
    (),
    (),
    ("full-pcpus-only",),
    ("distribute-cpus-across-numa",),
    ("strict-cpu-reservation",),
    ("full-pcpus-only", "strict-cpu-reservation"),
    ("prefer-align-cpus-by-uncorecache",),
    ("distribute-cpus-across-cores",),
)


def random_machine(rng: random.Random) -> tuple[str, Topology]:
    """A compact machine spec and its topology (1 to 8 NUMA nodes, SMT on or off,
    hugepages sometimes)."""
    sockets = rng.choice((1, 1, 2))
    per_socket = rng.choice((1, 2, 2, 4 if sockets == 1 else 2))
    spec = (
        f"sockets={sockets},numa_per_socket={per_socket},cores_per_numa={rng.choice((2, 3, 4, 6))},"
        f"threads_per_core={rng.choice((1, 2, 2))},memory_per_numa={rng.choice((4, 8))}Gi"
    )
    if rng.random() < 0.5:
        spec += f",hugepages_2Mi_per_numa={rng.choice((128, 512))}"
    if rng.random() < 0.3:
        spec += ",hugepages_1Gi_per_numa=1"
    return spec, synthetic_topology(spec)


def random_config_text(rng: random.Random, topology: Topology) -> str:
    """A plugin TOML for the machine: policy, scope, options, reserved CPUs and memory."""
    policy = rng.choice(POLICIES)
    scope = rng.choice(("pod", "pod", "container"))
    options = rng.choice(CPU_OPTION_SETS)
    lines = [
        "[topology_manager]",
        f'policy = "{policy}"',
        f'scope = "{scope}"',
    ]
    if rng.random() < 0.3:
        lines.append('options = { "prefer-closest-numa-nodes" = true }')
    lines.append("[cpu_manager]")
    if rng.random() < 0.5:
        lines.append(f"reserved_cpu_count = {rng.choice((1, 2))}")
    else:
        first = topology.all_cpus.sorted()[0]
        lines.append(f'reserved_cpus = "{first}"')
    if options:
        lines.append("enable_alpha_options = true")
        lines.append("options = { " + ", ".join(f'"{o}" = true' for o in options) + " }")
    lines.append("[memory_manager]")
    reserved = rng.choice(("256Mi", "512Mi", "1Gi"))
    lines.append(f'reserved_memory = [ {{ numa_node = 0, memory = "{reserved}" }} ]')
    return "\n".join(lines) + "\n"


def _res(
    cpu: str | None, memory_mi: int | None, huge: dict[str, str] | None = None
) -> dict[str, str]:
    out: dict[str, str] = {}
    if cpu is not None:
        out["cpu"] = cpu
    if memory_mi is not None:
        out["memory"] = f"{memory_mi}Mi"
    out.update(huge or {})
    return out


def _container(
    name: str, requests: dict[str, str] | None, limits: dict[str, str] | None, **extra: Any
) -> dict[str, Any]:
    c: dict[str, Any] = {"name": name, "image": "registry.k8s.io/pause:3.9", **extra}
    resources: dict[str, Any] = {}
    if requests:
        resources["requests"] = requests
    if limits:
        resources["limits"] = limits
    if resources:
        c["resources"] = resources
    return c


def _hugepages(rng: random.Random, topology: Topology) -> dict[str, str]:
    sizes = [n for n in topology.memory_resources if n.startswith("hugepages-")]
    if not sizes or rng.random() < 0.6:
        return {}
    size = rng.choice(sizes)
    return {size: "1Gi" if size == "hugepages-1Gi" else f"{rng.choice((64, 128, 256))}Mi"}


def _guaranteed(
    rng: random.Random, name: str, cpus: int, topology: Topology, **extra: Any
) -> dict[str, Any]:
    res = _res(str(cpus), rng.choice((128, 256, 512, 1024, 2048)), _hugepages(rng, topology))
    return _container(name, res, dict(res), **extra)


def _shared(rng: random.Random, name: str, **extra: Any) -> dict[str, Any]:
    kind = rng.random()
    if kind < 0.4:
        return _container(name, None, None, **extra)
    if kind < 0.7:
        return _container(name, _res("100m", 64), None, **extra)
    res = _res(rng.choice(("500m", "1500m")), 128)
    return _container(name, res, dict(res), **extra)


def random_api_pod(rng: random.Random, index: int, topology: Topology) -> dict[str, Any]:
    """An API Pod object: classic (Guaranteed, fractional, burstable, best-effort, init and
    sidecar containers, hugepages) or with pod-level resources (exclusive and shared
    containers)."""
    per_numa = max(len(topology.numa_nodes[n].cpus) for n in topology.numa_ids)
    name = f"pod-{index}"
    spec: dict[str, Any] = {}
    inits: list[dict[str, Any]] = []
    containers: list[dict[str, Any]] = []
    if rng.random() < 0.5:
        budget = rng.randint(1, per_numa + 2)
        memory = rng.choice((512, 1024, 2048, 4096))
        spec["resources"] = {
            "requests": _res(str(budget), memory),
            "limits": _res(str(budget), memory),
        }
        if rng.random() < 0.15:  # a fractional budget: no exclusive CPUs at all
            spec["resources"] = {"requests": _res("1500m", memory), "limits": _res("1500m", memory)}
        left = budget
        for i in range(rng.randint(1, 3)):
            if rng.random() < 0.5 and left > 0:
                cpus = rng.randint(1, left)
                left -= cpus
                res = _res(str(cpus), rng.choice((128, 256, 512)))
                containers.append(_container(f"app-{i}", res, dict(res)))
            else:
                containers.append(_container(f"app-{i}", None, None))
        if rng.random() < 0.4:
            inits.append(_container("sidecar", None, None, restartPolicy="Always"))
        if rng.random() < 0.2:
            res = _res("1", 128)
            inits.append(_container("setup", res, dict(res)))
    else:
        guaranteed = rng.random() < 0.7
        for i in range(rng.randint(1, 3)):
            if guaranteed:
                if rng.random() < 0.2:
                    res = _res("500m", 256)
                    containers.append(_container(f"app-{i}", res, dict(res)))
                else:
                    cpus = rng.randint(1, per_numa + 1)
                    containers.append(_guaranteed(rng, f"app-{i}", cpus, topology))
            else:
                containers.append(_shared(rng, f"app-{i}"))
        if rng.random() < 0.3:
            cpus = rng.randint(1, per_numa)
            init = _guaranteed(rng, "init", cpus, topology) if guaranteed else _shared(rng, "init")
            inits.append(init)
        if rng.random() < 0.3:
            side = (
                _guaranteed(rng, "sidecar", 1, topology, restartPolicy="Always")
                if guaranteed
                else _shared(rng, "sidecar", restartPolicy="Always")
            )
            inits.append(side)
    spec["containers"] = containers
    if inits:
        spec["initContainers"] = inits
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "diff", "uid": f"uid-{index}"},
        "spec": spec,
    }


class LedgerNode:
    """One node: the plugin's ledger deciding pods from their full spec, as in API mode."""

    def __init__(self, name: str, topology: Topology, config_text: str) -> None:
        config = parse_config(config_text)
        self.config_text = config_text
        self.name = name
        self.topology = topology
        self.tm = config.topology_manager
        self.ledger = NodeLedger(Engine(topology, config.engine_config()))
        self.ledger.open()

    def admit(self, spec: PodSpec) -> tuple[AdmissionError, str] | None:
        """The node's admission of a pod whose spec it knows (``Plugin.run_pod_sandbox``'s
        ledger call); the error and the cause the plugin reports when refused."""
        intent = PodIntent(spec, ResourceValues(), QOSClass.BURSTABLE, PodMode.CLASSIC)
        try:
            self.ledger.admit(spec.uid, f"sandbox-{spec.uid}", intent, spec)
        except AdmissionError as err:
            return err, explain_rejection(self.ledger.engine, spec, err)
        return None

    def remove(self, uid: str) -> None:
        """The pod left the node."""
        self.ledger.remove_pod(uid)

    def uids(self) -> list[str]:
        """Admitted pods."""
        return [p.uid for p in self.ledger.pods()]

    def published(self) -> dict[str, Any]:
        """The object the exporter would write now (daemon.py's attach functions)."""
        engine = self.ledger.engine
        return nrt_object(
            self.name,
            "node-uid",
            free_per_numa(engine),
            self.topology,
            self.tm.policy,
            self.tm.scope,
            ((p.namespace, p.name) for p in self.ledger.pods()),
            None,
            exact_attributes(engine),
        )


def random_node(rng: random.Random, name: str) -> LedgerNode:
    """A node with a random machine and a configuration the plugin accepts for it."""
    while True:
        _spec, topology = random_machine(rng)
        text = random_config_text(rng, topology)
        try:
            return LedgerNode(name, topology, text)
        except ValueError:
            continue  # e.g. an option this machine or policy refuses: draw again


def spec_of(obj: dict[str, Any]) -> PodSpec:
    """The spec both sides decide on (the pod cache's conversion)."""
    return pod_spec_from_api(obj)


def random_pod(
    rng: random.Random, index: int, topology: Topology
) -> tuple[dict[str, Any], PodSpec]:
    """A pod the API server would accept (drawn again until the conversion, which applies its
    validation, takes it) and its spec."""
    while True:
        obj = random_api_pod(rng, index, topology)
        try:
            return obj, spec_of(obj)
        except PodObjectError:
            continue
