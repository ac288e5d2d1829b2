"""Kubernetes Events on pods, as the kubelet posts them when it rejects a pod.

``EventRecorder.record`` never blocks and never raises: it filters (identical events within
``dedupe_window`` are dropped, a token bucket bounds the rate) and queues; a background task
posts each queued event as a core/v1 ``Event`` (``involvedObject`` the pod, ``source`` component
``nri-plrm`` on this node). Failures are logged and counted, never retried into a backlog.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, cast

from lightkube import AsyncClient
from lightkube.resources.core_v1 import Event

from nri_plrm.observability.metrics import Metrics
from nri_plrm.podsource.background import QueueWorker
from nri_plrm.util.ratelimit import TokenBucket

COMPONENT = "nri-plrm"
"""``source.component`` and ``reportingComponent`` of every Event."""
MAX_MESSAGE = 1024
"""Longer messages are cut to this many characters (the API server's limit for notes)."""


@dataclass(frozen=True)
class PodEvent:
    """One Event to post on a pod."""

    pod_uid: str
    namespace: str
    name: str
    reason: str
    message: str
    type: str = "Warning"


class EventRecorder:
    """Posts pod Events in the background; see the module docstring.

    ``client`` is a lightkube ``AsyncClient``; ``node_name`` is ``source.host``. Call ``start()``
    in the running loop and ``stop()`` at shutdown; ``drain()`` waits for the queue to empty.
    """

    def __init__(
        self,
        client: AsyncClient,
        node_name: str,
        *,
        metrics: Metrics | None = None,
        logger: logging.Logger | None = None,
        queue_size: int = 256,
        rate: float = 1.0,
        burst: int = 25,
        dedupe_window: float = 600.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if queue_size < 1:
            raise ValueError(f"event queue_size={queue_size}: must be at least 1")
        self.client = client
        self.node_name = node_name
        self.metrics = metrics
        self.log = logger or logging.getLogger("nri_plrm.podsource.events")
        self.dedupe_window = dedupe_window
        self._clock = clock
        self._bucket = TokenBucket(rate, burst, clock)
        self._worker = QueueWorker("pod-events", queue_size, self._post, self._not_posted)
        self._recent: OrderedDict[PodEvent, float] = OrderedDict()
        self._overflow_logged = False

    def record(
        self,
        pod_uid: str,
        namespace: str,
        name: str,
        reason: str,
        message: str,
        type: str = "Warning",
    ) -> None:
        """Queue an Event on the pod; returns at once (filtered, dropped or queued)."""
        event = PodEvent(pod_uid, namespace, name, reason, message[:MAX_MESSAGE], type)
        now = self._clock()
        while self._recent and next(iter(self._recent.values())) <= now - self.dedupe_window:
            self._recent.popitem(last=False)
        if event in self._recent:
            self._count("deduplicated")
            return
        if not self._bucket.allow():
            self._count("rate_limited")
            self.log.debug("event %s on %s/%s rate-limited", reason, namespace, name)
            return
        if not self._worker.put(event):
            self._count("dropped")
            if not self._overflow_logged:
                self._overflow_logged = True
                self.log.warning(
                    "event queue full (%d): dropping events until the API catches up",
                    self._worker.queue.maxsize,
                )
            return
        self._recent[event] = now

    def start(self) -> asyncio.Task[None]:
        """Run the posting task in the running loop."""
        return self._worker.start()

    async def drain(self) -> None:
        """Wait until every queued event was posted or failed."""
        await self._worker.drain()

    async def stop(self) -> None:
        """Stop posting (queued events are dropped)."""
        await self._worker.stop()

    async def _post(self, event: PodEvent) -> None:
        obj = cast(Event, Event.from_dict(event_object(event, self.node_name)))
        await self.client.create(obj)
        self._count("posted")
        self._overflow_logged = False

    def _not_posted(self, event: PodEvent, exc: Exception) -> None:
        self._count("failed")
        self.log.warning(
            "event %s on pod %s/%s not posted: %s", event.reason, event.namespace, event.name, exc
        )

    def _count(self, result: str) -> None:
        if self.metrics is not None:
            self.metrics.kubernetes_event(result)


def event_object(event: PodEvent, node_name: str, now: datetime | None = None) -> dict[str, Any]:
    """The core/v1 Event for ``event``, named like the kubelet's (``<pod>.<unix nanos hex>``)."""
    now = now or datetime.now(timezone.utc)
    stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    nanos = int(now.timestamp() * 1_000_000) * 1000
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{event.name}.{nanos:x}", "namespace": event.namespace},
        "involvedObject": {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": event.name,
            "namespace": event.namespace,
            "uid": event.pod_uid,
        },
        "reason": event.reason,
        "message": event.message,
        "type": event.type,
        "source": {"component": COMPONENT, "host": node_name},
        "reportingComponent": COMPONENT,
        "reportingInstance": node_name,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }
