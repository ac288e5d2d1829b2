"""Other containers' cpusets through CRI ``UpdateContainerResources``: the kubelet's own path.

containerd applies an NRI ``UpdateContainers`` request while it holds the node-wide NRI lock
that every pod and container event takes (8-10 ms per container, each a runc update), and before
NRI v0.12.1 (containerd 2.3 and older) that request takes two locks in the opposite order to the
events' and can deadlock containerd for good when a pod starts at the same moment
(containerd#13733). A CRI ``UpdateContainerResources`` takes the NRI lock only to ask the
plugins (an NRI ``UpdateContainer`` event, which this plugin answers by re-asserting the
container's assignment) and runs the runc update after releasing it, in the lock order of every
other event. docs/design.md section 3 has the measurements.

The request carries the cpuset and the memory nodes only: a zero field leaves the runtime's
value as it is, so the container's quota, shares and memory limit stay the kubelet's (and -1 for
an exclusive slice, which the plugin's reply to the event asserts again).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable

import grpc

from nri_plrm.proto import cri_runtime_pb2 as cri
from nri_plrm.proto import nri_api_pb2 as api

UPDATE_METHOD = "/runtime.v1.RuntimeService/UpdateContainerResources"
IN_FLIGHT = 4
"""CRI calls in flight at once: containerd holds its NRI lock only for the plugins' answer to
each, and runs the runc updates beside each other."""
CALL_TIMEOUT = 10.0
"""Seconds one ``UpdateContainerResources`` may take (the kubelet's CRI runtime timeout is 2
minutes; containerd answers in milliseconds unless it is stuck)."""


def cri_request(update: api.ContainerUpdate) -> cri.UpdateContainerResourcesRequest:
    """The CRI request that applies an NRI update's cpuset and memory nodes."""
    cpu = update.linux.resources.cpu
    return cri.UpdateContainerResourcesRequest(
        container_id=update.container_id,
        linux=cri.LinuxContainerResources(cpuset_cpus=cpu.cpus, cpuset_mems=cpu.mems),
    )


class CRIUpdater:
    """Sends NRI ``ContainerUpdate`` cpusets to the runtime's CRI socket, a call per container,
    ``IN_FLIGHT`` at once; returns the updates that failed (each logged with the runtime's
    reason)."""

    def __init__(self, socket_path: str, logger: logging.Logger) -> None:
        self.socket_path = socket_path
        self.log = logger
        self._channel: grpc.aio.Channel | None = None

    def _call(self) -> grpc.aio.UnaryUnaryMultiCallable:
        if self._channel is None:
            self._channel = grpc.aio.insecure_channel(f"unix://{self.socket_path}")
        return self._channel.unary_unary(
            UPDATE_METHOD,
            request_serializer=cri.UpdateContainerResourcesRequest.SerializeToString,
            response_deserializer=cri.UpdateContainerResourcesResponse.FromString,
        )

    async def __call__(self, updates: Iterable[api.ContainerUpdate]) -> list[api.ContainerUpdate]:
        call = self._call()
        slots = asyncio.Semaphore(IN_FLIGHT)

        async def one(update: api.ContainerUpdate) -> api.ContainerUpdate | None:
            async with slots:
                try:
                    await call(cri_request(update), timeout=CALL_TIMEOUT)
                except grpc.aio.AioRpcError as exc:
                    if exc.code() == grpc.StatusCode.NOT_FOUND:
                        return None  # removed meanwhile: nothing to update
                    self.log.warning(
                        "CRI UpdateContainerResources of container %s failed: %s: %s",
                        update.container_id,
                        exc.code().name,
                        exc.details(),
                    )
                    return update
                return None

        done = await asyncio.gather(*(one(update) for update in updates))
        return [update for update in done if update is not None]

    async def close(self) -> None:
        """Close the channel (a later call opens a new one)."""
        if self._channel is not None:
            await self._channel.close()
            self._channel = None
