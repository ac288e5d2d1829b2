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

With the kubelet's device checkpoint (``[pod_resources] kubelet_device_checkpoint``,
:mod:`nri_plrm.podresources.device_checkpoint`) the pod's devices are usually known without a
call: the checkpoint, kept current in the background and keyed by pod UID, answers when it is
certain to be current, and ``Get`` is asked only otherwise; the inventory is then refreshed in
the background.
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
from nri_plrm.podresources.device_checkpoint import DeviceCheckpoint
from nri_plrm.proto import nri_api_pb2 as api
from nri_plrm.proto import podresources_api_pb2 as pb
from nri_plrm.translate.nri_to_pod import PodIntent

INVENTORY_TTL = 60.0
"""Seconds the node's device inventory is used before it is asked again."""
LOOKUP_RESULTS = ("found", "none", "timeout", "failed")
"""``nri_plrm_device_lookups_total`` results: devices found, the pod holds none, the kubelet
did not answer within the deadline, the kubelet answered with an error."""
LOOKUP_SOURCES = ("checkpoint", "socket")
"""``nri_plrm_device_lookup_sources_total`` sources: the kubelet's device checkpoint answered
(no call), or the kubelet's socket was asked."""

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
        count_source: Callable[[str], None] | None = None,
        log: logging.Logger | None = None,
        clock: Callable[[], float] = time.monotonic,
        checkpoint: DeviceCheckpoint | None = None,
    ) -> None:
        """``deadline``: seconds a lookup may take; ``count`` receives each lookup's result
        (one of ``LOOKUP_RESULTS``), ``count_source`` where it came from (``LOOKUP_SOURCES``);
        ``checkpoint``: the kubelet's device checkpoint, asked first."""
        self.socket_path = socket_path
        self.deadline = deadline
        self.count = count
        self.count_source = count_source
        self.checkpoint = checkpoint
        self._checkpoint_loop: asyncio.AbstractEventLoop | None = None
        self._inventory_task: asyncio.Task[None] | None = None
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

    def start(self) -> None:
        """Start following the device checkpoint and asking the inventory, on the running
        loop (again after a loop change); lookups before the first parse ask the socket."""
        loop = asyncio.get_running_loop()
        if self.checkpoint is not None and self._checkpoint_loop is not loop:
            self.checkpoint.close()
            self._checkpoint_loop = loop
            self._inventory_task = None
            self.checkpoint.start()
            self._refresh_stale_inventory()

    def known(self, uid: str) -> DevicesByContainer | None:
        """The pod's devices from the device checkpoint when it is current (counted), else
        None: the socket must be asked (:meth:`lookup`). The node's inventory is refreshed in
        the background when stale; none held yet also answers None."""
        if self.checkpoint is None:
            return None
        self.start()
        found = self.checkpoint.pod(uid)
        self._refresh_stale_inventory()
        if found is None or self.inventory is None:
            return None
        self._count("found" if found else "none", "checkpoint")
        return found

    def _refresh_stale_inventory(self) -> None:
        stale = self.inventory is None or self.clock() - self._inventory_at >= INVENTORY_TTL
        if stale and (self._inventory_task is None or self._inventory_task.done()):
            self._inventory_task = asyncio.create_task(self._refresh_inventory())

    async def _refresh_inventory(self) -> None:
        now = self.clock()
        reply = await self._call(
            "GetAllocatableResources",
            pb.AllocatableResourcesRequest(),
            pb.AllocatableResourcesResponse,
        )
        if not isinstance(reply, str):
            self.inventory = node_devices(reply)
            self._inventory_at = now

    async def lookup(self, namespace: str, name: str) -> DevicesByContainer | None:
        """The pod's devices by container name from ``Get``; None when the kubelet did not
        answer in time or failed (warned and counted)."""
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
        """Stop following the checkpoint; close the channel (of the running loop)."""
        if self.checkpoint is not None:
            self.checkpoint.close()
            self._checkpoint_loop = None
        if self._inventory_task is not None:
            self._inventory_task.cancel()
            self._inventory_task = None
        if self._channel is not None:
            channel, self._channel = self._channel[1], None
            self._calls = {}
            await channel.close()

    def _count(self, result: str, source: str = "socket") -> None:
        if self.count is not None:
            self.count(result)
        if self.count_source is not None:
            self.count_source(source)

    def feed(self, devices: DeviceManager) -> None:
        """Give the engine's device manager the node's inventory when it changed."""
        if self.inventory is not None and devices.node_devices != self.inventory:
            devices.set_node_devices(self.inventory)


def known_devices(
    source: KubeletDevices | None, engine: Engine, pod: api.PodSandbox
) -> DevicesByContainer | None:
    """The sandbox's pod's devices when the device checkpoint knows them for certain (the
    engine then gets the node's device inventory), else None."""
    if source is None:
        return None
    found = source.known(pod.uid)
    if found is not None:
        source.feed(engine.device_manager)
    return found


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
