"""Each container's allocated devices from the kubelet's PodResources socket, at
``RunPodSandbox``, for the engine's device hints (:mod:`nri_plrm.engine.device_manager`).

The kubelet allocates devices at admission, before it asks for the sandbox, so PodResources
``Get`` of the pod already lists them with the NUMA nodes their device plugin reported. The call
is on containerd's node-wide lock path: it is bounded by ``[pod_resources] device_timeout``
(well under the NRI request timeout) and runs on the event loop (``grpc.aio``), so the handler
waits at most that long; when the kubelet does not answer in time (or fails) the pod is decided
without device hints, with a WARNING and ``nri_plrm_device_lookups_total{result}``.

The node's device inventory (``GetAllocatableResources``, what the Device Manager's preferred
width is measured on) is asked in the same step, concurrently and under the same deadline,
when the one held is older than ``INVENTORY_TTL`` seconds.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import grpc
import grpc.aio
from google.protobuf.message import Message

from nri_plrm.engine.device_manager import DeviceManager
from nri_plrm.engine.facade import Engine
from nri_plrm.engine.spec import Device, DeviceMap, PodSpec
from nri_plrm.podresources.client import MAX_MESSAGE_BYTES, SERVICE
from nri_plrm.proto import nri_api_pb2 as api
from nri_plrm.proto import podresources_api_pb2 as pb
from nri_plrm.translate.nri_to_pod import PodIntent

INVENTORY_TTL = 60.0
"""Seconds the node's device inventory is used before it is asked again."""
LOOKUP_RESULTS = ("found", "none", "timeout", "failed")
"""``nri_plrm_device_lookups_total`` results: devices found, the pod holds none, the kubelet
did not answer within the deadline, the kubelet answered with an error."""

DevicesByContainer = dict[str, DeviceMap]
NodeInventory = dict[str, tuple[tuple[int, ...], ...]]

_log = logging.getLogger(__name__)
_M = TypeVar("_M", bound=Message)


def _devices(entries: Iterable[pb.ContainerDevices]) -> dict[str, tuple[Device, ...]]:
    """One container's ``devices`` entries as allocated devices per resource (an entry lists
    ids sharing one topology)."""
    out: dict[str, list[Device]] = {}
    for entry in entries:
        nodes = tuple(sorted({int(n.ID) for n in entry.topology.nodes if n.ID >= 0}))
        listed = out.setdefault(entry.resource_name, [])
        listed.extend(Device(str(device_id), nodes) for device_id in entry.device_ids)
    return {resource: tuple(listed) for resource, listed in out.items() if listed}


def containers_devices(reply: pb.GetPodResourcesResponse) -> DevicesByContainer:
    """Each container's allocated devices in a ``Get`` reply (containers without any left out)."""
    out: DevicesByContainer = {}
    for container in reply.pod_resources.containers:
        devices = _devices(container.devices)
        if devices:
            out[container.name] = devices
    return out


def node_devices(reply: pb.AllocatableResourcesResponse) -> NodeInventory:
    """The node's devices per resource (NUMA nodes of each) in a ``GetAllocatableResources``
    reply."""
    return {r: tuple(d.numa_nodes for d in listed) for r, listed in _devices(reply.devices).items()}


def _serialize(message: Message) -> bytes:
    return message.SerializeToString()


