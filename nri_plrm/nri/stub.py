"""The NRI plugin stub: connect, register, configure, synchronize, dispatch events, reconnect.

A plugin passes a handlers object to :class:`Stub`; every handler method is optional and the
event subscription mask is derived from the methods it defines (``nri.handlers.Handlers``).
Handlers may be plain functions or coroutines. Each request runs in its own task, so a slow
coroutine handler never delays other requests (a *sync* handler runs on the event loop and
blocks it while it runs: keep those fast).

Unsolicited updates: containerd deadlocks if a plugin calls ``UpdateContainers`` while it is
still waiting for that plugin's reply to an event. :meth:`Stub.update_containers` therefore waits
until no request is in flight on this connection (every reply already written to the socket) and
the initial Synchronize has completed, and only then sends. Awaiting it from the handler's own
task would wait on itself, so that raises ``RuntimeError``; from inside a handler use
:meth:`Stub.schedule_update_containers`, which queues the call and returns a task right away.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from nri_plrm.nri import events as ev
from nri_plrm.nri.handlers import NRIError, StubObserver
from nri_plrm.nri.inflight import InFlight
from nri_plrm.nri.sync_pages import SYNC_MAX_BYTES, SYNC_MAX_PAGES, SyncPages, SyncTooLarge
from nri_plrm.proto import nri_api_pb2 as api
from nri_plrm.ttrpc.codec import PLUGIN_SERVICE_CONN, RUNTIME_SERVICE_CONN
from nri_plrm.ttrpc.messages import Code, Request, TtrpcError
from nri_plrm.ttrpc.transport import Channel, ChannelClosed, connect_socket, connect_unix

log = logging.getLogger(__name__)

DEFAULT_SOCKET_PATH = "/var/run/nri/nri.sock"
#: The NRI API version this stub speaks (sent in RegisterPlugin; informational for the runtime).
NRI_VERSION = "v0.12.2"

ENV_SOCKET = "NRI_PLUGIN_SOCKET"
ENV_NAME = "NRI_PLUGIN_NAME"
ENV_INDEX = "NRI_PLUGIN_IDX"


RECONNECT_BACKOFF_MAX = 0.5
"""Longest wait between reconnect attempts (seconds): a restarted containerd is rejoined
within this time of its socket accepting connections again."""
RECONNECT_LOG_EVERY = 120
"""While the runtime stays unreachable, one warning per this many failed attempts."""


class RuntimeUnreachable(OSError):
    """The runtime's NRI socket cannot be connected to and the stub does not reconnect
    (``reconnect=False``, or a socket inherited from the runtime). The message names the
    socket and the system error."""


_ServerHandler = Callable[[Request], Awaitable[bytes]]


async def _maybe_await(value: Any) -> Any:
    if inspect.isawaitable(value):
        return await value
    return value


class Stub:
    """An NRI plugin endpoint. ``await stub.run()`` serves until :meth:`stop` is awaited.

    - Started by containerd (``NRI_PLUGIN_SOCKET`` set): uses that fd and the name and index
      from ``NRI_PLUGIN_NAME``/``NRI_PLUGIN_IDX``, and never reconnects (containerd does not
      relaunch such plugins); otherwise connects to ``socket_path`` and, with ``reconnect``,
      retries with exponential backoff (``backoff_initial`` doubling up to ``backoff_max``)
      whenever the runtime goes away, re-registering and re-synchronizing each time. The
      default ``backoff_max`` keeps the reconnect within 1 s of containerd listening again (a
      failed connect on a unix socket costs microseconds); repeated failures are logged at the
      first attempt and then every ``RECONNECT_LOG_EVERY`` attempts.
    - ``events`` is the mask derived from the handlers; ``subscribed`` is what was sent to the
      current runtime (``events`` minus what that runtime's NRI version does not know).
    - ``request_timeout`` starts at the given value and follows the runtime's value from
      Configure; it bounds ``UpdateContainers`` calls and is used to warn about slow handlers.
    - A paged Synchronize may accumulate at most ``sync_max_pages`` pages and
      ``sync_max_bytes`` request bytes: past either, the page is answered with
      ``RESOURCE_EXHAUSTED``, what was accumulated is dropped and the connection is closed (and,
      with ``reconnect``, opened again).
    - All methods must be called on the event loop thread running :meth:`run` (from another
      thread, use ``asyncio.run_coroutine_threadsafe``), except :meth:`oldest_request`.
    """

    def __init__(
        self,
        handlers: object,
        *,
        name: str,
        index: str,
        socket_path: str = DEFAULT_SOCKET_PATH,
        registration_timeout: float = 5.0,
        request_timeout: float = 2.0,
        reconnect: bool = True,
        backoff_initial: float = 0.25,
        backoff_max: float = RECONNECT_BACKOFF_MAX,
        observer: StubObserver | None = None,
        environ: Mapping[str, str] | None = None,
        sync_max_bytes: int = SYNC_MAX_BYTES,
        sync_max_pages: int = SYNC_MAX_PAGES,
    ) -> None:
        env = os.environ if environ is None else environ
        self._socket_fd: int | None = None
        if env.get(ENV_SOCKET):
            try:
                self._socket_fd = int(env[ENV_SOCKET])
            except ValueError:
                raise ValueError(
                    f"{ENV_SOCKET}={env[ENV_SOCKET]!r} is not a file descriptor number"
                ) from None
            name = env.get(ENV_NAME) or name
            index = env.get(ENV_INDEX) or index
        self.name = ev.check_plugin_name(name)
        self.index = ev.check_plugin_index(index)
        self.socket_path = socket_path
        self.registration_timeout = registration_timeout
        self.request_timeout = request_timeout
        self.reconnect = reconnect and self._socket_fd is None
        self.backoff_initial = backoff_initial
        self.backoff_max = backoff_max
        self.observer = observer
        self._handlers = handlers
        self.events: int = ev.mask_for(handlers)
        if self.events == 0:
            raise ValueError(
                f"NRI plugin {self.name!r}: the handlers object {type(handlers).__name__} defines "
                "no event handler; an events mask of 0 would subscribe to every event"
            )
        self.ready = asyncio.Event()
        self.connected = False
        self.reconnects = 0
        self.runtime_name = ""
        self.runtime_version = ""
        self.runtime_nri_version = ""
        self.subscribed: int = 0
        self._channel: Channel | None = None
        self._stopping = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._handler_tasks: set[asyncio.Task[Any]] = set()
        self._background: set[asyncio.Task[Any]] = set()
        self._sync = SyncPages(sync_max_bytes, sync_max_pages)
        self._in_progress = InFlight()
        self._methods = self._build_methods()

    # lifecycle

    async def run(self) -> None:
        """Connect, register and serve; reconnect with backoff after the runtime goes away."""
        backoff = self.backoff_initial
        first = True
        failures = 0
        while not self._stopping.is_set():
            if not first:
                if not self.reconnect:
                    return
                if await self._sleep(backoff):
                    return
                backoff = min(backoff * 2, self.backoff_max)
            first = False
            try:
                channel = await self._open()
            except OSError as exc:
                if self._socket_fd is not None or not self.reconnect:
                    where = f"fd {self._socket_fd}" if self._socket_fd is not None else None
                    raise RuntimeUnreachable(
                        f"cannot connect to the NRI socket {where or self.socket_path}: "
                        f"{exc.strerror or exc}"
                    ) from exc
                level = logging.WARNING if failures % RECONNECT_LOG_EVERY == 0 else logging.DEBUG
                failures += 1
                log.log(
                    level,
                    "NRI: cannot connect to %s (attempt %d): %s",
                    self.socket_path,
                    failures,
                    exc,
                )
                continue
            failures = 0
            self._channel = channel
            self.connected = True
            self._notify("on_connect")
            try:
                if await self._session(channel):
                    backoff = self.backoff_initial
            finally:
                self._channel = None
                self.connected = False
                self.ready.clear()
                self._sync.reset()
                self._notify("on_disconnect")
                await self._call_on_disconnect()
            if not self._stopping.is_set() and self.reconnect:
                self.reconnects += 1
                log.warning("NRI: connection to the runtime lost; reconnecting")

    async def stop(self) -> None:
        """Stop serving: close the connection and make :meth:`run` return."""
        self._stopping.set()
        channel = self._channel
        if channel is not None:
            channel.close()
            await channel.wait_closed()

    async def _sleep(self, seconds: float) -> bool:
        """Sleep up to ``seconds``; True if :meth:`stop` was called meanwhile."""
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), seconds)
        return self._stopping.is_set()

    async def _open(self) -> Channel:
        kwargs: dict[str, Any] = {
            "server_conn": PLUGIN_SERVICE_CONN,
            "client_conn": RUNTIME_SERVICE_CONN,
            "handlers": {ev.SERVICE_PLUGIN: self._methods},
            "name": f"nri-plugin {self.index}-{self.name}",
        }
        if self._socket_fd is not None:
            sock = socket.socket(fileno=self._socket_fd)
            return await connect_socket(sock, **kwargs)
        return await connect_unix(self.socket_path, **kwargs)

    async def _session(self, channel: Channel) -> bool:
        """Register on ``channel`` and serve it until it closes; True if it became ready."""
        req = api.RegisterPluginRequest(
            plugin_name=self.name, plugin_idx=self.index, NRI_version=NRI_VERSION
        )
        try:
            await channel.call(
                ev.SERVICE_RUNTIME,
                "RegisterPlugin",
                req.SerializeToString(),
                timeout=self.registration_timeout,
            )
        except (TtrpcError, asyncio.TimeoutError) as exc:
            log.error("NRI: registering plugin %s-%s failed: %s", self.index, self.name, exc)
            channel.close()
        except ChannelClosed as exc:
            log.warning("NRI: connection closed during registration: %s", exc)
        else:
            log.info("NRI: registered plugin %s-%s", self.index, self.name)
        await channel.wait_closed()
        return self.ready.is_set()

    def _notify(self, hook: str, *args: Any) -> None:
        if self.observer is None:
            return
        try:
            getattr(self.observer, hook)(*args)
        except Exception:
            log.exception("NRI: observer %s failed", hook)

    async def _call_on_disconnect(self) -> None:
        fn = getattr(self._handlers, "on_disconnect", None)
        if fn is None:
            return
        try:
            await _maybe_await(fn())
        except Exception:
            log.exception("NRI: on_disconnect handler failed")

    # unsolicited updates

    async def update_containers(
        self,
        updates: Iterable[api.ContainerUpdate],
        evictions: Iterable[api.ContainerEviction] = (),
    ) -> list[api.ContainerUpdate]:
        """Send ``UpdateContainers`` once no request is in flight; return the failed updates.

        When the runtime answers with an error status it sends no ``failed`` list, so every
        update without ``ignore_failure`` is returned as failed. Raises ``ConnectionError`` when
        not connected (or the connection drops first) and ``RuntimeError`` when awaited from a
        handler's own task (use :meth:`schedule_update_containers` there).
        """
        current = asyncio.current_task()
        if current is not None and current in self._handler_tasks:
            raise RuntimeError(
                "NRI: update_containers() awaited inside an event handler would deadlock the "
                "runtime; use schedule_update_containers() to send it after the reply"
            )
        return await self._send_updates(list(updates), list(evictions))

    def schedule_update_containers(
        self,
        updates: Iterable[api.ContainerUpdate],
        evictions: Iterable[api.ContainerEviction] = (),
    ) -> asyncio.Task[list[api.ContainerUpdate]]:
        """Queue ``UpdateContainers`` to be sent after every in-flight reply; safe in handlers.

        The returned task resolves to the failed updates (errors are logged if never awaited).
        """
        task = asyncio.get_running_loop().create_task(
            self._send_updates(list(updates), list(evictions))
        )
        self._background.add(task)
        task.add_done_callback(self._background_done)
        return task

    def _background_done(self, task: asyncio.Task[Any]) -> None:
        self._background.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("NRI: queued UpdateContainers failed: %s", task.exception())

    async def _send_updates(
        self, updates: list[api.ContainerUpdate], evictions: list[api.ContainerEviction]
    ) -> list[api.ContainerUpdate]:
        channel = self._channel
        if channel is None:
            raise ConnectionError("NRI: UpdateContainers while not connected to the runtime")
        while self._in_progress or not self.ready.is_set():
            if self._in_progress:
                await self._idle.wait()
            else:
                await self._wait_ready(channel)
            if self._channel is not channel:
                raise ConnectionError("NRI: connection lost before UpdateContainers was sent")
        payload = api.UpdateContainersRequest(update=updates, evict=evictions).SerializeToString()
        try:
            data = await channel.call(
                ev.SERVICE_RUNTIME, "UpdateContainers", payload, timeout=self.request_timeout
            )
        except TtrpcError as exc:
            log.warning("NRI: UpdateContainers failed: %s", exc)
            return [u for u in updates if not u.ignore_failure]
        return list(api.UpdateContainersResponse.FromString(data).failed)

    async def _wait_ready(self, channel: Channel) -> None:
        ready = asyncio.ensure_future(self.ready.wait())
        closed = asyncio.ensure_future(channel.wait_closed())
        try:
            await asyncio.wait({ready, closed}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            ready.cancel()
            closed.cancel()
        if not self.ready.is_set():
            raise ConnectionError("NRI: connection lost before UpdateContainers was sent")

    # request dispatch

    def _build_methods(self) -> dict[str, _ServerHandler]:
        table: dict[str, Callable[[bytes], Awaitable[bytes]]] = {
            "Configure": self._configure,
            "Synchronize": self._synchronize,
            "Shutdown": self._empty_reply,
            "StateChange": self._state_change,
            "CreateContainer": self._create_container,
            "UpdateContainer": self._update_container,
            "StopContainer": self._stop_container,
            "UpdatePodSandbox": self._update_pod_sandbox,
            "ValidateContainerAdjustment": self._validate,
        }
        for method, (req_type, event) in _SIMPLE_EVENTS.items():
            table[method] = self._simple_event(req_type, event)
        return {m: self._wrap(m, fn) for m, fn in table.items()}

    def _wrap(self, method: str, fn: Callable[[bytes], Awaitable[bytes]]) -> _ServerHandler:
        async def serve(req: Request) -> bytes:
            task = asyncio.current_task()
            if task is not None:
                self._handler_tasks.add(task)
            self._idle.clear()
            key = id(req)
            start = self._in_progress.start(key, method)
            ok = False
            try:
                reply = await fn(req.payload)
                ok = True
                return reply
            except NRIError as exc:
                raise TtrpcError(exc.code, str(exc)) from exc
            except TtrpcError:
                raise
            except Exception as exc:
                log.exception("NRI: %s handler failed", method)
                raise TtrpcError(Code.UNKNOWN, f"{method} failed in plugin: {exc}") from exc
            finally:
                elapsed = time.monotonic() - start
                self._in_progress.finish(key)
                if not self._in_progress:
                    self._idle.set()
                if task is not None:
                    self._handler_tasks.discard(task)
                if elapsed > self.request_timeout:
                    log.warning(
                        "NRI: %s took %.3f s, over the runtime's %.3f s request timeout",
                        method,
                        elapsed,
                        self.request_timeout,
                    )
                self._notify("on_request", method, elapsed, ok)

        return serve

    def oldest_request(self) -> tuple[str, float] | None:
        """The method and ``time.monotonic()`` start of the oldest request still being handled,
        or None when idle. Safe to call from any thread (the health check reads it)."""
        return self._in_progress.oldest()

    def _handler(self, name: str) -> Callable[..., Any] | None:
        fn = getattr(self._handlers, name, None)
        return fn if callable(fn) else None

    @staticmethod
    def _parse(msg_type: Any, payload: bytes) -> Any:
        msg = msg_type()
        try:
            msg.ParseFromString(payload)
        except Exception as exc:
            raise NRIError(
                f"unmarshal request error: {msg_type.DESCRIPTOR.name}: {exc}",
                Code.INVALID_ARGUMENT,
            ) from exc
        return msg

    async def _empty_reply(self, payload: bytes) -> bytes:
        return b""

    async def _configure(self, payload: bytes) -> bytes:
        req: api.ConfigureRequest = self._parse(api.ConfigureRequest, payload)
        self.ready.clear()
        self._sync.reset()
        self.runtime_name = req.runtime_name
        self.runtime_version = req.runtime_version
        self.runtime_nri_version = req.NRI_version
        if req.request_timeout > 0:
            self.request_timeout = req.request_timeout / 1000.0
        fn = self._handler("configure")
        if fn is not None:
            await _maybe_await(fn(req.config, req.runtime_name, req.runtime_version))
        valid = ev.valid_events(req.runtime_name, req.runtime_version, req.NRI_version)
        mask = self.events & valid
        dropped = self.events & ~valid
        if dropped:
            log.warning(
                "NRI: runtime %s %s does not support events %s; not subscribing to them",
                req.runtime_name,
                req.runtime_version,
                ", ".join(ev.event_names(dropped)),
            )
        if mask == 0:
            raise NRIError(
                f"plugin {self.index}-{self.name} handles no event that runtime "
                f"{req.runtime_name} {req.runtime_version} supports (valid mask 0x{valid:x})"
            )
        self.subscribed = mask
        log.info(
            "NRI: configured by %s %s (NRI %s), events 0x%x",
            req.runtime_name,
            req.runtime_version,
            req.NRI_version or "< v0.12",
            mask,
        )
        return api.ConfigureResponse(events=mask).SerializeToString()

    async def _synchronize(self, payload: bytes) -> bytes:
        try:
            self._sync.check(len(payload))
        except SyncTooLarge as exc:
            log.error("NRI: %s; closing the connection", exc)
            channel = self._channel
            if channel is not None:  # after the error reply below has been written
                asyncio.get_running_loop().call_soon(channel.close)
            raise NRIError(f"{exc}; closing the connection", Code.RESOURCE_EXHAUSTED) from None
        req: api.SynchronizeRequest = self._parse(api.SynchronizeRequest, payload)
        whole = self._sync.add(req)
        if whole is None:
            return api.SynchronizeResponse(more=True).SerializeToString()
        updates: list[api.ContainerUpdate] = []
        fn = self._handler("synchronize")
        if fn is not None:
            updates = list(await _maybe_await(fn(*whole)) or ())
        self.ready.set()
        return api.SynchronizeResponse(update=updates).SerializeToString()

    async def _create_container(self, payload: bytes) -> bytes:
        req: api.CreateContainerRequest = self._parse(api.CreateContainerRequest, payload)
        fn = self._handler("create_container")
        resp = api.CreateContainerResponse()
        if fn is not None:
            result = await _maybe_await(fn(req.pod, req.container))
            if result is not None:
                adjust, updates = result
                if adjust is not None:
                    resp.adjust.CopyFrom(adjust)
                resp.update.extend(updates or ())
        return resp.SerializeToString()

    async def _update_container(self, payload: bytes) -> bytes:
        req: api.UpdateContainerRequest = self._parse(api.UpdateContainerRequest, payload)
        fn = self._handler("update_container")
        resp = api.UpdateContainerResponse()
        if fn is not None:
            resp.update.extend(
                await _maybe_await(fn(req.pod, req.container, req.linux_resources)) or ()
            )
        return resp.SerializeToString()

    async def _stop_container(self, payload: bytes) -> bytes:
        req: api.StopContainerRequest = self._parse(api.StopContainerRequest, payload)
        fn = self._handler("stop_container")
        resp = api.StopContainerResponse()
        if fn is not None:
            resp.update.extend(await _maybe_await(fn(req.pod, req.container)) or ())
        return resp.SerializeToString()

    async def _update_pod_sandbox(self, payload: bytes) -> bytes:
        req: api.UpdatePodSandboxRequest = self._parse(api.UpdatePodSandboxRequest, payload)
        fn = self._handler("update_pod_sandbox")
        if fn is not None:
            overhead = (
                req.overhead_linux_resources if req.HasField("overhead_linux_resources") else None
            )
            resources = req.linux_resources if req.HasField("linux_resources") else None
            await _maybe_await(fn(req.pod, overhead, resources))
        return b""

    async def _validate(self, payload: bytes) -> bytes:
        req: api.ValidateContainerAdjustmentRequest = self._parse(
            api.ValidateContainerAdjustmentRequest, payload
        )
        fn = self._handler("validate_container_adjustment")
        reason = await _maybe_await(fn(req)) if fn is not None else None
        if reason:
            return api.ValidateContainerAdjustmentResponse(
                reject=True, reason=str(reason)
            ).SerializeToString()
        return b""

    def _simple_event(self, req_type: Any, event: int) -> Callable[[bytes], Awaitable[bytes]]:
        async def serve(payload: bytes) -> bytes:
            req = self._parse(req_type, payload)
            if event in ev.POD_EVENTS:
                await self._dispatch(event, req.pod, None)
            else:
                await self._dispatch(event, req.pod, req.container)
            return b""

        return serve

    async def _state_change(self, payload: bytes) -> bytes:
        req: api.StateChangeEvent = self._parse(api.StateChangeEvent, payload)
        if req.event not in ev.STATE_CHANGE_EVENTS:
            raise NRIError(
                f"StateChange carries event {req.event} "
                f"({api.Event.Name(req.event) if req.event in api.Event.values() else '?'}), "
                "which is only delivered through its own RPC",
                Code.INVALID_ARGUMENT,
            )
        await self._dispatch(
            req.event, req.pod, None if req.event in ev.POD_EVENTS else req.container
        )
        return b""

    async def _dispatch(
        self, event: int, pod: api.PodSandbox, container: api.Container | None
    ) -> None:
        fn = self._handler(ev.EVENT_HANDLERS[event])
        if fn is None:
            return
        if container is None:
            await _maybe_await(fn(pod))
        else:
            await _maybe_await(fn(pod, container))


#: Dedicated per-event RPCs (NRI v0.12+) whose reply is an empty message.
_SIMPLE_EVENTS: dict[str, tuple[Any, int]] = {
    "RunPodSandbox": (api.RunPodSandboxRequest, api.RUN_POD_SANDBOX),
    "StopPodSandbox": (api.StopPodSandboxRequest, api.STOP_POD_SANDBOX),
    "RemovePodSandbox": (api.RemovePodSandboxRequest, api.REMOVE_POD_SANDBOX),
    "PostUpdatePodSandbox": (api.PostUpdatePodSandboxRequest, api.POST_UPDATE_POD_SANDBOX),
    "PostCreateContainer": (api.PostCreateContainerRequest, api.POST_CREATE_CONTAINER),
    "StartContainer": (api.StartContainerRequest, api.START_CONTAINER),
    "PostStartContainer": (api.PostStartContainerRequest, api.POST_START_CONTAINER),
    "PostUpdateContainer": (api.PostUpdateContainerRequest, api.POST_UPDATE_CONTAINER),
    "RemoveContainer": (api.RemoveContainerRequest, api.REMOVE_CONTAINER),
}
