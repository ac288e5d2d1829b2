"""Prometheus metrics on a private registry (served by ``nri_plrm.observability.metrics_server``).

The three resource-manager metrics carry the kubelet's names and labels. Everything else is
about running the plugin itself. Labels are low-cardinality only: never pod or container names.
Every metric is documented in ``docs/metrics.md``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.metrics_core import Metric

from nri_plrm import __version__ as VERSION
from nri_plrm.base.cpuset import CPUSet
from nri_plrm.engine.spec import (
    EMPTY_POD_SHARED_POOL_ERROR,
    AssignmentType,
    ContainerAssignment,
)
from nri_plrm.ledger.view import PodResourcesView, reported_containers
from nri_plrm.observability.metrics_kubernetes import KubernetesApiMetrics, check_label
from nri_plrm.topology.model import Topology
from nri_plrm.util.steps import Steps, finish

SOURCES = ("pod", "node")
RESOURCES = ("cpu", "memory")
ASSIGNMENT_TYPES = (
    AssignmentType.NODE_EXCLUSIVE.value,
    AssignmentType.POD_EXCLUSIVE.value,
    AssignmentType.POD_SHARED.value,
)
"""The kubelet's ``assignment_type`` label values."""
_SOURCE_OF = {
    AssignmentType.POD_EXCLUSIVE: "pod",
    AssignmentType.POD_SHARED: "pod",
    AssignmentType.NODE_EXCLUSIVE: "node",
}
"""Allocation source per assignment: the kubelet counts every container assignment its
AllocatePod writes (exclusive slices and pod shared pool alike) as ``source="pod"``."""
RECONCILE_ACTIONS = ("adopted", "corrected", "released")
"""Why a pod's spec lookup fell back to NRI-only inference."""
"""Which cap an answer of the API server went past (the pod cache refused it)."""
"""What became of a Kubernetes Event the plugin recorded."""
DEVICE_LOOKUP_RESULTS = ("found", "none", "timeout", "failed")
DEVICE_LOOKUP_SOURCES = ("checkpoint", "socket")
DRA_LOOKUP_RESULTS = ("found", "unknown")
"""Results of a pod's device lookup on the kubelet's PodResources socket."""
HOTPLUG_IGNORED = ("unreadable", "memory", "no_change")
"""Why a hotplug uevent led to nothing: a datagram that cannot be read, a memory block event
(reported, not acted on), or a CPU event after which the online CPUs were as before."""
HOTPLUG_REPAIRS = ("cgroup_cpuset", "container_update")
"""Repairs after a CPU hotplug: a cgroup v1 ``cpuset.cpus`` given back, a container re-asserted."""
CHECKPOINT_DAMAGE = (
    "empty",
    "unreadable",
    "not-regular-file",
    "invalid-json",
    "bad-layout",
    "checksum-mismatch",
    "migration-failed",
    "bad-contents",
    "inconsistent",
    "journal",
)
"""Why a checkpoint (or the journal beside it) could not be used: the ``kind`` label."""
NEAR_TIMEOUT_FRACTION = 0.5
"""A request that took at least this fraction of the runtime's timeout counts as near it."""

_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0)
_LAG_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0)
_log = logging.getLogger("nri_plrm.metrics")


