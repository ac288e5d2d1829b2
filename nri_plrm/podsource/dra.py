"""The devices of a pod's DRA ResourceClaims, with the NUMA nodes their drivers publish, for the
engine's device hints (API mode; the third device source of docs/design.md section 11).

The scheduler allocates a pod's claims before it binds the pod, so when the pod cache sees the
pod on this node its claims (``resource.k8s.io/v1``) carry ``status.allocation.devices.results``:
driver, pool and device of each allocated device. The devices' attributes are in the
ResourceSlices the drivers publish for this node (``fieldSelector=spec.nodeName=<node>``); a
device's NUMA node is, first found:

- ``resource.kubernetes.io/numaNode``, the standard attribute (an ``int``, or an ``ints`` list
  whose first item is the device's own node);
- the driver's own ``numaNode`` (``<driver>/numaNode`` or unqualified, e.g. ``dra.net/numaNode``);
- ``resource.kubernetes.io/pciBusID`` read through sysfs (``bus/pci/devices/<id>/numa_node``).

A device with none of them gives no hint. All of it happens off the request path: the pod cache
hands each pod object that names claims to :meth:`ClaimDevices.pod_seen`, a worker asks for the
claims (and lists the node's slices when an allocated device is not known, at most every
``RELIST_AFTER`` seconds) and keeps the result by pod UID; ``RunPodSandbox`` reads it, waiting for
a fetch still under way within what is left of the request's ``[kubernetes] lookup_timeout``.
Devices the kubelet's PodResources already
gave for a container's resource are kept (:func:`with_claim_devices`). Every answer is read
within a byte cap; a missing API group (older clusters) or RBAC refusal is logged once.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx2

from nri_plrm.engine.spec import Device, DeviceMap
from nri_plrm.podsource.background import QueueWorker

API = "/apis/resource.k8s.io/v1"
NUMA_ATTRIBUTE = "resource.kubernetes.io/numaNode"
PCI_BUS_ATTRIBUTE = "resource.kubernetes.io/pciBusID"
MAX_OBJECT_BYTES = 4 << 20
"""Bytes one claim may take (the API server stores objects of at most 1.5 MiB)."""
MAX_SLICES_BYTES = 64 << 20
"""Bytes the node's ResourceSlice list may take (128 devices per slice)."""
QUEUE = 1024
"""Pods waiting for their claims to be fetched; more are dropped (warned)."""
LOOKUP_RESULTS = ("found", "unknown")
"""``nri_plrm_dra_device_lookups_total`` results at ``RunPodSandbox`` of a pod naming claims:
its claims' devices known, or not known in time (the pod is decided without them, warned)."""
RELIST_AFTER = 5.0
"""Seconds between two lists of the node's ResourceSlices asked by an unknown device."""

DeviceKey = tuple[str, str, str]
"""(driver, pool, device)."""
DevicesByContainer = dict[str, DeviceMap]

_IDENTITY = {"Accept-Encoding": "identity", "Accept": "application/json"}
_log = logging.getLogger("nri_plrm.podsource.dra")


@dataclass(frozen=True)
class ClaimRef:
    """A container's use of one ResourceClaim object: its name and the request it is limited
    to (``""``: every request of the claim)."""

    claim: str
    request: str = ""

    def covers(self, request: str) -> bool:
        """True when an allocation result of ``request`` (``req`` or a subrequest
        ``req/sub``) is the container's."""
        return not self.request or request.split("/", 1)[0] == self.request


