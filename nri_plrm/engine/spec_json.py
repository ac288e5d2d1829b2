"""JSON-able forms of ``PodSpec`` and ``ContainerSpec``, shared by every state file that stores a
pod spec (the engine snapshot, the plugin's intents and decision journal). Readers ignore keys
they do not know."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from nri_plrm.engine.spec import ContainerKind, ContainerSpec, Device, DeviceMap, PodSpec

T = TypeVar("T")

INIT_CONTAINERS_KEY = "init_containers"
"""Default key of a pod's init containers; the engine snapshot uses ``initContainers``."""


def devices_to_dict(devices: DeviceMap) -> dict[str, list[dict[str, Any]]]:
    """A JSON-able form of allocated devices per resource."""
    return {
        resource: [{"id": d.id, "numaNodes": list(d.numa_nodes)} for d in listed]
        for resource, listed in devices.items()
    }


def devices_from_dict(d: Mapping[str, Any]) -> dict[str, tuple[Device, ...]]:
    """The inverse of :func:`devices_to_dict`."""
    return {
        str(resource): tuple(
            Device(str(e["id"]), tuple(int(n) for n in e.get("numaNodes", ()))) for e in listed
        )
        for resource, listed in d.items()
    }


def container_to_dict(c: ContainerSpec) -> dict[str, Any]:
    """A JSON-able form of a ``ContainerSpec`` (``devices`` only when it holds some)."""
    out: dict[str, Any] = {
        "name": c.name,
        "kind": c.kind.value,
        "requests": dict(c.requests),
        "limits": dict(c.limits),
    }
    if c.devices:
        out["devices"] = devices_to_dict(c.devices)
    return out


def container_from_dict(d: Mapping[str, Any]) -> ContainerSpec:
    """The inverse of :func:`container_to_dict`."""
    return ContainerSpec(
        name=str(d["name"]),
        kind=ContainerKind(d.get("kind", ContainerKind.APP.value)),
        requests={str(k): int(v) for k, v in d.get("requests", {}).items()},
        limits={str(k): int(v) for k, v in d.get("limits", {}).items()},
        devices=devices_from_dict(d.get("devices", {})),
    )


def spec_to_dict(spec: PodSpec, init_key: str = INIT_CONTAINERS_KEY) -> dict[str, Any]:
    """A JSON-able form of a ``PodSpec``; its init containers under ``init_key`` (``devices``
    only when it holds some)."""
    out: dict[str, Any] = {
        "uid": spec.uid,
        "namespace": spec.namespace,
        "name": spec.name,
        init_key: [container_to_dict(c) for c in spec.init_containers],
        "containers": [container_to_dict(c) for c in spec.containers],
        "requests": None if spec.requests is None else dict(spec.requests),
        "limits": None if spec.limits is None else dict(spec.limits),
    }
    if spec.devices:
        out["devices"] = {n: devices_to_dict(d) for n, d in spec.devices.items()}
    return out


def spec_from_dict(d: Mapping[str, Any], init_key: str = INIT_CONTAINERS_KEY) -> PodSpec:
    """The inverse of :func:`spec_to_dict` with the same ``init_key``."""

    def resources(value: Any) -> dict[str, int] | None:
        return None if value is None else {str(k): int(v) for k, v in value.items()}

    return PodSpec(
        uid=str(d["uid"]),
        namespace=str(d.get("namespace", "default")),
        name=str(d.get("name", "")),
        init_containers=tuple(container_from_dict(c) for c in d.get(init_key, ())),
        containers=tuple(container_from_dict(c) for c in d.get("containers", ())),
        requests=resources(d.get("requests")),
        limits=resources(d.get("limits")),
        devices={str(n): devices_from_dict(m) for n, m in d.get("devices", {}).items()},
    )


class KeptForms:
    """JSON-able forms of frozen objects (specs, intents) kept from one snapshot to the next, so
    that a pod still there is not converted again: a fold's copy of the state is taken in one
    step of the event loop. A kept form is shared by every snapshot that uses it, so its
    readers must not change it (the checkpoint encoder only reads)."""

    def __init__(self) -> None:
        self._kept: dict[int, tuple[object, Any]] = {}
        self._used: dict[int, tuple[object, Any]] = {}

    def form(self, obj: T, convert: Callable[[T], Any]) -> Any:
        """``convert(obj)``, or the form kept for this very object (it is frozen). One instance
        serves one ``convert`` per kind of object."""
        key = id(obj)  # not reused meanwhile: an entry keeps its object alive
        entry = self._used.get(key) or self._kept.get(key)
        if entry is None:
            entry = (obj, convert(obj))
        self._used[key] = entry
        return entry[1]

    def done(self) -> None:
        """End a snapshot: keep what it used, forget the rest (removed pods)."""
        self._kept, self._used = self._used, {}
