"""This node's NodeResourceTopology (``topology.node.k8s.io/v1alpha2``) for NUMA-aware scheduling.

scheduler-plugins' ``NodeResourceTopologyMatch`` reads one cluster-scoped object per node,
named after the node: one zone per NUMA node (type ``Node``, named ``node-<id>``, costs from
the distance table) with ``cpu``, ``memory`` and hugepages as capacity, allocatable and
available, and the topology manager's policy and scope as top-level attributes. The numbers
are :func:`nri_plrm.engine.availability.free_per_numa` of the engine's state.

``NodeTopologyExporter.mark_dirty`` is the only call on an NRI handler's path: it sets a flag.
A background task waits for the flag, builds the object from the state at that moment and
writes it: the first change after a quiet second at once, later ones coalesced to at most one
write per ``interval`` (so every change is published within ``interval``). Failed writes keep
the flag and are retried with bounded exponential back-off (an API outage is logged once);
a ``404`` (the object was deleted), ``409`` (someone else wrote it) or ``410`` re-reads the
object's ``resourceVersion`` and writes again. Identical content is not written twice; every
``resync`` seconds the object is read back and rewritten if it drifted.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.generic_resource import create_global_resource
from lightkube.resources.core_v1 import Node

from nri_plrm.engine.availability import NumaAvailability
from nri_plrm.engine.topology_manager import (
    POLICY_BEST_EFFORT,
    POLICY_RESTRICTED,
    POLICY_SINGLE_NUMA_NODE,
    SCOPE_POD,
)
from nri_plrm.observability.metrics import Metrics
from nri_plrm.podsource.background import BackgroundTask
from nri_plrm.podsource.fingerprint import METHOD_ALL, fingerprint
from nri_plrm.podsource.kube import Backoff, describe_failure
from nri_plrm.podsource.nrt_exact_state import ExactAttributes, pods_attribute
from nri_plrm.topology.model import Topology

GROUP = "topology.node.k8s.io"
VERSION = "v1alpha2"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "NodeResourceTopology"
PLURAL = "noderesourcetopologies"
ZONE_TYPE = "Node"
"""Zone type of a NUMA node, as NFD's topology-updater and the scheduler plugin spell it."""
ATTR_POLICY = "topologyManagerPolicy"
ATTR_SCOPE = "topologyManagerScope"
ATTR_MAX_NUMA_NODES = "topologyManagerMaxNUMANodes"
ATTR_FINGERPRINT = "nodeTopologyPodsFingerprint"
ATTR_FINGERPRINT_METHOD = "nodeTopologyPodsFingerprintMethod"
MANAGED_BY = "nri-plrm"
WRITE_INTERVAL = 1.0
"""Minimum seconds between two writes (and the longest a change waits to be published)."""
RESYNC = 300.0
"""Seconds after which the object is read back and rewritten if it drifted."""
RETRIES = 5
"""Re-reads after 404/409/410 within one write before it counts as failed."""

NodeResourceTopology = create_global_resource(GROUP, VERSION, KIND, PLURAL)
"""The lightkube resource class of the custom resource."""

_RECOVERABLE = frozenset({404, 409, 410})

# The deprecated ``topologyPolicies`` value (v1alpha2 keeps it for older schedulers).
_LEGACY_POLICY = {
    POLICY_SINGLE_NUMA_NODE: "SingleNUMANode",
    POLICY_RESTRICTED: "Restricted",
    POLICY_BEST_EFFORT: "BestEffort",
}


def zone_name(node: int) -> str:
    """A NUMA node's zone name: ``node-<id>``."""
    return f"node-{node}"


def legacy_policy(policy: str, scope: str) -> str:
    """The deprecated ``topologyPolicies`` entry, e.g. ``SingleNUMANodePodLevel``; ``None``
    for the ``none`` policy."""
    base = _LEGACY_POLICY.get(policy)
    if base is None:
        return "None"
    return base + ("PodLevel" if scope == SCOPE_POD else "ContainerLevel")


