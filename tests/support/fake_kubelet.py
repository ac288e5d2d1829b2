"""A kubelet-side PodResources v1 server (real gRPC on a unix socket) reporting devices with
their NUMA nodes, as a device plugin's topology makes the kubelet report them."""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from concurrent import futures

import grpc

from nri_plrm.proto import podresources_api_pb2 as pb

DeviceRows = Sequence[tuple[str, str, Sequence[int]]]
"""(resource, device id, NUMA nodes) of one container."""


def _entries(rows: DeviceRows) -> list[pb.ContainerDevices]:
    return [
        pb.ContainerDevices(
            resource_name=resource,
            device_ids=[device_id],
            topology=pb.TopologyInfo(nodes=[pb.NUMANode(ID=n) for n in nodes]),
        )
        for resource, device_id, nodes in rows
    ]


class FakeKubelet:
    """``Get`` answers from ``pods`` ((namespace, name) -> container -> device rows);
    ``GetAllocatableResources`` from ``inventory``. ``silent`` makes every call hang until
    :meth:`stop` (a kubelet that does not answer)."""

    def __init__(
        self,
        path: str,
        pods: Mapping[tuple[str, str], Mapping[str, DeviceRows]],
        inventory: DeviceRows = (),
        *,
        silent: bool = False,
    ) -> None:
        self.pods = pods
        self.inventory = inventory
        self.silent = silent
        self.calls: list[str] = []
        self._released = threading.Event()
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        handlers = {
            "Get": grpc.unary_unary_rpc_method_handler(self._get),
            "GetAllocatableResources": grpc.unary_unary_rpc_method_handler(self._allocatable),
        }
        self.server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler("v1.PodResourcesLister", handlers),)
        )
        self.server.add_insecure_port(f"unix:{path}")
        self.server.start()

    def _wait(self, method: str) -> None:
        self.calls.append(method)
        if self.silent:
            self._released.wait(30)

    def _get(self, request: bytes, context: object) -> bytes:
        self._wait("Get")
        req = pb.GetPodResourcesRequest.FromString(request)
        containers = self.pods.get((req.pod_namespace, req.pod_name), {})
        pod = pb.PodResources(
            name=req.pod_name,
            namespace=req.pod_namespace,
            containers=[
                pb.ContainerResources(name=name, devices=_entries(rows))
                for name, rows in containers.items()
            ],
        )
        return pb.GetPodResourcesResponse(pod_resources=pod).SerializeToString()

    def _allocatable(self, request: bytes, context: object) -> bytes:
        self._wait("GetAllocatableResources")
        reply = pb.AllocatableResourcesResponse(devices=_entries(self.inventory))
        return reply.SerializeToString()

    def stop(self) -> None:
        """Release hanging calls and stop serving."""
        self._released.set()
        self.server.stop(None)
