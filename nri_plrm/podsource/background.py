"""Background work of the running loop: one named task started at most once and stopped on
demand, and a bounded queue such a task works off item by item."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Generic, TypeVar

T = TypeVar("T")


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


class QueueWorker(Generic[T]):
    """A bounded queue worked off by the task ``name``: ``handle`` each item in turn; an item
    whose ``handle`` raises goes to ``failed`` with the exception, and the next one follows.
    ``put`` never waits (False when the queue is full)."""

    def __init__(
        self,
        name: str,
        size: int,
        handle: Callable[[T], Awaitable[None]],
        failed: Callable[[T, Exception], None],
    ) -> None:
        self.queue: asyncio.Queue[T] = asyncio.Queue(size)
        self._handle = handle
        self._failed = failed
        self._task = BackgroundTask(name, self._run)

    def put(self, item: T) -> bool:
        """Queue ``item``; False when the queue is full (the item is not kept)."""
        try:
            self.queue.put_nowait(item)
        except asyncio.QueueFull:
            return False
        return True

    def start(self) -> asyncio.Task[None]:
        """Run the worker in the running loop."""
        return self._task.start()

    async def stop(self) -> None:
        """Stop the worker (queued items are dropped)."""
        await self._task.stop()

    async def drain(self) -> None:
        """Wait until every queued item is handled."""
        await self.queue.join()

    async def _run(self) -> None:
        while True:
            item = await self.queue.get()
            try:
                await self._handle(item)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the API's and the connection's failures alike
                self._failed(item, exc)
            finally:
                self.queue.task_done()
