"""Pods refused at admission leave the node, as the kubelet's own rejections do.

When the kubelet refuses a pod at admission (``rejectPod``) it sets the pod's phase to
``Failed`` with its reason and the message ``Pod was rejected: <message>``; the pod's controller
then creates a replacement and the scheduler places it again. A pod this plugin refuses would
instead stay on the node, its ``RunPodSandbox`` or ``CreateContainer`` retried for ever. So,
in API mode, :class:`RefusedPods` sets the same status through the API (``pods/status``, a merge
patch guarded by the pod's uid). The kubelet keeps a terminal phase it finds in the API (its
status generation forces the phase back to the API's) and its sync then ends the pod, so the
outcome is the kubelet's own.

Only refusals that are final are passed here: admission errors decided from the pod's API spec
at ``RunPodSandbox`` or ``CreateContainer``. Never: decisions inferred from NRI alone (the cache
did not know the pod in time; the retry may have the spec), refusals that a retry can lift
(the state could not be saved, the API cache was unavailable), resize refusals (the pod keeps
running as it was). ``record`` never blocks and never raises; the patch is made in the
background, once per pod uid, and skipped for a pod that is gone, replaced (another uid),
already terminal or bound to another node.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from dataclasses import dataclass

from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import Pod
from lightkube.types import PatchType

from nri_plrm.observability.metrics import Metrics
from nri_plrm.podsource.background import QueueWorker

REJECTED_PREFIX = "Pod was rejected: "
"""The kubelet's prefix of a rejected pod's status message."""
TERMINAL_PHASES = frozenset({"Failed", "Succeeded"})
REMEMBERED = 4096
"""Pod uids remembered as handled (a refused pod is retried by the kubelet: patch it once)."""


@dataclass(frozen=True)
class Refusal:
    """One pod refused at admission."""

    pod_uid: str
    namespace: str
    name: str
    reason: str
    message: str


def failed_status_patch(refusal: Refusal) -> dict[str, object]:
    """The merge patch the kubelet's rejection amounts to; ``metadata.uid`` guards against a
    pod of the same name that replaced this one (the API server refuses a changed uid)."""
    return {
        "metadata": {"uid": refusal.pod_uid},
        "status": {
            "phase": "Failed",
            "reason": refusal.reason,
            "message": REJECTED_PREFIX + refusal.message,
        },
    }


class RefusedPods:
    """Marks refused pods ``Failed`` in the background; see the module docstring."""

    def __init__(
        self,
        client: AsyncClient,
        node_name: str,
        *,
        metrics: Metrics | None = None,
        logger: logging.Logger | None = None,
        queue_size: int = 64,
    ) -> None:
        self.client = client
        self.node_name = node_name
        self.metrics = metrics
        self.log = logger or logging.getLogger("nri_plrm.podsource.refusals")
        self._worker = QueueWorker("refused-pods", queue_size, self._fail, self._not_failed)
        self._handled: OrderedDict[str, None] = OrderedDict()

    def record(self, pod_uid: str, namespace: str, name: str, reason: str, message: str) -> None:
        """Queue a refused pod (once per uid); returns at once."""
        if pod_uid in self._handled:
            return
        if not self._worker.put(Refusal(pod_uid, namespace, name, reason, message)):
            self._count("dropped")
            return
        self._handled[pod_uid] = None
        while len(self._handled) > REMEMBERED:
            self._handled.popitem(last=False)

    def start(self) -> asyncio.Task[None]:
        """Run the patcher in the running loop."""
        return self._worker.start()

    async def stop(self) -> None:
        """Stop it (queued refusals are dropped)."""
        await self._worker.stop()

    async def drain(self) -> None:
        """Wait until every queued refusal is handled."""
        await self._worker.drain()

    def _not_failed(self, refusal: Refusal, exc: Exception) -> None:
        self._count("error")
        self.log.warning(
            "pod %s/%s refused (%s) but not marked Failed: %s",
            refusal.namespace,
            refusal.name,
            refusal.reason,
            exc,
        )

    async def _fail(self, refusal: Refusal) -> None:
        """Patch the pod's status, counting the outcome."""
        self._count(await self._patch(refusal))

    async def _patch(self, refusal: Refusal) -> str:
        """Patch the pod's status; the outcome (a metric label)."""
        try:
            pod = await self.client.get(Pod, refusal.name, namespace=refusal.namespace)
        except ApiError as exc:
            if exc.status.code == 404:
                return "gone"
            raise
        meta, spec, status = pod.metadata, pod.spec, pod.status
        if meta is None or meta.uid != refusal.pod_uid:
            return "gone"
        if status is not None and status.phase in TERMINAL_PHASES:
            return "terminal"
        if spec is None or spec.nodeName != self.node_name:
            return "other_node"
        await self.client.patch(
            Pod.Status,
            refusal.name,
            failed_status_patch(refusal),
            namespace=refusal.namespace,
            patch_type=PatchType.MERGE,
        )
        self.log.warning(
            "pod %s/%s marked Failed (%s), as the kubelet ends a pod it refuses: its "
            "controller can replace it elsewhere",
            refusal.namespace,
            refusal.name,
            refusal.reason,
        )
        return "failed"

    def _count(self, result: str) -> None:
        if self.metrics is not None:
            self.metrics.refused_pod(result)
