"""The PodResources v1 gRPC server (``v1.PodResourcesLister``) on a unix socket.

Wire-compatible with the kubelet's endpoint: same service and method names, same field
numbers, same rate limit (``RESOURCE_EXHAUSTED "rejected by rate limit"``) and the same error
for ``Get`` on an unknown pod (code ``UNKNOWN``, ``pod <name> in namespace <ns> not found``).

The socket is bound inside a private temporary directory, given its mode and group, then
renamed into place, so it is never reachable with looser permissions. A stale socket left by a
dead process is removed; a live one (another instance answering) or a non-socket file at the
path is an error.
"""

from __future__ import annotations

import contextlib
import grp
import logging
import os
import socket
import stat
import tempfile
import threading
from collections.abc import Callable, Sequence
from concurrent import futures
from typing import Any, NoReturn, TypeVar

import grpc
from google.protobuf.message import Message

from nri_plrm.config.settings import PodResourcesSettings
from nri_plrm.ledger.view import PodResourcesView, PodView, find_pod
from nri_plrm.podresources import report
from nri_plrm.podresources.client import PodResourcesClient
from nri_plrm.proto import podresources_api_pb2 as pb
from nri_plrm.util.ratelimit import TokenBucket
from nri_plrm.util.steps import beside_loop

SERVICE_NAME = "v1.PodResourcesLister"
RATE_LIMIT_MESSAGE = "rejected by rate limit"

RequestObserver = Callable[[str, str], None]
"""Called once per request with the method name and the gRPC status code name (``OK`` ...)."""

_log = logging.getLogger(__name__)
_Req = TypeVar("_Req", bound=Message)


class SocketInUseError(OSError):
    """The socket path is served by a live process, or is not a socket at all."""


class PodResourcesService:
    """The three RPCs over a view, with rate limiting and the optional kubelet merge."""

    def __init__(
        self,
        view: PodResourcesView,
        limiter: TokenBucket | None = None,
        kubelet: PodResourcesClient | None = None,
        observer: RequestObserver | None = None,
    ) -> None:
        self.view = view
        self.limiter = limiter or TokenBucket()
        self.kubelet = kubelet
        self.observer = observer
        self._lock = threading.Lock()
        self._list_cache: tuple[Sequence[PodView], pb.ListPodResourcesResponse] | None = None

    def _admit(self, method: str, context: grpc.ServicerContext) -> None:
        if not self.limiter.allow():
            self._observe(method, "RESOURCE_EXHAUSTED")
            _abort(context, grpc.StatusCode.RESOURCE_EXHAUSTED, RATE_LIMIT_MESSAGE)

    def _observe(self, method: str, code: str) -> None:
        if self.observer is not None:
            self.observer(method, code)

    def list(
        self, request: pb.ListPodResourcesRequest, context: grpc.ServicerContext
    ) -> pb.ListPodResourcesResponse:
        """``List``: every pod with its containers."""
        self._admit("List", context)
        reply = self._listed()
        if self.kubelet is not None:
            theirs = self.kubelet.list()
            if theirs is not None:
                merged = pb.ListPodResourcesResponse()
                merged.CopyFrom(reply)
                report.merge_list(merged, theirs)
                reply = merged
        self._observe("List", "OK")
        return reply

    def _listed(self) -> pb.ListPodResourcesResponse:
        """Our ``List`` reply, rebuilt only when the view publishes a new snapshot."""
        pods = self.view.pods()
        with self._lock:
            cached = self._list_cache
            if cached is not None and cached[0] is pods:
                return cached[1]
        reply = beside_loop(report.list_steps(pods))
        with self._lock:
            self._list_cache = (pods, reply)
        return reply

    def get(
        self, request: pb.GetPodResourcesRequest, context: grpc.ServicerContext
    ) -> pb.GetPodResourcesResponse:
        """``Get``: one pod by namespace and name; unknown pods fail like the kubelet's."""
        self._admit("Get", context)
        pod = find_pod(self.view, request.pod_namespace, request.pod_name)
        if pod is None:
            self._observe("Get", "UNKNOWN")
            _abort(
                context,
                grpc.StatusCode.UNKNOWN,
                f"pod {request.pod_name} in namespace {request.pod_namespace} not found",
            )
        message = report.pod_message(pod)
        if self.kubelet is not None:
            theirs = self.kubelet.get(pod.namespace, pod.name)
            if theirs is not None:
                report.merge_devices(message, theirs.pod_resources)
        self._observe("Get", "OK")
        return pb.GetPodResourcesResponse(pod_resources=message)

    def allocatable(
        self, request: pb.AllocatableResourcesRequest, context: grpc.ServicerContext
    ) -> pb.AllocatableResourcesResponse:
        """``GetAllocatableResources``: CPUs and memory the plugin may hand out."""
        self._admit("GetAllocatableResources", context)
        reply = report.allocatable_response(self.view)
        if self.kubelet is not None:
            theirs = self.kubelet.allocatable()
            if theirs is not None:
                report.merge_allocatable(reply, theirs)
        self._observe("GetAllocatableResources", "OK")
        return reply

    def handler(self) -> grpc.GenericRpcHandler:
        """The gRPC handler serving ``v1.PodResourcesLister``."""

        def unary(fn: Callable[[Any, grpc.ServicerContext], Message], req: type[_Req]) -> Any:
            return grpc.unary_unary_rpc_method_handler(
                fn,
                request_deserializer=req.FromString,
                response_serializer=lambda m: m.SerializeToString(),
            )

        return grpc.method_handlers_generic_handler(
            SERVICE_NAME,
            {
                "List": unary(self.list, pb.ListPodResourcesRequest),
                "Get": unary(self.get, pb.GetPodResourcesRequest),
                "GetAllocatableResources": unary(self.allocatable, pb.AllocatableResourcesRequest),
            },
        )