def nrt_object(
    node_name: str,
    node_uid: str,
    free: Sequence[NumaAvailability],
    topology: Topology,
    policy: str,
    scope: str,
    pods: Iterable[tuple[str, str]] = (),
    max_numa_nodes: int | None = None,
    exact: ExactAttributes | None = None,
) -> dict[str, Any]:
    """The NodeResourceTopology object for this node (no ``resourceVersion``): ``pods`` are
    the (namespace, name) of the pods its numbers account for (the fingerprint attribute);
    ``max_numa_nodes`` is published when the topology manager's option is set; ``exact``
    adds the exact state for the scheduler extender (``nri_plrm.podsource.nrt_exact_state``)."""
    pods = tuple(pods)
    attributes = [
        {"name": ATTR_POLICY, "value": policy},
        {"name": ATTR_SCOPE, "value": scope},
    ]
    if max_numa_nodes is not None:
        attributes.append({"name": ATTR_MAX_NUMA_NODES, "value": str(max_numa_nodes)})
    attributes.append({"name": ATTR_FINGERPRINT, "value": fingerprint(pods)})
    attributes.append({"name": ATTR_FINGERPRINT_METHOD, "value": METHOD_ALL})
    if exact is not None:
        attributes.extend(dict(a) for a in exact.top)
        attributes.append(pods_attribute(pods))
    zones = []
    for numa in free:
        row = topology.numa_nodes[numa.node].distances
        zone: dict[str, Any] = {
            "name": zone_name(numa.node),
            "type": ZONE_TYPE,
            "costs": [
                {"name": zone_name(other), "value": int(row[other])}
                for other in topology.numa_ids
                if other in row
            ],
            "resources": [
                {
                    "name": r.name,
                    "capacity": str(r.capacity),
                    "allocatable": str(r.allocatable),
                    "available": str(r.available),
                }
                for r in numa.resources
            ],
        }
        if exact is not None and numa.node in exact.zones:
            zone["attributes"] = [dict(a) for a in exact.zones[numa.node]]
        zones.append(zone)
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {
            "name": node_name,
            "labels": {"app.kubernetes.io/managed-by": MANAGED_BY},
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Node", "name": node_name, "uid": node_uid}
            ],
        },
        "topologyPolicies": [legacy_policy(policy, scope)],
        "zones": zones,
        "attributes": attributes,
    }


def _content(obj: Mapping[str, Any]) -> tuple[Any, ...]:
    """The parts of an object this exporter owns, for comparison."""
    meta = obj.get("metadata") or {}
    return (
        obj.get("topologyPolicies"),
        obj.get("zones"),
        obj.get("attributes"),
        meta.get("ownerReferences"),
    )