class Metrics(KubernetesApiMetrics):
    """Every metric the plugin exports, on its own :class:`CollectorRegistry`.

    Thread-safe (prometheus-client's primitives are). ``request_timeout`` is containerd's
    ``plugin_request_timeout`` in seconds, used to count requests that came close to it.
    """

    def __init__(self, request_timeout: float = 2.0) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.request_timeout = request_timeout
        self._lock = threading.Lock()
        self._connected = False
        self._synchronized = False
        self._connections = 0
        self._view: PodResourcesView | None = None
        self._topology: Topology | None = None
        r = self.registry
        self.register_kubernetes(r)

        self.allocations = Counter(
            "resource_manager_allocations",
            "Number of exclusive resource allocations performed by a resource manager.",
            ["resource_name", "source"],
            registry=r,
        )
        self.allocation_errors = Counter(
            "resource_manager_allocation_errors",
            "Number of errors encountered during exclusive resource allocation.",
            ["resource_name", "source"],
            registry=r,
        )
        self.container_assignments = Gauge(
            "resource_manager_container_assignments",
            "Number of containers with a specific type of resource assignment.",
            ["resource_name", "assignment_type"],
            registry=r,
        )
        self.admission_requests = Counter(
            "topology_manager_admission_requests",
            "Number of admission requests where resources have to be aligned.",
            registry=r,
        )
        self.admission_errors = Counter(
            "topology_manager_admission_errors",
            "Number of admission request failures, by the kubelet's rejection reason.",
            ["reason"],
            registry=r,
        )
        self.pinning_requests = Counter(
            "resource_manager_pinning_requests",
            "Containers whose cpuset (cpu) or NUMA memory (memory) the plugin pinned.",
            ["resource_name"],
            registry=r,
        )
        self.pinning_errors = Counter(
            "resource_manager_pinning_errors",
            "Pinning requests that failed.",
            ["resource_name"],
            registry=r,
        )
        self.node_shared_pool = Gauge(
            "cpu_manager_shared_pool_size_millicores",
            "Size of the node's shared CPU pool in millicores.",
            registry=r,
        )
        self.pod_shared_pools = Gauge(
            "nri_plrm_pod_shared_pool_size_millicores",
            "Sum of the sizes of all pod shared pools in millicores.",
            registry=r,
        )
        self.pod_shared_pool_count = Gauge(
            "nri_plrm_pod_shared_pools",
            "Number of pods that hold a pod shared pool.",
            registry=r,
        )
        self.exclusive_cpus = Gauge(
            "cpu_manager_exclusive_cpu_allocation_count",
            "Number of CPUs exclusively allocated to containers or pods.",
            registry=r,
        )
        self.exclusive_cpus_per_numa = Gauge(
            "cpu_manager_allocation_per_numa",
            "Number of CPUs exclusively allocated per NUMA node.",
            ["numa_node"],
            registry=r,
        )
        self.nri_connected = Gauge(
            "nri_plrm_nri_connected", "1 while connected to the runtime's NRI socket.", registry=r
        )
        self.nri_synchronized = Gauge(
            "nri_plrm_nri_synchronized",
            "1 once the current NRI connection completed Configure and Synchronize.",
            registry=r,
        )
        self.nri_reconnects = Counter(
            "nri_plrm_nri_reconnects",
            "Connections to the runtime after the first one.",
            registry=r,
        )
        self.nri_request_duration = Histogram(
            "nri_plrm_nri_request_duration_seconds",
            "Time spent handling NRI requests, by event.",
            ["event"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.nri_request_failures = Counter(
            "nri_plrm_nri_request_failures",
            "NRI requests answered with an error, by event.",
            ["event"],
            registry=r,
        )
        self.nri_near_timeout = Counter(
            "nri_plrm_nri_requests_near_timeout",
            "NRI requests that took at least half of the runtime's request timeout, by event.",
            ["event"],
            registry=r,
        )
        self.pool_update_lag = Histogram(
            "nri_plrm_pool_update_lag_seconds",
            "Seconds from a decision that moved a container of another pod (its pool shrank or "
            "grew) until the runtime applied its new cpuset.",
            buckets=_LAG_BUCKETS,
            registry=r,
        )
        self.checkpoint_writes = Counter(
            "nri_plrm_checkpoint_writes", "Checkpoint writes that succeeded.", registry=r
        )
        self.checkpoint_failures = Counter(
            "nri_plrm_checkpoint_write_failures", "Checkpoint writes that failed.", registry=r
        )
        self.checkpoint_duration = Histogram(
            "nri_plrm_checkpoint_write_duration_seconds",
            "Time to write a decision or checkpoint (page cache; fsyncs run in the background).",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.checkpoint_sync_failures = Counter(
            "nri_plrm_checkpoint_sync_failures",
            "Background fsyncs of state files that failed (the data may not survive a power loss).",
            registry=r,
        )
        self.checkpoint_corrupt = Counter(
            "nri_plrm_checkpoint_corrupt",
            "Checkpoint or journal files found unusable and moved aside, by kind of damage.",
            ["kind"],
            registry=r,
        )
        self.state_dir_lost = Counter(
            "nri_plrm_state_directory_lost",
            "Times the state directory or the decision journal was found deleted or replaced; "
            "the directory was recreated and a full checkpoint written before the next reply.",
            registry=r,
        )
        self.reconciled = Counter(
            "nri_plrm_reconciled_containers",
            "Containers adopted, corrected or released while reconciling with the runtime.",
            ["action"],
            registry=r,
        )
        self.device_lookups = Counter(
            "nri_plrm_device_lookups",
            "RunPodSandbox lookups of the pod's devices on the kubelet's PodResources socket, "
            "by result (found, none, timeout: decided without device hints, failed: likewise).",
            ["result"],
            registry=r,
        )
        self.device_lookup_sources = Counter(
            "nri_plrm_device_lookup_sources",
            "RunPodSandbox lookups of the pod's devices by where the answer came from "
            "(checkpoint: the kubelet's device checkpoint, current; socket: a Get).",
            ["source"],
            registry=r,
        )
        self.dra_device_lookups = Counter(
            "nri_plrm_dra_device_lookups",
            "RunPodSandbox lookups of the devices of a pod's DRA claims, by result (found, "
            "unknown: not fetched in time or failed, decided without them).",
            ["result"],
            registry=r,
        )
        self.podresources_requests = Counter(
            "nri_plrm_podresources_requests",
            "PodResources API requests, by method and gRPC status code.",
            ["method", "code"],
            registry=r,
        )
        self.hotplug_events = Counter(
            "nri_plrm_cpu_hotplug_events",
            "CPU and memory hotplug events received from the kernel, by action (lost: events "
            "may have been dropped, the machine was rediscovered).",
            ["action"],
            registry=r,
        )
        self.hotplug_ignored = Counter(
            "nri_plrm_hotplug_events_ignored",
            "Hotplug uevents that led to nothing, by reason (unreadable, memory, no_change).",
            ["reason"],
            registry=r,
        )
        self.hotplug_repairs = Counter(
            "nri_plrm_hotplug_repairs",
            "Repairs after a CPU hotplug, by kind (cgroup_cpuset: a cgroup v1 cpuset.cpus "
            "given back; container_update: a container re-asserted).",
            ["kind"],
            registry=r,
        )
        self.build_info = Gauge(
            "nri_plrm_build_info", "Always 1; the plugin's version.", ["version"], registry=r
        )
        self.build_info.labels(version=VERSION).set(1)
        # The children counted per container decision, looked up once (``labels`` builds its
        # key and takes a lock on every call: a cold Synchronize counts 20,000 decisions).
        self._allocated = {
            (ok, resource, source): (self.allocations if ok else self.allocation_errors).labels(
                resource_name=resource, source=source
            )
            for ok in (True, False)
            for resource in RESOURCES
            for source in SOURCES
        }
        self._pinned = {
            (ok, resource): (self.pinning_requests if ok else self.pinning_errors).labels(
                resource_name=resource
            )
            for ok in (True, False)
            for resource in RESOURCES
        }
        for kind in ASSIGNMENT_TYPES:
            self.container_assignments.labels(resource_name="cpu", assignment_type=kind)
        for action in RECONCILE_ACTIONS:
            self.reconciled.labels(action=action)
        for kind in CHECKPOINT_DAMAGE:
            self.checkpoint_corrupt.labels(kind=kind)
        for result in DEVICE_LOOKUP_RESULTS:
            self.device_lookups.labels(result=result)
        for source in DEVICE_LOOKUP_SOURCES:
            self.device_lookup_sources.labels(source=source)
        for result in DRA_LOOKUP_RESULTS:
            self.dra_device_lookups.labels(result=result)

    # Resource managers -----------------------------------------------------------------

    def record_allocation(self, resource_name: str, source: str, ok: bool = True) -> None:
        """One exclusive allocation (``source`` ``pod`` or ``node``), or its failure."""
        check_label(source, SOURCES, "source")
        child = self._allocated.get((ok, resource_name, source))
        if child is None:  # a resource not counted from the start (e.g. a hugepage size)
            counter = self.allocations if ok else self.allocation_errors
            child = counter.labels(resource_name=resource_name, source=source)
        child.inc()

    def set_container_assignments(
        self, counts: Mapping[AssignmentType, int], resource_name: str = "cpu"
    ) -> None:
        """Containers currently running with each assignment type (missing types = 0)."""
        for kind in ASSIGNMENT_TYPES:
            value = counts.get(AssignmentType(kind), 0)
            self.container_assignments.labels(
                resource_name=resource_name, assignment_type=kind
            ).set(value)

    def record_admission(self, reason: str | None = None) -> None:
        """One topology manager admission; ``reason`` is the rejection reason, None if admitted."""
        self.admission_requests.inc()
        if reason is not None:
            self.admission_errors.labels(reason=reason).inc()

    def record_placement(self, assignment: ContainerAssignment) -> None:
        """A container was placed: count the allocation (as the kubelet does) and the pinning."""
        source = _SOURCE_OF.get(assignment.assignment)
        if source is not None:
            self.record_allocation("cpu", source)
            if assignment.memory:
                self.record_allocation("memory", source)
        self.record_pinning("cpu")
        if assignment.mems:
            self.record_pinning("memory")

    def record_placement_error(self, reason: str) -> None:
        """A container was refused with the kubelet's ``reason``."""
        source = "pod" if reason == EMPTY_POD_SHARED_POOL_ERROR else "node"
        self.record_allocation("cpu", source, ok=False)
        self.record_pinning("cpu", ok=False)

    def record_pinning(self, resource_name: str, ok: bool = True) -> None:
        """One container pinned (``cpu``: cpuset, ``memory``: NUMA nodes), or its failure."""
        check_label(resource_name, RESOURCES, "resource_name")
        self._pinned[(True, resource_name)].inc()
        if not ok:
            self._pinned[(False, resource_name)].inc()

    def set_pools(
        self,
        node_shared_millicores: int,
        pod_shared_millicores: Mapping[str, int],
        exclusive_per_numa: Mapping[int, int],
    ) -> None:
        """Pool sizes: node shared pool, each pod's shared pool (summed), exclusive per NUMA."""
        self.node_shared_pool.set(node_shared_millicores)
        self.pod_shared_pools.set(sum(pod_shared_millicores.values()))
        self.pod_shared_pool_count.set(len(pod_shared_millicores))
        self.exclusive_cpus.set(sum(exclusive_per_numa.values()))
        for node, count in exclusive_per_numa.items():
            self.exclusive_cpus_per_numa.labels(numa_node=str(node)).set(count)

    # NRI connection --------------------------------------------------------------------

    def on_connect(self) -> None:
        """The stub connected to the runtime (counts reconnects after the first)."""
        with self._lock:
            self._connections += 1
            if self._connections > 1:
                self.nri_reconnects.inc()
            self._connected = True
            self._synchronized = False
        self.nri_connected.set(1)
        self.nri_synchronized.set(0)

    def on_disconnect(self) -> None:
        """The connection to the runtime was lost."""
        with self._lock:
            self._connected = False
            self._synchronized = False
        self.nri_connected.set(0)
        self.nri_synchronized.set(0)

    def set_synchronized(self) -> None:
        """Configure and Synchronize completed on the current connection."""
        with self._lock:
            if not self._connected:
                return
            self._synchronized = True
        self.nri_synchronized.set(1)

    def on_request(self, method: str, seconds: float, ok: bool) -> None:
        """One NRI request handled (the stub's observer hook)."""
        self.nri_request_duration.labels(event=method).observe(seconds)
        if not ok:
            self.nri_request_failures.labels(event=method).inc()
        if seconds >= self.request_timeout * NEAR_TIMEOUT_FRACTION:
            self.nri_near_timeout.labels(event=method).inc()
            _log.warning(
                "NRI %s took %.3f s, near the runtime's %.1f s timeout",
                method,
                seconds,
                self.request_timeout,
            )

    def observe_pool_update_lag(self, seconds: float) -> None:
        """One container's pool update was applied ``seconds`` after the decision."""
        self.pool_update_lag.observe(seconds)

    def health(self) -> tuple[bool, str]:
        """(healthy, why): healthy only when connected to NRI and synchronized."""
        with self._lock:
            if not self._connected:
                return False, "not connected to the runtime's NRI socket"
            if not self._synchronized:
                return False, "connected to NRI, waiting for Synchronize"
        return True, "ok"

    # State -----------------------------------------------------------------------------

    def record_checkpoint_write(self, seconds: float, ok: bool = True) -> None:
        """One checkpoint write and how long it took."""
        self.checkpoint_duration.observe(seconds)
        (self.checkpoint_writes if ok else self.checkpoint_failures).inc()

    def record_checkpoint_sync_failure(self) -> None:
        """A background fsync of a state file failed (called from the flusher thread)."""
        self.checkpoint_sync_failures.inc()

    def record_state_directory_lost(self) -> None:
        """The state directory or the journal was deleted or replaced (and written again)."""
        self.state_dir_lost.inc()

    def record_corrupt_checkpoint(self, kind: str) -> None:
        """A checkpoint or journal was found unusable (``kind``: one of ``CHECKPOINT_DAMAGE``)."""
        self.checkpoint_corrupt.labels(kind=kind).inc()

    def record_reconcile(self, action: str, count: int = 1) -> None:
        """Containers ``adopted``, ``corrected`` or ``released`` during reconciliation."""
        check_label(action, RECONCILE_ACTIONS, "action")
        self.reconciled.labels(action=action).inc(count)

    def device_lookup(self, result: str) -> None:
        """One lookup of a pod's devices on the kubelet's socket and its result
        (``DEVICE_LOOKUP_RESULTS``)."""
        check_label(result, DEVICE_LOOKUP_RESULTS, "result")
        self.device_lookups.labels(result=result).inc()

    def device_lookup_source(self, source: str) -> None:
        """Where one lookup of a pod's devices was answered (``DEVICE_LOOKUP_SOURCES``)."""
        check_label(source, DEVICE_LOOKUP_SOURCES, "source")
        self.device_lookup_sources.labels(source=source).inc()

    def dra_device_lookup(self, result: str) -> None:
        """One lookup of a pod's DRA claim devices at RunPodSandbox (``DRA_LOOKUP_RESULTS``)."""
        check_label(result, DRA_LOOKUP_RESULTS, "result")
        self.dra_device_lookups.labels(result=result).inc()

    def observe_podresources(self, method: str, code: str) -> None:
        """One PodResources request and its gRPC status code name."""
        self.podresources_requests.labels(method=method, code=code).inc()

    def hotplug_seen(self, action: str) -> None:
        """A CPU or memory hotplug event was received (``action``: online, offline, ...)."""
        self.hotplug_events.labels(action=action).inc()

    def hotplug_ignored_event(self, reason: str) -> None:
        """A hotplug uevent led to nothing (``HOTPLUG_IGNORED``)."""
        check_label(reason, HOTPLUG_IGNORED, "reason")
        self.hotplug_ignored.labels(reason=reason).inc()

    def hotplug_repaired(self, kind: str, count: int = 1) -> None:
        """Repairs made after a CPU hotplug (``HOTPLUG_REPAIRS``)."""
        check_label(kind, HOTPLUG_REPAIRS, "kind")
        self.hotplug_repairs.labels(kind=kind).inc(count)

    # Gauges computed from the plugin's view at scrape time ------------------------------

    def attach_view(self, view: PodResourcesView, topology: Topology) -> None:
        """Compute assignment counts and pool sizes from ``view`` at every scrape."""
        self._view = view
        self._topology = topology

    def update_view_gauges(self) -> None:
        """Recompute the view-derived gauges (no-op without an attached view)."""
        finish(self._view_gauge_steps())

    def _view_gauge_steps(self) -> Steps[None]:
        """:meth:`update_view_gauges`, yielding after each pod."""
        view, topology = self._view, self._topology
        if view is None or topology is None:
            return
        counts: dict[AssignmentType, int] = {}
        exclusive = CPUSet()
        pod_pools: dict[str, int] = {}
        for pod in view.pods():
            container_exclusive = CPUSet()
            for container in reported_containers(pod):
                a = container.assignment
                if a is None:
                    continue
                counts[a.assignment] = counts.get(a.assignment, 0) + 1
                if a.exclusive:
                    container_exclusive |= a.cpus
            exclusive |= container_exclusive | pod.cpus
            if pod.cpus:
                pod_pools[pod.uid] = len(pod.cpus - container_exclusive) * 1000
            yield
        self.set_container_assignments(counts)
        per_numa = {n: len(exclusive & node.cpus) for n, node in topology.numa_nodes.items()}
        self.set_pools(len(topology.all_cpus - exclusive) * 1000, pod_pools, per_numa)

    def exposition(self) -> bytes:
        """The text exposition of every metric (view-derived gauges refreshed first)."""
        return finish(self.exposition_steps())

    def exposition_steps(self) -> Steps[bytes]:
        """:meth:`exposition`, yielding after each pod and each metric family: the HTTP
        worker runs it with ``steps.beside_loop``, so the event loop's thread can take the GIL
        between them (500 pods held it for 3-5 ms in one piece)."""
        yield from self._view_gauge_steps()
        parts = []
        for family in self.registry.collect():
            parts.append(generate_latest(_OneFamily(family)))
            yield
        return b"".join(parts)


class _OneFamily:
    """A registry of one collected metric family, for ``generate_latest``."""

    def __init__(self, family: Metric) -> None:
        self.family = family

    def collect(self) -> Iterable[Metric]:
        return (self.family,)
