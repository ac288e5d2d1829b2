"""The plugin's pod spec lookups within a time budget per NRI request.

A lookup waits at most ``timeout`` seconds for a pod its source does not know yet, and all the
lookups of one request together wait at most ``timeout`` seconds too: inside a
:meth:`SpecLookups.batch` (Synchronize, which may meet many pods the source does not know) the
wait left shrinks with each lookup, and once it is spent lookups only read what the source
holds (counted by ``nri_plrm_pod_lookups_unwaited_total``); a pod not there is placed from NRI.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator

from nri_plrm.engine.spec import PodSpec
from nri_plrm.observability.metrics import Metrics
from nri_plrm.podsource.base import PodSpecSource


class SpecLookups:
    """Lookups of pod specs with at most ``timeout`` seconds of waiting per request."""

    def __init__(
        self,
        timeout: float,
        metrics: Metrics | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.timeout = timeout
        self.metrics = metrics
        self._clock = clock
        self._memo: dict[str, PodSpec | None] | None = None
        self._deadline = 0.0

    def now(self) -> float:
        """The lookups' clock (the start of a request, for :meth:`left`)."""
        return self._clock()

    def left(self, started: float) -> float:
        """Seconds a request that began at ``started`` may still wait: within a batch, until
        the batch's deadline; else what remains of ``timeout``."""
        end = self._deadline if self._memo is not None else started + self.timeout
        return max(0.0, end - self._clock())

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """One request making many lookups: each pod is looked up once and the waits share
        one budget of ``timeout`` seconds."""
        self._memo = {}
        self._deadline = self._clock() + self.timeout
        try:
            yield
        finally:
            self._memo = None

    async def find(
        self, source: PodSpecSource | None, uid: str, namespace: str, name: str
    ) -> PodSpec | None:
        """The pod's spec from ``source`` (None without one), waiting within the budget."""
        if source is None:
            return None
        memo = self._memo
        if memo is None:
            return await source.lookup(uid, namespace, name, self.timeout)
        if uid in memo:
            return memo[uid]
        wait = min(self.timeout, max(0.0, self._deadline - self._clock()))
        spec = await source.lookup(uid, namespace, name, wait)
        unwaited = spec is None and wait <= 0 < self.timeout and source.available
        if unwaited and self.metrics is not None:
            self.metrics.pod_lookup_unwaited()
        memo[uid] = spec
        return spec
