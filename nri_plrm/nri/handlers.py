"""The contract between the NRI stub and a plugin: the handlers it may define, the observer
of its requests, and the error a handler raises to fail one request."""

from __future__ import annotations

from typing import Protocol

from nri_plrm.proto import nri_api_pb2 as api
from nri_plrm.ttrpc.messages import Code


class NRIError(Exception):
    """Raised by a handler to fail that one request; the message goes to the runtime."""

    def __init__(self, message: str, code: int = Code.UNKNOWN) -> None:
        super().__init__(message)
        self.code = code


class Handlers(Protocol):
    """The shape of a plugin's handlers object. Every method is optional.

    The subscription mask contains exactly the events whose method exists (``configure``,
    ``synchronize`` and ``on_disconnect`` are not events). Return values may be awaitables.
    """

    def configure(self, config: str, runtime_name: str, runtime_version: str) -> None: ...

    def synchronize(
        self, pods: list[api.PodSandbox], containers: list[api.Container]
    ) -> list[api.ContainerUpdate]: ...

    def run_pod_sandbox(self, pod: api.PodSandbox) -> None: ...

    def stop_pod_sandbox(self, pod: api.PodSandbox) -> None: ...

    def remove_pod_sandbox(self, pod: api.PodSandbox) -> None: ...

    def update_pod_sandbox(
        self,
        pod: api.PodSandbox,
        overhead: api.LinuxResources | None,
        resources: api.LinuxResources | None,
    ) -> None: ...

    def post_update_pod_sandbox(self, pod: api.PodSandbox) -> None: ...

    def create_container(
        self, pod: api.PodSandbox, container: api.Container
    ) -> tuple[api.ContainerAdjustment | None, list[api.ContainerUpdate]]: ...

    def update_container(
        self, pod: api.PodSandbox, container: api.Container, resources: api.LinuxResources
    ) -> list[api.ContainerUpdate]: ...

    def stop_container(
        self, pod: api.PodSandbox, container: api.Container
    ) -> list[api.ContainerUpdate]: ...

    def start_container(self, pod: api.PodSandbox, container: api.Container) -> None: ...

    def remove_container(self, pod: api.PodSandbox, container: api.Container) -> None: ...

    def post_create_container(self, pod: api.PodSandbox, container: api.Container) -> None: ...

    def post_start_container(self, pod: api.PodSandbox, container: api.Container) -> None: ...

    def post_update_container(self, pod: api.PodSandbox, container: api.Container) -> None: ...

    def validate_container_adjustment(
        self, request: api.ValidateContainerAdjustmentRequest
    ) -> str | None:
        """Return a rejection reason, or None to accept (subscribes to validation)."""

    def on_disconnect(self) -> None: ...


class StubObserver(Protocol):
    """Hooks for metrics; called on the event loop, must not block."""

    def on_request(self, method: str, seconds: float, ok: bool) -> None: ...

    def on_connect(self) -> None: ...

    def on_disconnect(self) -> None: ...