def pod_claims(obj: Mapping[str, Any]) -> dict[str, tuple[ClaimRef, ...]] | None:
    """Each container's claims in an API Pod object ({} when it names none); None while a
    claim made from a template has no name yet (``status.resourceClaimStatuses``)."""
    spec = _map(obj.get("spec"))
    status = _map(obj.get("status"))
    generated = {
        s.get("name"): s.get("resourceClaimName")
        for s in _list(status.get("resourceClaimStatuses"))
        if isinstance(s, Mapping)
    }
    names: dict[str, str | None] = {}
    for entry in _list(spec.get("resourceClaims")):
        if not isinstance(entry, Mapping) or not isinstance(entry.get("name"), str):
            continue
        direct = entry.get("resourceClaimName")
        names[entry["name"]] = direct if isinstance(direct, str) else generated.get(entry["name"])
    out: dict[str, tuple[ClaimRef, ...]] = {}
    for key in ("initContainers", "containers"):
        for container in _list(spec.get(key)):
            if not isinstance(container, Mapping) or not isinstance(container.get("name"), str):
                continue
            refs = []
            for use in _list(_map(container.get("resources")).get("claims")):
                if not isinstance(use, Mapping) or use.get("name") not in names:
                    continue
                claim = names[use["name"]]
                if not isinstance(claim, str) or not claim:
                    return None
                request = use.get("request")
                refs.append(ClaimRef(claim, request if isinstance(request, str) else ""))
            if refs:
                out[container["name"]] = tuple(refs)
    return out


def claim_results(obj: Mapping[str, Any]) -> tuple[tuple[str, DeviceKey], ...] | None:
    """The allocated devices of a ResourceClaim object as (request, (driver, pool, device));
    None when it is not allocated."""
    allocation = _map(_map(obj.get("status")).get("allocation"))
    if not allocation:
        return None
    out = []
    for result in _list(_map(allocation.get("devices")).get("results")):
        if not isinstance(result, Mapping):
            continue
        parts = (result.get("driver"), result.get("pool"), result.get("device"))
        if all(isinstance(p, str) and p for p in parts):
            request = result.get("request")
            out.append((request if isinstance(request, str) else "", parts))
    return tuple(out)  # type: ignore[arg-type]


def slice_devices(
    obj: Mapping[str, Any], pci_numa: Callable[[str], tuple[int, ...]]
) -> dict[DeviceKey, tuple[int, ...]]:
    """The NUMA nodes of each device in a ResourceSlice object (empty: none published)."""
    spec = _map(obj.get("spec"))
    driver, pool = spec.get("driver"), _map(spec.get("pool")).get("name")
    if not isinstance(driver, str) or not isinstance(pool, str):
        return {}
    out: dict[DeviceKey, tuple[int, ...]] = {}
    for device in _list(spec.get("devices")):
        if not isinstance(device, Mapping) or not isinstance(device.get("name"), str):
            continue
        attributes = _map(device.get("attributes")) or _map(
            _map(device.get("basic")).get("attributes")  # v1beta1's layout
        )
        out[(driver, pool, device["name"])] = device_numa(attributes, driver, pci_numa)
    return out


def device_numa(
    attributes: Mapping[str, Any], driver: str, pci_numa: Callable[[str], tuple[int, ...]]
) -> tuple[int, ...]:
    """A device's NUMA node from its attributes (see the module docstring)."""
    for name in (NUMA_ATTRIBUTE, f"{driver}/numaNode", "numaNode"):
        value = _map(attributes.get(name))
        number = value.get("int")
        if number is None:
            numbers = value.get("ints")
            number = numbers[0] if isinstance(numbers, list) and numbers else None
        if isinstance(number, int) and not isinstance(number, bool):
            return (number,) if number >= 0 else ()
    bus_id = _map(attributes.get(PCI_BUS_ATTRIBUTE)).get("string")
    return pci_numa(bus_id) if isinstance(bus_id, str) else ()


@dataclass
class _Pod:
    namespace: str
    claims: dict[str, tuple[ClaimRef, ...]]
    state: str = "queued"
    """``queued`` (a fetch to come), ``unallocated`` (a claim was not allocated: asked again at
    the pod's next update), ``done`` or ``failed`` (asked again at the pod's next update)."""
    devices: DevicesByContainer | None = None
    done: asyncio.Event = field(default_factory=asyncio.Event)
    """Set once ``done`` or ``failed``."""


class ClaimsUnavailable(Exception):
    """The API does not serve or refuses the DRA resources."""