def _abort(context: grpc.ServicerContext, code: grpc.StatusCode, message: str) -> NoReturn:
    """End the call with a status; grpc's ``abort`` raises, the guard below states it."""
    context.abort(code, message)
    raise RuntimeError(f"grpc ServicerContext.abort returned for {code}: {message}")


def remove_stale_socket(path: str) -> None:
    """Remove a socket nobody answers on; raise SocketInUseError for a live one or a non-socket."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(st.st_mode):
        raise SocketInUseError(
            f"pod_resources.socket {path!r}: exists and is not a socket; refusing to remove it"
        )
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.settimeout(1.0)
        probe.connect(path)
    except (ConnectionRefusedError, FileNotFoundError):
        _log.info("removing stale PodResources socket %s", path)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        return
    except OSError as exc:
        raise SocketInUseError(f"pod_resources.socket {path!r}: cannot probe it: {exc}") from exc
    finally:
        probe.close()
    raise SocketInUseError(
        f"pod_resources.socket {path!r}: another process is serving on it; stop it first"
    )


class PodResourcesServer:
    """Serves a :class:`PodResourcesService` on a unix socket with a given mode and group."""

    def __init__(
        self,
        service: PodResourcesService,
        socket_path: str,
        *,
        mode: int = 0o600,
        group: str = "",
        max_workers: int = 4,
    ) -> None:
        self.service = service
        self.socket_path = socket_path
        self.mode = mode
        self.group = group
        self._max_workers = max_workers
        self._server: grpc.Server | None = None
        self._inode: int | None = None

    @classmethod
    def from_settings(
        cls,
        view: PodResourcesView,
        settings: PodResourcesSettings,
        observer: RequestObserver | None = None,
    ) -> PodResourcesServer:
        """A server configured from ``[pod_resources]``."""
        kubelet = (
            PodResourcesClient(settings.kubelet_socket, settings.kubelet_timeout)
            if settings.kubelet_socket
            else None
        )
        service = PodResourcesService(
            view, TokenBucket(settings.qps, settings.burst), kubelet, observer
        )
        return cls(service, settings.socket, mode=settings.mode, group=settings.group)

    def start(self) -> None:
        """Bind the socket and start serving; raises OSError subclasses naming the path."""
        gid = _group_id(self.group) if self.group else None
        parent = os.path.dirname(self.socket_path) or "."
        os.makedirs(parent, mode=0o755, exist_ok=True)
        remove_stale_socket(self.socket_path)
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=self._max_workers))
        server.add_generic_rpc_handlers((self.service.handler(),))
        with tempfile.TemporaryDirectory(dir=parent, prefix=".pod-resources.") as private:
            staged = os.path.join(private, "s")
            server.add_insecure_port(f"unix:{staged}")
            server.start()
            try:
                os.chmod(staged, self.mode)
                if gid is not None:
                    os.chown(staged, -1, gid)
                os.rename(staged, self.socket_path)
            except OSError:
                server.stop(None)
                raise
        self._inode = os.lstat(self.socket_path).st_ino
        self._server = server
        _log.info("PodResources endpoint listening on %s (mode %04o)", self.socket_path, self.mode)

    def stop(self, grace: float | None = 1.0) -> None:
        """Stop serving and remove our socket (only if it is still ours)."""
        if self._server is None:
            return
        self._server.stop(grace).wait()
        self._server = None
        with contextlib.suppress(FileNotFoundError):
            if os.lstat(self.socket_path).st_ino == self._inode:
                os.unlink(self.socket_path)
        if self.service.kubelet is not None:
            self.service.kubelet.close()


def _group_id(name: str) -> int:
    try:
        return grp.getgrnam(name).gr_gid
    except KeyError:
        if name.isdigit():
            return int(name)
        raise LookupError(f"pod_resources.group {name!r}: no such group") from None
