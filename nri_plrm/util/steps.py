"""Work in steps: a generator that yields between pieces of a long computation and returns its
result, so one body of code can run at once (:func:`finish`), inside the event loop between
requests (:func:`stepwise`), never holding the loop for more than a short step, or on a thread
beside the loop (:func:`beside_loop`), letting the loop have the GIL between pieces."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Generator
from typing import TypeVar

T = TypeVar("T")

Steps = Generator[None, None, T]
"""A computation of a ``T`` that yields between its pieces."""

STEP_SECONDS = 0.0005
"""How long :func:`stepwise` works before it lets the event loop run."""

THREAD_STEP_SECONDS = 0.0002
"""How long :func:`beside_loop` holds the GIL before it lets the event loop's thread take it."""

THREAD_PAUSE = 0.00005
"""How long :func:`beside_loop` sleeps between pieces: long enough for a thread waiting for
the GIL to take it (a release followed at once by a new acquire usually wins the race)."""


def finish(steps: Steps[T]) -> T:
    """Run ``steps`` to the end at once; their result."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]


async def stepwise(steps: Steps[T], seconds: float = STEP_SECONDS, pause: float = 0.0) -> T:
    """Run ``steps`` in the running event loop: after every ``seconds`` of work, let it run
    other callbacks for ``pause`` seconds (at least one round); their result."""
    timed = _timed(steps, seconds)
    while True:
        try:
            next(timed)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        await asyncio.sleep(pause)


def beside_loop(
    steps: Steps[T], seconds: float = THREAD_STEP_SECONDS, pause: float = THREAD_PAUSE
) -> T:
    """Run ``steps`` on the calling thread (a worker beside the event loop): after every
    ``seconds`` of work, sleep ``pause`` so the loop's thread, if it waits for the GIL, takes
    it. A request arriving meanwhile waits for one piece, not for the whole computation (a
    thread that never sleeps keeps the GIL for the interpreter's switch interval, 5 ms)."""
    return finish(_timed(steps, seconds, lambda: time.sleep(pause)))


def _timed(steps: Steps[T], seconds: float, between: Callable[[], None] | None = None) -> Steps[T]:
    """``steps`` yielding only once ``seconds`` of work have passed since the last yield, and
    calling ``between`` there (outside the measured work) when given."""
    ends = time.perf_counter() + seconds
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        if time.perf_counter() > ends:
            yield
            if between is not None:
                between()
            ends = time.perf_counter() + seconds
