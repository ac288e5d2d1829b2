"""A PodResources v1 client: merges the kubelet's devices into our replies, and lets
``nri-plrm state`` query a running plugin."""

from __future__ import annotations

import logging
import threading
from typing import Any, TypeVar

import grpc
from google.protobuf.message import Message

from nri_plrm.proto import podresources_api_pb2 as pb

SERVICE = "/v1.PodResourcesLister/"
MAX_MESSAGE_BYTES = 16 * 1024 * 1024
"""What device consumers allow for a reply (multus, the SR-IOV exporter)."""

_log = logging.getLogger(__name__)
_M = TypeVar("_M", bound=Message)


class PodResourcesClient:
    """Calls ``List``, ``Get`` and ``GetAllocatableResources`` on a PodResources socket.

    Failures return None and are logged (``log_failures``) and kept in :attr:`last_error`: a
    missing kubelet never breaks our own reply.
    """

    def __init__(
        self, socket_path: str, timeout: float = 1.0, *, log_failures: bool = True
    ) -> None:
        self.socket_path = socket_path
        self.timeout = timeout
        self.log_failures = log_failures
        self.last_error: tuple[str, str] | None = None
        """The status code name and details of the last failed call."""
        self._channel: grpc.Channel | None = None
        self._lock = threading.Lock()

    def _call(self, method: str, request: Message, reply: type[_M]) -> _M | None:
        with self._lock:
            if self._channel is None:
                self._channel = grpc.insecure_channel(
                    f"unix://{self.socket_path}",
                    options=[("grpc.max_receive_message_length", MAX_MESSAGE_BYTES)],
                )
            channel = self._channel
        call: Any = channel.unary_unary(
            SERVICE + method,
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=reply.FromString,
        )
        try:
            result: _M = call(request, timeout=self.timeout)
        except grpc.RpcError as exc:
            self.last_error = (str(exc.code().name), str(exc.details()))
            if self.log_failures:
                _log.warning(
                    "PodResources %s on %s failed: %s: %s",
                    method,
                    self.socket_path,
                    exc.code(),
                    exc.details(),
                )
            return None
        return result

    def list(self) -> pb.ListPodResourcesResponse | None:
        """The ``List`` reply, or None."""
        return self._call("List", pb.ListPodResourcesRequest(), pb.ListPodResourcesResponse)

    def get(self, namespace: str, name: str) -> pb.GetPodResourcesResponse | None:
        """The ``Get`` reply for one pod, or None."""
        request = pb.GetPodResourcesRequest(pod_name=name, pod_namespace=namespace)
        return self._call("Get", request, pb.GetPodResourcesResponse)

    def allocatable(self) -> pb.AllocatableResourcesResponse | None:
        """The ``GetAllocatableResources`` reply, or None."""
        return self._call(
            "GetAllocatableResources",
            pb.AllocatableResourcesRequest(),
            pb.AllocatableResourcesResponse,
        )

    def close(self) -> None:
        """Close the channel."""
        with self._lock:
            if self._channel is not None:
                self._channel.close()
                self._channel = None
