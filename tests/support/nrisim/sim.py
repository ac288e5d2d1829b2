"""A runtime-side NRI endpoint that drives a plugin the way containerd's NRI adaptation does.

It listens on a unix socket, serves the Runtime service (RegisterPlugin, UpdateContainers) on
mux conn 2, and calls the Plugin service on conn 1: Configure, a (paged when over 4 MiB)
Synchronize, then every lifecycle event through the dedicated RPCs (NRI v0.12+, falling back to
StateChange after an Unimplemented reply) or through StateChange (``nri_version`` below v0.12,
i.e. containerd 2.0 to 2.2). Frames are cut with containerd's 4096-byte rule. Everything the
plugin answered is recorded in :attr:`NRISimulator.records`.

Optionally (``update_cost``) it also models what applying updates costs containerd: one
node-wide lock that every lifecycle event holds from the moment it is sent until its reply's
updates were applied, and that each plugin-initiated ``UpdateContainers`` holds while its
updates are applied (its reply leaves only then), each ``ContainerUpdate`` costing
``update_cost`` seconds (a runc update) under that lock. The cpuset last applied to each
container, and when, is kept in :attr:`NRISimulator.applied` either way.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import socket
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from google.protobuf.message import Message as PbMessage

from nri_plrm.nri import events as ev
from nri_plrm.proto import nri_api_pb2 as api
from nri_plrm.ttrpc.codec import MAX_MESSAGE_LEN, PLUGIN_SERVICE_CONN, RUNTIME_SERVICE_CONN
from nri_plrm.ttrpc.messages import Code, Request, TtrpcError, encode_request
from nri_plrm.ttrpc.transport import Channel, ChannelClosed

log = logging.getLogger(__name__)

M = TypeVar("M", bound=PbMessage)

CONTAINERD_UPDATE_COST = 0.023
"""Seconds one ``ContainerUpdate`` costs containerd under its node-wide NRI lock (a runc update),
for ``NRISimulator(update_cost=...)`` in benchmarks. Calibrated on real containerd 2.4-dev on 2
CPUs (issue 25): with 100 running BestEffort pods, a pod start (create and start of a 1-CPU
exclusive container) took 2,429 ms with a plugin whose CreateContainer reply carried a cpuset
update for each of them, and 151 ms with a minimal Go plugin that sends none:
(2,429 - 151) / 100 = 22.8 ms per update (with 30 pods: 683 ms, 17.7 ms per update)."""

_VERSION_RE = re.compile(r"v?(\d+)\.(\d+)")


def _nri_at_least(version: str, minor: int) -> bool:
    m = _VERSION_RE.match(version)
    if m is None:
        raise ValueError(f"simulator nri_version {version!r} is not like v0.12.2")
    return (int(m.group(1)), int(m.group(2))) >= (0, minor)


@dataclass
class Record:
    """One Plugin-service call the simulator made and what came back."""

    method: str
    request: PbMessage
    reply: PbMessage | None = None
    error: BaseException | None = None
    seconds: float = 0.0
    """The call alone: from the request written until its reply arrived."""
    lock_wait: float = 0.0
    """Seconds a lifecycle event waited for the node-wide lock before it was sent (the cost
    model; 0 without it)."""
    apply_seconds: float = 0.0
    """Seconds spent applying the reply's updates under that lock (the cost model)."""
    replied_at: float = 0.0
    """``time.perf_counter()`` when the reply arrived (0 when none did)."""

    @property
    def runtime_seconds(self) -> float:
        """The event as the runtime lives it: waiting for the lock, the call, the updates."""
        return self.lock_wait + self.seconds + self.apply_seconds


@dataclass
class AppliedCpus:
    """A container's cpuset as the runtime last applied it, and when (``time.perf_counter()``)."""

    cpus: str
    at: float