class NodeTopologyExporter:
    """Keeps this node's NodeResourceTopology current; see the module docstring.

    ``attach(state)`` gives the function that reads the free resources per NUMA node (called
    on the event loop, between NRI events); ``start()`` runs the writer in the running loop,
    ``stop()`` ends it.
    """

    def __init__(
        self,
        client: AsyncClient,
        node_name: str,
        topology: Topology,
        policy: str,
        scope: str,
        *,
        metrics: Metrics | None = None,
        logger: logging.Logger | None = None,
        interval: float = WRITE_INTERVAL,
        resync: float = RESYNC,
        backoff: Backoff | None = None,
        max_numa_nodes: int | None = None,
    ) -> None:
        if not node_name:
            raise ValueError("kubernetes.node_name '': the NodeResourceTopology needs a name")
        self.client = client
        self.node_name = node_name
        self.topology = topology
        self.policy = policy
        self.scope = scope
        self.metrics = metrics
        self.log = logger or logging.getLogger("nri_plrm.podsource.nrt")
        self.interval = interval
        self.resync = resync
        self.backoff = backoff or Backoff()
        self.max_numa_nodes = max_numa_nodes
        self._state: Callable[[], Sequence[NumaAvailability]] | None = None
        self._pods: Callable[[], Iterable[tuple[str, str]]] = tuple
        self._exact: Callable[[], ExactAttributes] | None = None
        self._foreign: set[str] = set()
        self._dirty = asyncio.Event()
        self._idle = asyncio.Event()
        self._runner = BackgroundTask("nrt-export", self._run)
        self._node_uid: str | None = None
        self._rv: str | None = None
        self._written: tuple[Any, ...] | None = None
        self._verify = True
        self._last_attempt: float | None = None
        self._failures = 0

    def attach(
        self,
        state: Callable[[], Sequence[NumaAvailability]],
        pods: Callable[[], Iterable[tuple[str, str]]] = tuple,
        exact: Callable[[], ExactAttributes] | None = None,
    ) -> None:
        """Set the functions that read the free resources per NUMA node, the (namespace,
        name) of the pods they account for and the exact state for the scheduler extender
        (read together, between NRI events)."""
        self._state = state
        self._pods = pods
        self._exact = exact
        self.mark_dirty()

    def mark_dirty(self) -> None:
        """Note that allocations changed (cheap; safe on an NRI handler's path)."""
        self._idle.clear()
        self._dirty.set()

    def start(self) -> asyncio.Task[None]:
        """Run the writer in the running loop (the first write follows at once)."""
        return self._runner.start()

    async def stop(self) -> None:
        """Stop writing."""
        await self._runner.stop()

    async def settled(self) -> None:
        """Wait until the last change is written (or found unchanged)."""
        await self._idle.wait()

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            if not self._dirty.is_set():
                self._idle.set()
                try:
                    await asyncio.wait_for(self._dirty.wait(), self.resync)
                except asyncio.TimeoutError:
                    self._verify = True
                    self._dirty.set()
            if self._last_attempt is not None:
                wait = self._last_attempt + self.interval - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
            if self._state is None:
                self._dirty.clear()
                continue
            self._dirty.clear()
            self._last_attempt = loop.time()
            try:
                exact = self._exact() if self._exact is not None else None
                await self._publish(self._state(), tuple(self._pods()), exact)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the API's and the connection's failures alike
                self._failed(exc)
                self._dirty.set()
                await asyncio.sleep(self.backoff.delay(self._failures))
            else:
                self._succeeded()

    async def _publish(
        self,
        free: Sequence[NumaAvailability],
        pods: Sequence[tuple[str, str]],
        exact: ExactAttributes | None = None,
    ) -> None:
        for _ in range(RETRIES):
            fresh_uid = self._node_uid is None
            if self._node_uid is None:
                self._node_uid = await self._read_node_uid()
            body = self._body(free, pods, exact)
            content = _content(body)
            if not self._verify and self._rv is not None and content == self._written:
                return
            if self._rv is None or self._verify:
                current = await self._read()
                self._verify = False
                if current is None:
                    # created (again): the Node may have been recreated with a new uid
                    if not fresh_uid:
                        self._node_uid = await self._read_node_uid()
                    if await self._write(self._body(free, pods, exact), create=True):
                        return
                    continue
                self._note_writers(current)
                self._rv = str(current.get("metadata", {}).get("resourceVersion", ""))
                if _content(current) == content:
                    self._written = content
                    return
            body["metadata"]["resourceVersion"] = self._rv
            if await self._write(body, create=False):
                return
        raise RuntimeError(
            f"NodeResourceTopology {self.node_name}: still conflicting after {RETRIES} re-reads"
        )

    def _body(
        self,
        free: Sequence[NumaAvailability],
        pods: Sequence[tuple[str, str]],
        exact: ExactAttributes | None,
    ) -> dict[str, Any]:
        return nrt_object(
            self.node_name,
            self._node_uid or "",
            free,
            self.topology,
            self.policy,
            self.scope,
            pods,
            self.max_numa_nodes,
            exact,
        )

    def _note_writers(self, current: Mapping[str, Any]) -> None:
        """Warn once per other writer of the object (its ``managedFields``), and count it:
        NFD's topology-updater, for one, writes an object of the same name."""
        for entry in (current.get("metadata") or {}).get("managedFields") or ():
            manager = str((entry or {}).get("manager", ""))
            if not manager or manager == MANAGED_BY or manager in self._foreign:
                continue
            self._foreign.add(manager)
            self._count("foreign_writer")
            self.log.warning(
                "NodeResourceTopology %s is also written by %r: two writers overwrite each "
                "other's numbers; stop the other one (docs/kubernetes-api.md)",
                self.node_name,
                manager,
            )

    async def _read_node_uid(self) -> str:
        node = await self.client.get(Node, self.node_name)
        uid = node.metadata.uid if node.metadata is not None else None
        if not uid:
            raise RuntimeError(f"node {self.node_name!r}: the API returned it without a uid")
        return uid

    async def _read(self) -> dict[str, Any] | None:
        try:
            current = await self.client.get(NodeResourceTopology, self.node_name)
        except ApiError as exc:
            if exc.status.code == 404:
                return None
            raise
        data = dict(current)
        meta = data.get("metadata")
        if meta is not None and not isinstance(meta, Mapping):
            data["metadata"] = meta.to_dict()
        return data

    async def _write(self, body: dict[str, Any], *, create: bool) -> bool:
        """Create or replace; False (state forgotten, to be re-read) on 404/409/410."""
        obj = NodeResourceTopology.from_dict(body)
        try:
            if create:
                result = await self.client.create(obj, field_manager=MANAGED_BY)
            else:
                result = await self.client.replace(obj, field_manager=MANAGED_BY)
        except ApiError as exc:
            if create and exc.status.code == 404:
                raise RuntimeError(
                    f"HTTP 404 creating NodeResourceTopology {self.node_name}: the CRD "
                    f"{PLURAL}.{GROUP} is not installed (the chart's crds/ or "
                    "packaging/kubernetes/noderesourcetopologies-crd.yaml)"
                ) from exc
            if exc.status.code not in _RECOVERABLE:
                raise
            self.log.info(
                "NodeResourceTopology %s: HTTP %s on %s, re-reading it",
                self.node_name,
                exc.status.code,
                "create" if create else "update",
            )
            self._count("conflict")
            self._rv = None
            return False
        meta = result.metadata
        self._rv = meta.resourceVersion if meta is not None else None
        self._written = _content(body)
        self._count("written")
        return True

    def _succeeded(self) -> None:
        if self._failures:
            self.log.warning(
                "NodeResourceTopology %s written again after %d failed attempt(s)",
                self.node_name,
                self._failures,
            )
        self._failures = 0

    def _failed(self, exc: BaseException) -> None:
        self._failures += 1
        self._count("failed")
        self._rv = None
        if self._failures == 1:
            self.log.warning(
                "NodeResourceTopology %s not written (%s); retrying with back-off",
                self.node_name,
                describe_failure(exc),
            )
        else:
            self.log.debug("NodeResourceTopology write failed again: %s", describe_failure(exc))

    def _count(self, result: str) -> None:
        if self.metrics is not None:
            self.metrics.node_resource_topology_write(result)
