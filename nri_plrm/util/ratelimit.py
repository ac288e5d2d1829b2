"""A token bucket: the kubelet's PodResources limiter (100 requests/s, burst 10 by default); it
also paces the plugin's Kubernetes Events."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

DEFAULT_QPS = 100.0
DEFAULT_BURST = 10


class TokenBucket:
    """Allows ``burst`` requests at once, refilled at ``qps`` tokens per second; thread-safe."""

    def __init__(
        self,
        qps: float = DEFAULT_QPS,
        burst: int = DEFAULT_BURST,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if qps <= 0 or burst < 1:
            raise ValueError(
                f"token bucket qps={qps} burst={burst}: rate must be > 0 and burst >= 1"
            )
        self._qps = qps
        self._burst = float(burst)
        self._clock = clock
        self._tokens = float(burst)
        self._last = clock()
        self._lock = threading.Lock()

    def allow(self) -> bool:
        """Take one token if there is one."""
        with self._lock:
            now = self._clock()
            self._tokens = min(self._burst, self._tokens + (now - self._last) * self._qps)
            self._last = now
            if self._tokens >= 1.0:
                self._tokens -= 1.0
                return True
            return False
