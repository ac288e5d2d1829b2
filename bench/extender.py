"""Scheduler extender filter latency over 1,000 nodes.

Cluster: 1,000 nodes of four machine types (2-socket 64-CPU SMT2 with 4 NUMA nodes and 1Gi
hugepages, 1-socket 32-CPU SMT2 with 2 NUMA nodes, 2-socket 96-CPU SMT2 with 8 NUMA nodes,
1-socket 48-CPU without SMT), each type under its own policy and scope, every node filled
beforehand with a random number (0 to 15) of pods of the workload below, so that node states
differ. Each node's NodeResourceTopology object is built by the exporter's code path
(``nrt_object`` with ``exact_attributes``) and given to the extender.

Workload: a stream of 400 pods drawn from 8 shapes (classic Guaranteed 2, 4 and 8 CPUs, one
with hugepages, a pod-level budget with an exclusive container and a sidecar, a fractional
Guaranteed pod, a Burstable and a BestEffort pod). Each request is one ``filter`` over all
1,000 node names (the JSON request decoded and the answer encoded, as the HTTP server does;
the socket is left out); the pod is then bound to a passing node (the assume cache holds it),
the node admits it and its object is published again five requests later (a write window).

Figures (milliseconds of wall time per request):

- ``extender_filter_p99_ms_1000_nodes``, ``..._p50_...``: requests after the first of their
  pod shape (the steady state: a node's verdict for a shape is recomputed only when its state
  changed or a pod is assumed there);
- ``extender_filter_cold_ms_1000_nodes``: the slowest first request of a shape, every node
  decided afresh (after a restart, or a new pod shape);
- ``extender_decide_us_per_node``: that cold cost per node, in microseconds.
"""

from __future__ import annotations

import json
import random
import time
from typing import Any

from bench.common import main, percentile
from nri_plrm.config.file import parse_config
from nri_plrm.engine.availability import free_per_numa
from nri_plrm.engine.facade import Engine
from nri_plrm.engine.spec import AdmissionError, PodSpec
from nri_plrm.podsource.convert import pod_spec_from_api
from nri_plrm.podsource.nrt import nrt_object
from nri_plrm.podsource.nrt_exact_state import exact_attributes
from nri_plrm.scheduler.extender import Extender
from nri_plrm.scheduler.settings import ExtenderSettings
from nri_plrm.topology.model import Topology
from nri_plrm.topology.synthetic import synthetic_topology

NODES = 1000
REQUESTS = 400
WRITE_WINDOW = 5
TYPES = (
    (
        "sockets=2,numa_per_socket=2,cores_per_numa=8,threads_per_core=2,memory_per_numa=64Gi,"
        "hugepages_1Gi_per_numa=4",
        "single-numa-node",
        "pod",
    ),
    (
        "sockets=1,numa_per_socket=2,cores_per_numa=8,threads_per_core=2,memory_per_numa=32Gi",
        "restricted",
        "container",
    ),
    (
        "sockets=2,numa_per_socket=4,cores_per_numa=6,threads_per_core=2,memory_per_numa=32Gi",
        "single-numa-node",
        "container",
    ),
    (
        "sockets=1,numa_per_socket=2,cores_per_numa=24,threads_per_core=1,memory_per_numa=64Gi",
        "best-effort",
        "pod",
    ),
)


def _config(policy: str, scope: str) -> str:
    return (
        f'[topology_manager]\npolicy = "{policy}"\nscope = "{scope}"\n'
        '[cpu_manager]\nreserved_cpus = "0"\n'
        '[memory_manager]\nreserved_memory = [ { numa_node = 0, memory = "1Gi" } ]\n'
    )


def _res(cpu: str, memory: str, **extra: str) -> dict[str, str]:
    return {"cpu": cpu, "memory": memory, **extra}