@dataclass
class PluginSession:
    """What the simulator knows about the currently connected plugin."""

    channel: Channel
    registered: asyncio.Future[api.RegisterPluginRequest]
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    name: str = ""
    index: str = ""
    events: int = 0
    state_change_fallback: bool = False
    sync_pages: list[api.SynchronizeRequest] = field(default_factory=list)
    sync_reply: api.SynchronizeResponse | None = None
    failure: str | None = None


class NRISimulator:
    """Runtime side of NRI for tests. Create with ``await NRISimulator.start(path)``."""

    def __init__(
        self,
        path: str,
        *,
        runtime_name: str = "containerd",
        runtime_version: str = "v2.4.0-nrisim",
        nri_version: str = "v0.12.2",
        config: str = "",
        registration_timeout: float = 5.0,
        request_timeout: float = 2.0,
        pods: Iterable[api.PodSandbox] = (),
        containers: Iterable[api.Container] = (),
        max_message_len: int = MAX_MESSAGE_LEN,
        update_cost: float | None = None,
    ) -> None:
        self.path = path
        self.runtime_name = runtime_name
        self.runtime_version = runtime_version
        self.nri_version = nri_version
        self.config = config
        self.registration_timeout = registration_timeout
        self.request_timeout = request_timeout
        self.pods = list(pods)
        self.containers = list(containers)
        self.max_message_len = max_message_len
        self.valid_events = (
            ev.VALID_EVENTS_V10 if _nri_at_least(nri_version, 10) else (ev.VALID_EVENTS_V08)
        )
        self.dedicated_rpcs = _nri_at_least(nri_version, 12)
        self.records: list[Record] = []
        #: Every UpdateContainers request the plugin sent, in arrival order.
        self.unsolicited: list[api.UpdateContainersRequest] = []
        #: Container ids whose unsolicited updates are reported as failed.
        self.fail_update_ids: set[str] = set()
        #: The cost model: None (the default) has no lock and no cost, the simulator as it
        #: always was; seconds (0 included) turn on :attr:`node_lock` and cost that much per
        #: ``ContainerUpdate`` applied (``CONTAINERD_UPDATE_COST`` for containerd). May be
        #: changed between events; a change applies from the next update on.
        self.update_cost = update_cost
        #: containerd's node-wide NRI lock (used only with ``update_cost``).
        self.node_lock = asyncio.Lock()
        #: Per container id, the cpuset last applied (a creation's request or adjustment, a
        #: reply's or an ``UpdateContainers`` update) and when; a removed container is dropped.
        self.applied: dict[str, AppliedCpus] = {}
        #: How many ``ContainerUpdate`` entries were applied (replies and ``UpdateContainers``).
        self.updates_applied = 0
        self.session: PluginSession | None = None
        self.sessions = 0
        self._server: asyncio.AbstractServer | None = None
        self._setup_tasks: set[asyncio.Task[None]] = set()
        self._session_changed = asyncio.Condition()

    # server lifecycle

    @classmethod
    async def start(cls, path: str, **kwargs: Any) -> NRISimulator:
        """Create the simulator and start listening on ``path``."""
        sim = cls(path, **kwargs)
        await sim.listen()
        return sim

    async def listen(self) -> None:
        """(Re)create the socket (removing a stale file first, as containerd does) and listen."""
        with contextlib.suppress(FileNotFoundError):
            os.remove(self.path)
        os.makedirs(os.path.dirname(self.path) or ".", mode=0o700, exist_ok=True)
        loop = asyncio.get_running_loop()
        self._server = await loop.create_unix_server(self._new_channel, self.path)

    def _new_channel(self) -> Channel:
        loop = asyncio.get_running_loop()
        sessions: list[PluginSession] = []

        async def register(req: Request) -> bytes:
            return self._register_plugin(sessions[0], req)

        async def update(req: Request) -> bytes:
            return await self._update_containers(req)

        channel = _AcceptedChannel(
            self._accepted,
            server_conn=RUNTIME_SERVICE_CONN,
            client_conn=PLUGIN_SERVICE_CONN,
            handlers={ev.SERVICE_RUNTIME: {"RegisterPlugin": register, "UpdateContainers": update}},
            name="nrisim",
        )
        sessions.append(PluginSession(channel, registered=loop.create_future()))
        channel.session = sessions[0]
        return channel

    async def adopt(self, sock: socket.socket) -> None:
        """Serve a pre-connected socket (the runtime end of a pre-launched plugin's socketpair)."""
        loop = asyncio.get_running_loop()
        await loop.connect_accepted_socket(self._new_channel, sock)

    def inject(self, data: bytes) -> None:
        """Write raw bytes on the current trunk (for malformed-frame tests)."""
        session = self.session
        if session is None or not isinstance(session.channel, _AcceptedChannel):
            raise ChannelClosed("nrisim: no plugin connection to inject into")
        session.channel.write_raw(data)

    def _accepted(self, session: PluginSession) -> None:
        old = self.session
        if old is not None and old.channel.is_open:
            old.channel.close()
        self.session = session
        self.sessions += 1
        task = asyncio.get_running_loop().create_task(self._setup(session))
        self._setup_tasks.add(task)
        task.add_done_callback(self._setup_tasks.discard)

    def _register_plugin(self, session: PluginSession, req: Request) -> bytes:
        msg = api.RegisterPluginRequest.FromString(req.payload)
        try:
            ev.check_plugin_index(msg.plugin_idx)
            if self.dedicated_rpcs:
                ev.check_plugin_name(msg.plugin_name)
            elif not msg.plugin_name:
                raise ValueError("empty plugin name")
        except ValueError as exc:
            session.failure = f"failed to register plugin: {exc}"
            raise TtrpcError(Code.UNKNOWN, f"invalid plugin: {exc}") from exc
        if not session.registered.done():
            session.registered.set_result(msg)
        return b""

    async def _update_containers(self, req: Request) -> bytes:
        msg = api.UpdateContainersRequest.FromString(req.payload)
        self.unsolicited.append(msg)
        failed = [
            u for u in msg.update if u.container_id in self.fail_update_ids and not u.ignore_failure
        ]
        failed_ids = {u.container_id for u in failed}
        async with self._node_lock():
            await self._apply([u for u in msg.update if u.container_id not in failed_ids])
        if failed:
            raise TtrpcError(Code.UNKNOWN, "NRI update of some containers failed")
        return api.UpdateContainersResponse().SerializeToString()

    # the cost model

    def _node_lock(self) -> contextlib.AbstractAsyncContextManager[Any]:
        """The node-wide lock with the cost model on, else nothing."""
        return self.node_lock if self.update_cost is not None else contextlib.nullcontext()

    async def _apply(self, updates: Iterable[api.ContainerUpdate]) -> None:
        """Apply ``updates`` in order, each ``update_cost`` seconds (no wait without it: with the
        model off or at cost 0 nothing yields), recording each one's cpuset and time."""
        due = time.perf_counter()
        for u in updates:
            cost = self.update_cost or 0.0
            if cost > 0:
                due += cost
                await asyncio.sleep(max(0.0, due - time.perf_counter()))
            self.updates_applied += 1
            cpus = u.linux.resources.cpu.cpus
            if cpus:
                self.applied[u.container_id] = AppliedCpus(cpus, time.perf_counter())

    async def close(self) -> None:
        """Drop the plugin connection and stop listening (the socket file is removed)."""
        await self._drop_connection()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        with contextlib.suppress(FileNotFoundError):
            os.remove(self.path)

    async def restart(
        self,
        pods: Iterable[api.PodSandbox] | None = None,
        containers: Iterable[api.Container] | None = None,
        downtime: float = 0.0,
    ) -> None:
        """Simulate a containerd restart: close everything, wait ``downtime``, listen again.

        ``pods``/``containers`` replace what the next Synchronize reports.
        """
        await self.close()
        if pods is not None:
            self.pods = list(pods)
        if containers is not None:
            self.containers = list(containers)
        if downtime:
            await asyncio.sleep(downtime)
        await self.listen()

    async def _drop_connection(self) -> None:
        session = self.session
        if session is not None:
            session.channel.abort()
            await session.channel.wait_closed()
        for task in list(self._setup_tasks):
            task.cancel()
        for task in list(self._setup_tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def wait_registered(self, timeout: float = 10.0) -> PluginSession:
        """Wait until a plugin has registered, been configured and synchronized."""
        deadline = time.monotonic() + timeout
        while True:
            session = self.session
            if session is not None and session.ready.is_set() and session.channel.is_open:
                return session
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                why = session.failure if session is not None else "no connection"
                raise TimeoutError(f"nrisim: plugin not ready after {timeout} s ({why})")
            async with self._session_changed:
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._session_changed.wait(), min(remaining, 0.05))

    async def wait_disconnected(self, timeout: float = 10.0) -> None:
        """Wait until the current plugin connection is closed."""
        session = self.session
        if session is not None:
            await asyncio.wait_for(session.channel.wait_closed(), timeout)

    async def _notify(self) -> None:
        async with self._session_changed:
            self._session_changed.notify_all()

    # per-connection setup, like pkg/adaptation: register, configure, synchronize

    async def _setup(self, session: PluginSession) -> None:
        try:
            reg = await asyncio.wait_for(session.registered, self.registration_timeout)
        except asyncio.TimeoutError:
            session.failure = "plugin registration timed out"
            session.channel.close()
            return
        session.name, session.index = reg.plugin_name, reg.plugin_idx
        conf = api.ConfigureRequest(
            config=self.config,
            runtime_name=self.runtime_name,
            runtime_version=self.runtime_version,
            registration_timeout=int(self.registration_timeout * 1000),
            request_timeout=int(self.request_timeout * 1000),
        )
        if self.dedicated_rpcs:
            conf.NRI_version = self.nri_version
        try:
            reply = await self._call(session, "Configure", conf, api.ConfigureResponse)
        except (TtrpcError, TimeoutError, ChannelClosed) as exc:
            session.failure = f"failed to configure plugin: {exc}"
            session.channel.close()
            return
        events = reply.events
        if events and events & ~self.valid_events:
            session.failure = f"invalid plugin events: 0x{events:x}"
            session.channel.close()
            return
        session.events = events or self.valid_events
        try:
            await self._synchronize(session)
        except (TtrpcError, TimeoutError, ChannelClosed, ValueError) as exc:
            session.failure = f"failed to synchronize plugin: {exc}"
            session.channel.close()
            return
        session.ready.set()
        await self._notify()

    async def _synchronize(self, session: PluginSession) -> None:
        pods, ctrs = self.pods, self.containers
        whole = api.SynchronizeRequest(pods=pods, containers=ctrs)
        pages = [whole]
        size = self._request_size("Synchronize", whole)
        if size > self.max_message_len:
            pages = self._split_sync(pods, ctrs, size)
        deadline = time.monotonic() + self.request_timeout
        for i, page in enumerate(pages):
            remaining = deadline - time.monotonic()
            reply = await self._call(
                session, "Synchronize", page, api.SynchronizeResponse, timeout=remaining
            )
            session.sync_pages.append(page)
            if page.more and (not reply.more or len(reply.update)):
                raise ValueError("plugin does not handle split sync requests")
            if i == len(pages) - 1:
                session.sync_reply = reply

    def _split_sync(
        self, pods: list[api.PodSandbox], ctrs: list[api.Container], size: int
    ) -> list[api.SynchronizeRequest]:
        objects: list[api.PodSandbox | api.Container] = [*pods, *ctrs]
        ratio = min(self.max_message_len / size, 0.9)
        per = max(8, int(len(objects) * ratio))
        while True:
            pages = []
            for start in range(0, len(objects), per):
                page = api.SynchronizeRequest(more=True)
                for obj in objects[start : start + per]:
                    if isinstance(obj, api.PodSandbox):
                        page.pods.append(obj)
                    else:
                        page.containers.append(obj)
                pages.append(page)
            pages[-1].more = False
            largest = max(self._request_size("Synchronize", p) for p in pages)
            if largest <= self.max_message_len or per <= 8:
                return pages
            per = max(8, int(per * min(self.max_message_len / largest, 0.9)))

    @staticmethod
    def _request_size(method: str, msg: PbMessage) -> int:
        return len(encode_request(ev.SERVICE_PLUGIN, method, msg.SerializeToString(), 1))

    async def _call(
        self,
        session: PluginSession,
        method: str,
        msg: PbMessage,
        reply_type: type[M],
        timeout: float | None = None,
        rec: Record | None = None,
    ) -> M:
        if rec is None:
            rec = Record(method, msg)
        self.records.append(rec)
        start = time.perf_counter()
        limit = self.request_timeout if timeout is None else timeout
        try:
            data = await session.channel.call(
                ev.SERVICE_PLUGIN, method, msg.SerializeToString(), timeout=max(limit, 0.001)
            )
        except asyncio.TimeoutError:
            rec.error = TimeoutError(f"{method}: context deadline exceeded")
            rec.seconds = time.perf_counter() - start
            session.failure = f"closing plugin, failed to handle {method}: deadline exceeded"
            session.channel.close()
            raise rec.error from None
        except (TtrpcError, ChannelClosed) as exc:
            rec.error = exc
            rec.seconds = time.perf_counter() - start
            raise
        rec.replied_at = time.perf_counter()
        rec.seconds = rec.replied_at - start
        reply = reply_type.FromString(data)
        rec.reply = reply
        return reply

    # lifecycle events

    def _live(self) -> PluginSession:
        session = self.session
        if session is None or not session.ready.is_set() or not session.channel.is_open:
            raise ChannelClosed("nrisim: no ready plugin connection")
        return session

    def subscribed(self, event: int) -> bool:
        """True if the connected plugin subscribed to ``event``."""
        session = self.session
        return session is not None and bool(session.events & ev.event_bit(event))

    async def _event(
        self,
        event: int,
        method: str,
        msg: PbMessage,
        reply_type: type[M],
        pod: api.PodSandbox,
        container: api.Container | None,
    ) -> M | None:
        session = self._live()
        if not session.events & ev.event_bit(event):
            return None
        asked = time.perf_counter()
        async with self._node_lock():
            waited = time.perf_counter() - asked if self.update_cost is not None else 0.0
            fallback_ok = event in ev.STATE_CHANGE_EVENTS
            use_dedicated = not fallback_ok or (
                self.dedicated_rpcs and not session.state_change_fallback
            )
            reply: M | None = None
            if use_dedicated:
                rec = Record(method, msg, lock_wait=waited)
                try:
                    reply = await self._call(session, method, msg, reply_type, rec=rec)
                except TtrpcError as exc:
                    if exc.code != Code.UNIMPLEMENTED or not fallback_ok or not self.dedicated_rpcs:
                        raise
                    log.warning("nrisim: plugin lacks %s; falling back to StateChange", method)
                    session.state_change_fallback = True
            if reply is None:
                sc = api.StateChangeEvent(event=event, pod=pod)  # type: ignore[arg-type]
                if container is not None:
                    sc.container.CopyFrom(container)
                rec = Record("StateChange", sc, lock_wait=waited)
                await self._call(session, "StateChange", sc, api.Empty, rec=rec)
                reply = reply_type()
            await self._apply_reply(
                reply, rec, container if event == api.CREATE_CONTAINER else None
            )
        return reply

    async def _apply_reply(
        self, reply: PbMessage, rec: Record, created: api.Container | None
    ) -> None:
        """Apply the reply's updates, then create ``created`` with its adjustment."""
        applying = time.perf_counter()
        if "update" in reply.DESCRIPTOR.fields_by_name:
            await self._apply(reply.update)  # type: ignore[attr-defined]
        if created is not None:
            adjusted = reply.adjust.linux.resources.cpu.cpus  # type: ignore[attr-defined]
            cpus = adjusted or created.linux.resources.cpu.cpus
            if cpus:
                self.applied[created.id] = AppliedCpus(cpus, time.perf_counter())
        rec.apply_seconds = time.perf_counter() - applying

    async def run_pod_sandbox(self, pod: api.PodSandbox) -> api.RunPodSandboxResponse | None:
        """Send RUN_POD_SANDBOX; None if the plugin is not subscribed."""
        req = api.RunPodSandboxRequest(pod=pod)
        return await self._event(
            api.RUN_POD_SANDBOX, "RunPodSandbox", req, api.RunPodSandboxResponse, pod, None
        )

    async def stop_pod_sandbox(self, pod: api.PodSandbox) -> api.StopPodSandboxResponse | None:
        """Send STOP_POD_SANDBOX."""
        req = api.StopPodSandboxRequest(pod=pod)
        return await self._event(
            api.STOP_POD_SANDBOX, "StopPodSandbox", req, api.StopPodSandboxResponse, pod, None
        )

    async def remove_pod_sandbox(self, pod: api.PodSandbox) -> api.RemovePodSandboxResponse | None:
        """Send REMOVE_POD_SANDBOX."""
        req = api.RemovePodSandboxRequest(pod=pod)
        return await self._event(
            api.REMOVE_POD_SANDBOX,
            "RemovePodSandbox",
            req,
            api.RemovePodSandboxResponse,
            pod,
            None,
        )

    async def update_pod_sandbox(
        self,
        pod: api.PodSandbox,
        overhead: api.LinuxResources | None = None,
        resources: api.LinuxResources | None = None,
    ) -> api.UpdatePodSandboxResponse | None:
        """Send UPDATE_POD_SANDBOX (NRI v0.10+ only; no StateChange fallback)."""
        req = api.UpdatePodSandboxRequest(pod=pod)
        if overhead is not None:
            req.overhead_linux_resources.CopyFrom(overhead)
        if resources is not None:
            req.linux_resources.CopyFrom(resources)
        return await self._event(
            api.UPDATE_POD_SANDBOX,
            "UpdatePodSandbox",
            req,
            api.UpdatePodSandboxResponse,
            pod,
            None,
        )

    async def post_update_pod_sandbox(
        self, pod: api.PodSandbox
    ) -> api.PostUpdatePodSandboxResponse | None:
        """Send POST_UPDATE_POD_SANDBOX."""
        req = api.PostUpdatePodSandboxRequest(pod=pod)
        return await self._event(
            api.POST_UPDATE_POD_SANDBOX,
            "PostUpdatePodSandbox",
            req,
            api.PostUpdatePodSandboxResponse,
            pod,
            None,
        )

    async def create_container(
        self, pod: api.PodSandbox, container: api.Container
    ) -> api.CreateContainerResponse | None:
        """Send CREATE_CONTAINER and return the plugin's adjustment and updates."""
        req = api.CreateContainerRequest(pod=pod, container=container)
        resp = await self._event(
            api.CREATE_CONTAINER,
            "CreateContainer",
            req,
            api.CreateContainerResponse,
            pod,
            container,
        )
        if resp is not None and any(u.container_id == container.id for u in resp.update):
            raise TtrpcError(
                Code.UNKNOWN, f"plugin asked update of {container.id!r} during creation"
            )
        return resp

    async def update_container(
        self, pod: api.PodSandbox, container: api.Container, resources: api.LinuxResources
    ) -> api.UpdateContainerResponse | None:
        """Send UPDATE_CONTAINER with the CRI-requested ``resources``."""
        req = api.UpdateContainerRequest(pod=pod, container=container, linux_resources=resources)
        return await self._event(
            api.UPDATE_CONTAINER,
            "UpdateContainer",
            req,
            api.UpdateContainerResponse,
            pod,
            container,
        )

    async def stop_container(
        self, pod: api.PodSandbox, container: api.Container
    ) -> api.StopContainerResponse | None:
        """Send STOP_CONTAINER."""
        req = api.StopContainerRequest(pod=pod, container=container)
        return await self._event(
            api.STOP_CONTAINER, "StopContainer", req, api.StopContainerResponse, pod, container
        )

    async def validate_container_adjustment(
        self, request: api.ValidateContainerAdjustmentRequest
    ) -> api.ValidateContainerAdjustmentResponse | None:
        """Send VALIDATE_CONTAINER_ADJUSTMENT (NRI v0.10+)."""
        return await self._event(
            api.VALIDATE_CONTAINER_ADJUSTMENT,
            "ValidateContainerAdjustment",
            request,
            api.ValidateContainerAdjustmentResponse,
            request.pod,
            request.container,
        )

    async def _container_event(
        self,
        event: int,
        method: str,
        req_type: type[M],
        pod: api.PodSandbox,
        container: api.Container,
        reply_type: type[PbMessage],
    ) -> Any:
        req = req_type(pod=pod, container=container)
        return await self._event(event, method, req, reply_type, pod, container)

    async def post_create_container(self, pod: api.PodSandbox, ctr: api.Container) -> Any:
        """Send POST_CREATE_CONTAINER."""
        return await self._container_event(
            api.POST_CREATE_CONTAINER,
            "PostCreateContainer",
            api.PostCreateContainerRequest,
            pod,
            ctr,
            api.PostCreateContainerResponse,
        )

    async def start_container(self, pod: api.PodSandbox, ctr: api.Container) -> Any:
        """Send START_CONTAINER."""
        return await self._container_event(
            api.START_CONTAINER,
            "StartContainer",
            api.StartContainerRequest,
            pod,
            ctr,
            api.StartContainerResponse,
        )

    async def post_start_container(self, pod: api.PodSandbox, ctr: api.Container) -> Any:
        """Send POST_START_CONTAINER."""
        return await self._container_event(
            api.POST_START_CONTAINER,
            "PostStartContainer",
            api.PostStartContainerRequest,
            pod,
            ctr,
            api.PostStartContainerResponse,
        )

    async def post_update_container(self, pod: api.PodSandbox, ctr: api.Container) -> Any:
        """Send POST_UPDATE_CONTAINER."""
        return await self._container_event(
            api.POST_UPDATE_CONTAINER,
            "PostUpdateContainer",
            api.PostUpdateContainerRequest,
            pod,
            ctr,
            api.PostUpdateContainerResponse,
        )

    async def remove_container(self, pod: api.PodSandbox, ctr: api.Container) -> Any:
        """Send REMOVE_CONTAINER; the container leaves :attr:`applied`."""
        self.applied.pop(ctr.id, None)
        return await self._container_event(
            api.REMOVE_CONTAINER,
            "RemoveContainer",
            api.RemoveContainerRequest,
            pod,
            ctr,
            api.RemoveContainerResponse,
        )

    async def call_raw(
        self, service: str, method: str, payload: bytes = b"", timeout: float | None = None
    ) -> bytes:
        """Call any method on the plugin's connection and return the raw reply payload."""
        session = self._live()
        return await session.channel.call(
            service, method, payload, timeout=self.request_timeout if timeout is None else timeout
        )


class _AcceptedChannel(Channel):
    """A Channel that tells the simulator when the runtime side accepted it."""

    session: PluginSession

    def __init__(self, on_accept: Any, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._on_accept = on_accept

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        assert isinstance(transport, asyncio.Transport)
        self._raw = transport
        self._on_accept(self.session)

    def write_raw(self, data: bytes) -> None:
        """Write bytes to the trunk as they are."""
        self._raw.write(data)
