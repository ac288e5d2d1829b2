"""The NRI requests being handled and since when, readable from any thread (health checks)."""

from __future__ import annotations

import threading
import time


class InFlight:
    """Start times (``time.monotonic()``) of the requests in progress, by a caller's key."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._started: dict[int, tuple[str, float]] = {}

    def start(self, key: int, method: str) -> float:
        """Record that request ``key`` (``method``) starts now; returns the start time."""
        now = time.monotonic()
        with self._lock:
            self._started[key] = (method, now)
        return now

    def finish(self, key: int) -> None:
        """Request ``key`` is answered."""
        with self._lock:
            del self._started[key]

    def __len__(self) -> int:
        """The number of requests in progress."""
        with self._lock:
            return len(self._started)

    def oldest(self) -> tuple[str, float] | None:
        """(method, start time) of the oldest request in progress, or None when idle."""
        with self._lock:
            started = list(self._started.values())
        return min(started, key=lambda item: item[1]) if started else None
