"""A containerd-like container table on top of ``nrisim``: what the plugin's replies did.

``FakeRuntime`` drives the simulator like containerd drives NRI, and keeps every pod and
container with the resources the plugin's adjustments and updates (solicited and unsolicited)
left on them, so tests assert what would really be applied. ``sync_lists()`` gives what a
Synchronize reports after a restart (containers not EXITED, with their current cpusets).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from nri_plrm.base.cpuset import CPUSet
from nri_plrm.engine.spec import ContainerKind, ContainerSpec, PodSpec
from nri_plrm.plugin import pool_updates
from nri_plrm.proto import nri_api_pb2 as api
from nri_plrm.translate.pod_to_cri import creation_order, nri_container, nri_pod_sandbox
from nri_plrm.ttrpc.transport import ChannelClosed

ABSENT = (ChannelClosed, TimeoutError, ConnectionError)
"""Failures after which containerd carries on as if the plugin were not there."""


async def call(request: Awaitable[Any]) -> Any:
    """Send one event; None when the plugin is absent or dropped (containerd's fatal errors)."""
    try:
        return await request
    except ABSENT:
        return None


@dataclass
class Applied:
    """A container's cpuset state as the runtime applied it."""

    cpus: str = ""
    mems: str = ""
    quota: int | None = None


@dataclass
class RuntimeContainer:
    msg: api.Container
    applied: Applied = field(default_factory=Applied)
    created_at: int = 0

    @property
    def cpus(self) -> CPUSet:
        return CPUSet.parse(self.applied.cpus)


def _apply(applied: Applied, res: api.LinuxResources) -> None:
    cpu = res.cpu
    if cpu.cpus:
        applied.cpus = cpu.cpus
    if cpu.mems:
        applied.mems = cpu.mems
    if cpu.HasField("quota") and cpu.quota.value != 0:
        applied.quota = cpu.quota.value


class FakeRuntime:
    """Pods and containers as containerd would hold them, driven through ``NRISimulator``."""

    def __init__(self, sim: object) -> None:
        self.sim = sim
        self.pods: dict[str, api.PodSandbox] = {}
        self.containers: dict[str, RuntimeContainer] = {}
        self._clock = 0
        self._seen_unsolicited = 0
        self.sync_updates = 0
        """How many updates the last Synchronize reply carried."""
        self.flushed: Callable[[], Awaitable[None]] | None = None
        """Waits until the plugin has sent every update it queued (set by the harness while
        an in-process plugin serves this runtime; None for a plugin in another process)."""

    # ----------------------------------------------------------------- events

    async def run_pod(self, spec: PodSpec) -> api.PodSandbox:
        """RunPodSandbox; raises the simulator's error when the plugin rejects the pod."""
        self.apply_unsolicited()
        msg = nri_pod_sandbox(spec)
        await call(self.sim.run_pod_sandbox(msg))  # type: ignore[attr-defined]
        self.pods[msg.id] = msg
        return msg

    async def create(
        self, pod: api.PodSandbox, spec: PodSpec, ctr: ContainerSpec, *, attempt: int = 0
    ) -> api.CreateContainerResponse:
        """CreateContainer and apply the adjustment and the updates of the reply."""
        self.apply_unsolicited()
        self._clock += 1
        msg = nri_container(
            spec, ctr, attempt=attempt, state=api.CONTAINER_CREATED, created_at=self._clock
        )
        cid = msg.id
        resp = await call(self.sim.create_container(pod, msg))  # type: ignore[attr-defined]
        rc = RuntimeContainer(msg, created_at=self._clock)
        _apply(rc.applied, msg.linux.resources)
        self.containers[cid] = rc
        if resp is None:
            return api.CreateContainerResponse()
        if resp.HasField("adjust") and resp.adjust.HasField("linux"):
            _apply(rc.applied, resp.adjust.linux.resources)
        self.apply_updates(resp.update)
        assert isinstance(resp, api.CreateContainerResponse)
        return resp

    async def launch(self, spec: PodSpec) -> api.PodSandbox:
        """Run the pod and create and start its containers in creation order, letting each
        regular init container exit before the next container is created (as the kubelet)."""
        pod = await self.run_pod(spec)
        for ctr in creation_order(spec):
            await self.create(pod, spec, ctr)
            cid = self.id_of(pod, ctr.name)
            await self.start(cid)
            if ctr.kind is ContainerKind.INIT:
                await self.stop(cid)
        return pod

    def id_of(self, pod: api.PodSandbox, name: str) -> str:
        """The id of the pod's container with this name."""
        for cid, rc in self.containers.items():
            if rc.msg.pod_sandbox_id == pod.id and rc.msg.name == name:
                return cid
        raise KeyError(f"no container {name!r} in pod {pod.name!r}")

    async def start(self, cid: str) -> None:
        rc = self.containers[cid]
        rc.msg.state = api.CONTAINER_RUNNING
        pod = self.pods[rc.msg.pod_sandbox_id]
        await call(self.sim.start_container(pod, rc.msg))  # type: ignore[attr-defined]
        await call(self.sim.post_start_container(pod, rc.msg))  # type: ignore[attr-defined]

    async def stop(self, cid: str) -> None:
        """The container exited: StopContainer, apply the reply's updates."""
        self.apply_unsolicited()
        rc = self.containers[cid]
        rc.msg.state = api.CONTAINER_STOPPED
        resp = await call(self.sim.stop_container(self.pods[rc.msg.pod_sandbox_id], rc.msg))  # type: ignore[attr-defined]
        if resp is not None:
            self.apply_updates(resp.update)

    async def update(self, cid: str, resources: api.LinuxResources) -> api.UpdateContainerResponse:
        """UpdateContainer as the kubelet asks; the reply's entries are applied on top."""
        self.apply_unsolicited()
        rc = self.containers[cid]
        _apply(rc.applied, resources)
        resp = await self.sim.update_container(  # type: ignore[attr-defined]
            self.pods[rc.msg.pod_sandbox_id], rc.msg, resources
        )
        assert resp is not None
        self.apply_updates(resp.update)
        return resp

    async def remove(self, cid: str) -> None:
        self.apply_unsolicited()
        rc = self.containers.pop(cid)
        await call(self.sim.remove_container(self.pods[rc.msg.pod_sandbox_id], rc.msg))  # type: ignore[attr-defined]

    async def remove_pod(self, pod: api.PodSandbox) -> None:
        """Stop and remove every container of the pod, then the pod (containerd's order)."""
        for cid in [c for c, rc in self.containers.items() if rc.msg.pod_sandbox_id == pod.id]:
            if self.containers[cid].msg.state != api.CONTAINER_STOPPED:
                await self.stop(cid)
            await self.remove(cid)
        await call(self.sim.stop_pod_sandbox(pod))  # type: ignore[attr-defined]
        await call(self.sim.remove_pod_sandbox(pod))  # type: ignore[attr-defined]
        self.pods.pop(pod.id, None)

    # ----------------------------------------------------------------- updates

    def apply_updates(self, updates: object) -> None:
        for u in updates:  # type: ignore[attr-defined]
            rc = self.containers.get(u.container_id)
            if rc is not None:
                _apply(rc.applied, u.linux.resources)

    def apply_unsolicited(self) -> int:
        """Apply UpdateContainers requests received since the last call; returns how many.

        Called before every event this runtime sends, so updates are applied in arrival order
        relative to the replies, as containerd applies them on receipt."""
        new = self.sim.unsolicited[self._seen_unsolicited :]  # type: ignore[attr-defined]
        self._seen_unsolicited += len(new)
        for req in new:
            self.apply_updates(req.update)
        return len(new)

    async def settle(self, timeout: float = 5.0) -> None:
        """Wait until the plugin's queued UpdateContainers have arrived, then apply them.

        With an in-process plugin (``flushed``) that is once its update queue is empty, however
        long the plugin takes on a slow machine; then, and for a plugin in another process,
        until no request came for a quiet time (each batch waits until decisions pause for
        ``SETTLE``, checked every ``SETTLE``: twice that after the last decision), ``timeout``
        at most: updates of decisions that something in the background makes later."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        quiet = 3 * pool_updates.SETTLE + 0.05
        quiet_until = loop.time() + quiet
        while True:
            if self.flushed is not None:
                await self.flushed()
            if self.apply_unsolicited():
                quiet_until = loop.time() + quiet
            if loop.time() >= min(quiet_until, deadline):
                return
            await asyncio.sleep(0.01)

    # ----------------------------------------------------------------- views

    def sync_lists(self) -> tuple[list[api.PodSandbox], list[api.Container]]:
        """What Synchronize reports: every pod, and containers that have not exited, with the
        resources applied to them."""
        self.apply_unsolicited()
        ctrs = []
        for rc in sorted(self.containers.values(), key=lambda r: r.created_at):
            if rc.msg.state == api.CONTAINER_STOPPED:
                continue
            msg = api.Container()
            msg.CopyFrom(rc.msg)
            res = msg.linux.resources
            res.cpu.cpus = rc.applied.cpus
            res.cpu.mems = rc.applied.mems
            if rc.applied.quota is not None:
                res.cpu.quota.value = rc.applied.quota
            ctrs.append(msg)
        return list(self.pods.values()), ctrs

    def cpus_of(self, pod: api.PodSandbox, name: str) -> CPUSet:
        for rc in self.containers.values():
            if rc.msg.pod_sandbox_id == pod.id and rc.msg.name == name:
                return rc.cpus
        raise KeyError(f"no container {name!r} in pod {pod.name!r}")

    def applied(self, pod: api.PodSandbox, name: str) -> Applied:
        for rc in self.containers.values():
            if rc.msg.pod_sandbox_id == pod.id and rc.msg.name == name:
                return rc.applied
        raise KeyError(f"no container {name!r} in pod {pod.name!r}")
