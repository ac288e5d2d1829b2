"""Where the plugin gets full pod specs from, when it can: the contract between the plugin and
its spec sources (the Kubernetes API cache, the manifests given to ``simulate``)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from nri_plrm.engine.spec import PodSpec


class PodSpecSource(Protocol):
    """A read-only view of this node's pod specs. Lookups never do network I/O."""

    @property
    def available(self) -> bool:
        """True while the source is usable (e.g. the API cache is synced); False means NRI-only."""
        ...

    async def lookup(self, uid: str, namespace: str, name: str, timeout: float) -> PodSpec | None:
        """The pod's spec, waiting at most ``timeout`` seconds for it to appear; None if unknown,
        and None at once while not ``available`` (sources count such fallbacks)."""
        ...


class StaticPodSpecSource:
    """Pod specs known up front (``simulate``, tests): looked up by uid, then by namespace/name."""

    def __init__(self, pods: Iterable[PodSpec] = ()) -> None:
        self._by_uid: dict[str, PodSpec] = {}
        self._by_name: dict[tuple[str, str], PodSpec] = {}
        for pod in pods:
            self.add(pod)

    def add(self, pod: PodSpec) -> None:
        """Make a pod's spec known."""
        self._by_uid[pod.uid] = pod
        self._by_name[(pod.namespace, pod.name)] = pod

    @property
    def available(self) -> bool:
        """Always usable."""
        return True

    async def lookup(self, uid: str, namespace: str, name: str, timeout: float) -> PodSpec | None:
        """The spec by uid, else by namespace/name; never waits."""
        return self._by_uid.get(uid) or self._by_name.get((namespace, name))


class PodEventSink(Protocol):
    """Where the plugin reports what it rejected or corrected, as Kubernetes Events on the pod.

    ``record`` must return at once and never raise (posting happens elsewhere, rate-limited).
    """

    def record(
        self,
        pod_uid: str,
        namespace: str,
        name: str,
        reason: str,
        message: str,
        type: str = "Warning",
    ) -> None:
        """Report ``reason``/``message`` (the kubelet's) on the pod."""
        ...


class PodRefusalSink(Protocol):
    """Where the plugin reports a final admission refusal decided from the pod's API spec, so
    the pod can end as the kubelet ends a pod it refuses (``nri_plrm.podsource.refusals``).

    ``record`` must return at once and never raise.
    """

    def record(self, pod_uid: str, namespace: str, name: str, reason: str, message: str) -> None:
        """Report the refusal (the kubelet's reason and message)."""
        ...