class KubeletDevices:
    """Looks up a pod's devices on the kubelet's PodResources socket within a deadline.

    The calls run on the event loop (``grpc.aio``, one channel per loop): waiting for the
    kubelet holds no thread, and the loop serves the plugin's other work meanwhile.
    """

    def __init__(
        self,
        socket_path: str,
        deadline: float,
        *,
        count: Callable[[str], None] | None = None,
        log: logging.Logger | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``deadline``: seconds a lookup may take; ``count`` receives each lookup's result
        (one of ``LOOKUP_RESULTS``)."""
        self.socket_path = socket_path
        self.deadline = deadline
        self.count = count
        self.log = log or _log
        self.clock = clock
        self.inventory: NodeInventory | None = None
        self._inventory_at = 0.0
        self._channel: tuple[asyncio.AbstractEventLoop, grpc.aio.Channel] | None = None
        self._calls: dict[str, Any] = {}

    def _callable(self, method: str, reply: type[Message]) -> Any:
        """The method's callable on the channel of the running loop (opened on first use)."""
        loop = asyncio.get_running_loop()
        if self._channel is None or self._channel[0] is not loop:
            channel = grpc.aio.insecure_channel(
                f"unix://{self.socket_path}",
                options=[("grpc.max_receive_message_length", MAX_MESSAGE_BYTES)],
            )
            self._channel = (loop, channel)
            self._calls = {}
        call = self._calls.get(method)
        if call is None:
            call = self._calls[method] = self._channel[1].unary_unary(
                SERVICE + method,
                request_serializer=_serialize,
                response_deserializer=reply.FromString,
            )
        return call

    async def _call(self, method: str, request: Message, reply: type[_M]) -> _M | str:
        """The reply, or the gRPC status code name of the failure."""
        call = self._callable(method, reply)
        try:
            result: _M = await call(request, timeout=self.deadline)
        except grpc.RpcError as exc:
            return str(exc.code().name)
        return result

    async def lookup(self, namespace: str, name: str) -> DevicesByContainer | None:
        """The pod's devices by container name; None when the kubelet did not answer in time
        or failed (warned and counted)."""
        now = self.clock()
        stale = self.inventory is None or now - self._inventory_at >= INVENTORY_TTL
        request = pb.GetPodResourcesRequest(pod_name=name, pod_namespace=namespace)
        get = self._call("Get", request, pb.GetPodResourcesResponse)
        if stale:
            inventory_request = pb.AllocatableResourcesRequest()
            reply, inventory = await asyncio.gather(
                get,
                self._call(
                    "GetAllocatableResources", inventory_request, pb.AllocatableResourcesResponse
                ),
            )
            if not isinstance(inventory, str):
                self.inventory = node_devices(inventory)
                self._inventory_at = now
        else:
            reply = await get
        if isinstance(reply, str):
            result = "timeout" if reply == "DEADLINE_EXCEEDED" else "failed"
            self._count(result)
            self.log.warning(
                "pod %s/%s: the kubelet's PodResources Get on %s %s (%s); deciding without "
                "device hints",
                namespace,
                name,
                self.socket_path,
                f"did not answer within {self.deadline * 1000:.0f} ms"
                if result == "timeout"
                else "failed",
                reply,
            )
            return None
        found = containers_devices(reply)
        self._count("found" if found else "none")
        return found

    async def close(self) -> None:
        """Close the channel (of the running loop)."""
        if self._channel is not None:
            channel, self._channel = self._channel[1], None
            self._calls = {}
            await channel.close()

    def _count(self, result: str) -> None:
        if self.count is not None:
            self.count(result)

    def feed(self, devices: DeviceManager) -> None:
        """Give the engine's device manager the node's inventory when it changed."""
        if self.inventory is not None and devices.node_devices != self.inventory:
            devices.set_node_devices(self.inventory)


async def sandbox_devices(
    source: KubeletDevices | None, engine: Engine, pod: api.PodSandbox
) -> DevicesByContainer | None:
    """The sandbox's pod's devices by container from ``source`` (None without a source, or
    when the kubelet did not answer); the engine gets the node's device inventory."""
    if source is None:
        return None
    found = await source.lookup(pod.namespace or "default", pod.name)
    source.feed(engine.device_manager)
    return found


def with_devices(
    found: DevicesByContainer | None, spec: PodSpec | None, intent: PodIntent
) -> tuple[PodSpec | None, PodIntent]:
    """``spec`` and ``intent`` with the pod's devices (unchanged when it holds none)."""
    if not found:
        return spec, intent
    if spec is not None:
        spec = dataclasses.replace(spec, devices=found)
    return spec, dataclasses.replace(intent, spec=dataclasses.replace(intent.spec, devices=found))