class ClaimDevices:
    """Pods' claim devices by pod UID, fetched in the background (see the module docstring).

    ``http`` is an ``httpx2.AsyncClient`` with the cluster's base URL and credentials;
    ``pci_numa`` locates a PCI bus address (:meth:`nri_plrm.topology.device_numa.DeviceNUMA.pci`).
    """

    def __init__(
        self,
        http: httpx2.AsyncClient,
        node_name: str,
        pci_numa: Callable[[str], tuple[int, ...]],
        *,
        count: Callable[[str], None] | None = None,
        log: logging.Logger | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.http = http
        self.node_name = node_name
        self.pci_numa = pci_numa
        self.count = count
        """Receives the result of each lookup of a pod naming claims (``LOOKUP_RESULTS``)."""
        self.log = log or _log
        self.clock = clock
        self.slices: dict[DeviceKey, tuple[int, ...]] = {}
        self._listed_at: float | None = None
        self._pods: dict[str, _Pod] = {}
        self._refused = ""
        self._worker: QueueWorker[str] = QueueWorker("dra-claims", QUEUE, self._fetch, self._failed)

    def start(self) -> None:
        """Run the worker in the running loop."""
        self._worker.start()

    async def stop(self) -> None:
        """Stop the worker."""
        await self._worker.stop()

    def pod_seen(self, uid: str, obj: Mapping[str, Any]) -> None:
        """A pod object of this node (list or watch): fetch its claims' devices when it names
        claims not fetched yet."""
        claims = pod_claims(obj)
        if not claims:
            if claims is not None:
                self._pods.pop(uid, None)
            return
        known = self._pods.get(uid)
        if known is not None and known.claims == claims and known.state in ("queued", "done"):
            return
        namespace = _map(obj.get("metadata")).get("namespace")
        pod = _Pod(namespace if isinstance(namespace, str) else "default", claims)
        if known is not None and not known.done.is_set():
            pod.done = known.done  # its waiters wait for this fetch
        self._pods[uid] = pod
        if not self._worker.put(uid):
            self.log.warning("DRA claims of pod %s not fetched: %d pods already queued", uid, QUEUE)
            pod.state = "failed"
            pod.done.set()

    def pod_gone(self, uid: str) -> None:
        """The pod left the node."""
        self._pods.pop(uid, None)

    async def devices(self, uid: str, timeout: float) -> DevicesByContainer | None:
        """The pod's claim devices by container (None: it names no claim, or they are not
        known within ``timeout`` seconds)."""
        pod = self._pods.get(uid)
        if pod is None:
            return None
        if not pod.done.is_set() and timeout > 0:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(pod.done.wait(), timeout)
        if self.count is not None:
            self.count("found" if pod.devices is not None else "unknown")
        if pod.devices is None:
            self.log.warning(
                "pod %s: the devices of its DRA claims are not known (%s) within %.0f ms; "
                "deciding without them",
                uid,
                "fetch failed" if pod.state == "failed" else f"claims {pod.state}",
                timeout * 1000,
            )
        return pod.devices

    async def drain(self) -> None:
        """Wait until every queued pod was fetched (tests)."""
        await self._worker.drain()

    async def _fetch(self, uid: str) -> None:
        pod = self._pods.get(uid)
        if pod is None or pod.state != "queued":
            return
        results: dict[str, tuple[tuple[str, DeviceKey], ...]] = {}
        for refs in pod.claims.values():
            for ref in refs:
                if ref.claim in results:
                    continue
                claim = await self._get(
                    f"{API}/namespaces/{pod.namespace}/resourceclaims/{ref.claim}"
                )
                allocated = claim_results(claim) if claim is not None else None
                if allocated is None:
                    pod.state = "unallocated"  # the pod's next update asks again
                    return
                results[ref.claim] = allocated
        keys = {key for found in results.values() for _, key in found}
        if keys - self.slices.keys() and self._may_relist():
            await self._list_slices()
        devices: DevicesByContainer = {}
        for container, refs in pod.claims.items():
            by_resource: dict[str, list[Device]] = {}
            for ref in refs:
                for request, (driver, pool, name) in results[ref.claim]:
                    if not ref.covers(request):
                        continue
                    device = Device(f"{pool}/{name}", self.slices.get((driver, pool, name), ()))
                    listed = by_resource.setdefault(driver, [])
                    if device not in listed:
                        listed.append(device)
            if by_resource:
                devices[container] = {r: tuple(d) for r, d in by_resource.items()}
        pod.state, pod.devices = "done", devices
        pod.done.set()

    def _may_relist(self) -> bool:
        return self._listed_at is None or self.clock() - self._listed_at >= RELIST_AFTER

    async def _list_slices(self) -> None:
        """The NUMA nodes of this node's devices from its ResourceSlices (all pages)."""
        self._listed_at = self.clock()
        found: dict[DeviceKey, tuple[int, ...]] = {}
        cont, budget = "", MAX_SLICES_BYTES
        while True:
            params = {"fieldSelector": f"spec.nodeName={self.node_name}", "limit": "500"}
            if cont:
                params["continue"] = cont
            page, size = await self._read(f"{API}/resourceslices", params, budget)
            budget -= size
            if page is None:
                return
            for item in _list(page.get("items")):
                if isinstance(item, Mapping):
                    found.update(slice_devices(item, self.pci_numa))
            cont = _map(page.get("metadata")).get("continue") or ""
            if not cont:
                break
        self.slices = found

    async def _get(self, path: str) -> Mapping[str, Any] | None:
        obj, _ = await self._read(path, {}, MAX_OBJECT_BYTES)
        return obj

    async def _read(
        self, path: str, params: Mapping[str, str], cap: int
    ) -> tuple[Mapping[str, Any] | None, int]:
        """The JSON object at ``path`` and its size; None (with the size) on 404. Raises
        :class:`ClaimsUnavailable` for a 403 or an API without the group, ValueError for an
        answer past ``cap`` bytes or not a JSON object, and the connection's errors."""
        decoder = codecs.getincrementaldecoder("utf-8")()
        parts: list[str] = []
        size = 0
        async with self.http.stream("GET", path, params=params, headers=_IDENTITY) as response:
            async for chunk in response.aiter_bytes():
                size += len(chunk)
                if size > cap:
                    raise ValueError(f"GET {path}: answer larger than {cap} bytes: refused")
                parts.append(decoder.decode(chunk))
            code = response.status_code
        parts.append(decoder.decode(b"", final=True))
        text = "".join(parts)
        if code == 404:
            if _not_found_kind(text) == "resourceclaims":  # that claim does not exist
                return None, size
            raise ClaimsUnavailable(f"HTTP 404: the API server serves no {API}")
        if code == 403:
            raise ClaimsUnavailable(
                "HTTP 403: no RBAC permission to get resourceclaims and list resourceslices "
                "(resource.k8s.io)"
            )
        if code >= 300:
            raise ValueError(f"GET {path}: HTTP {code}")
        obj = json.loads(text)
        if not isinstance(obj, Mapping):
            raise ValueError(f"GET {path}: not a JSON object")
        return obj, size

    def _failed(self, uid: str, exc: Exception) -> None:
        pod = self._pods.get(uid)
        if pod is not None:
            pod.state = "failed"
            pod.done.set()
        message = str(exc) or type(exc).__name__
        if isinstance(exc, ClaimsUnavailable):
            if message != self._refused:
                self.log.warning("DRA claim devices: %s; no DRA device hints", message)
            self._refused = message
            return
        self.log.warning("DRA claim devices of pod %s: %s; no DRA device hints", uid, message)


async def with_claim_devices(
    source: ClaimDevices | None, uid: str, found: DevicesByContainer | None, timeout: float
) -> DevicesByContainer | None:
    """``found`` (the kubelet's devices by container) with the pod's claim devices for the
    resources the kubelet gave none for, waiting at most ``timeout`` seconds for them."""
    if source is None:
        return found
    claimed = await source.devices(uid, timeout)
    if not claimed:
        return found
    merged: DevicesByContainer = {c: dict(m) for c, m in (found or {}).items()}
    for container, by_resource in claimed.items():
        have = dict(merged.get(container, {}))
        for resource, devices in by_resource.items():
            have.setdefault(resource, devices)
        merged[container] = have
    return merged


def _not_found_kind(text: str) -> object:
    """The kind a 404 ``Status`` names (``details.kind``); None for another answer (an API
    server without the group answers a plain ``404 page not found``)."""
    try:
        status = json.loads(text)
    except ValueError:
        return None
    return _map(_map(status).get("details")).get("kind")


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []
