"""One named background task of the running loop, started at most once and stopped on demand."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine
from typing import Any


class BackgroundTask:
    """Runs ``body()`` as the task ``name``: ``start`` unless it is running, ``stop`` cancels it."""

    def __init__(self, name: str, body: Callable[[], Coroutine[Any, Any, None]]) -> None:
        self.name = name
        self._body = body
        self._task: asyncio.Task[None] | None = None

    def start(self) -> asyncio.Task[None]:
        """The running task, created in the running loop if there is none (or it ended)."""
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._body(), name=self.name)
        return self._task

    async def stop(self) -> None:
        """Cancel the task and wait for it to end (a no-op when not started)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