def _shape(kind: int, name: str) -> dict[str, Any]:
    """One pod of the workload's shape ``kind`` (0..7) as the API server sends it."""
    spec: dict[str, Any]
    if kind < 3:
        cpu = ("2", "4", "8")[kind]
        spec = {
            "containers": [
                {
                    "name": "app",
                    "resources": {"requests": _res(cpu, "4Gi"), "limits": _res(cpu, "4Gi")},
                }
            ]
        }
    elif kind == 3:
        res = _res("4", "2Gi", **{"hugepages-1Gi": "2Gi"})
        spec = {"containers": [{"name": "db", "resources": {"requests": res, "limits": res}}]}
    elif kind == 4:
        spec = {
            "resources": {"requests": _res("6", "8Gi"), "limits": _res("6", "8Gi")},
            "initContainers": [{"name": "proxy", "restartPolicy": "Always"}],
            "containers": [
                {
                    "name": "main",
                    "resources": {"requests": _res("4", "4Gi"), "limits": _res("4", "4Gi")},
                },
                {"name": "log"},
            ],
        }
    elif kind == 5:
        res = _res("1500m", "1Gi")
        spec = {"containers": [{"name": "app", "resources": {"requests": res, "limits": res}}]}
    elif kind == 6:
        spec = {"containers": [{"name": "app", "resources": {"requests": _res("1", "1Gi")}}]}
    else:
        spec = {"containers": [{"name": "app"}]}
    return {
        "metadata": {"name": name, "namespace": "bench", "uid": f"uid-{name}"},
        "spec": spec,
    }


class _Node:
    def __init__(self, name: str, topology: Topology, config_text: str) -> None:
        config = parse_config(config_text)
        self.name = name
        self.topology = topology
        self.tm = config.topology_manager
        self.engine = Engine(topology, config.engine_config())
        self.pods: list[PodSpec] = []
        self.version = 0

    def admit(self, pod: PodSpec) -> bool:
        try:
            self.engine.admit_pod(pod)
        except AdmissionError:
            return False
        self.pods.append(pod)
        return True

    def published(self) -> dict[str, Any]:
        self.version += 1
        obj = nrt_object(
            self.name,
            "uid",
            free_per_numa(self.engine),
            self.topology,
            self.tm.policy,
            self.tm.scope,
            ((p.namespace, p.name) for p in self.pods),
            None,
            exact_attributes(self.engine),
        )
        obj["metadata"]["resourceVersion"] = f"{self.name}-{self.version}"
        return obj


def run() -> dict[str, float]:
    rng = random.Random(29)
    topologies = [(synthetic_topology(spec), _config(p, s)) for spec, p, s in TYPES]
    nodes = []
    serial = 0
    for i in range(NODES):
        topology, text = topologies[i % len(topologies)]
        node = _Node(f"node-{i:04d}", topology, text)
        for _ in range(rng.randint(0, 15)):
            serial += 1
            node.admit(pod_spec_from_api(_shape(rng.randrange(8), f"pre-{serial}")))
        nodes.append(node)
    clock = [0.0]
    extender = Extender(ExtenderSettings(), lambda: clock[0])
    for node in nodes:
        extender.update_node(node.published())
    by_name = {n.name: n for n in nodes}
    names = [n.name for n in nodes]
    steady: list[float] = []
    cold: list[float] = []
    seen: set[int] = set()
    stale: list[tuple[int, _Node]] = []
    for request in range(REQUESTS):
        clock[0] = float(request)
        kind = rng.randrange(8)
        obj = _shape(kind, f"pod-{request}")
        body = json.dumps({"Pod": obj, "Nodes": None, "NodeNames": names}).encode()
        started = time.perf_counter()
        answer = json.dumps(extender.filter(json.loads(body))).encode()
        elapsed = (time.perf_counter() - started) * 1000
        (cold if kind not in seen else steady).append(elapsed)
        seen.add(kind)
        passing = json.loads(answer)["NodeNames"]
        if passing:
            chosen = by_name[rng.choice(passing)]
            extender.bound(obj["metadata"]["uid"], chosen.name)
            chosen.admit(pod_spec_from_api(obj))
            stale.append((request + WRITE_WINDOW, chosen))
        while stale and stale[0][0] <= request:
            extender.update_node(stale.pop(0)[1].published())
    worst_cold = max(cold)
    return {
        "extender_filter_p99_ms_1000_nodes": round(percentile(steady, 99), 3),
        "extender_filter_p50_ms_1000_nodes": round(percentile(steady, 50), 3),
        "extender_filter_cold_ms_1000_nodes": round(worst_cold, 3),
        "extender_decide_us_per_node": round(worst_cold * 1000 / NODES, 1),
    }


if __name__ == "__main__":
    main(run)
