"""Work in steps: a generator that yields between pieces of a long computation and returns its
result, so one body of code can run at once (:func:`finish`) or inside the event loop between
requests (:func:`stepwise`), never holding the loop for more than a short step."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Generator
from typing import TypeVar

T = TypeVar("T")

Steps = Generator[None, None, T]
"""A computation of a ``T`` that yields between its pieces."""

STEP_SECONDS = 0.0005
"""How long :func:`stepwise` works before it lets the event loop run."""


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
    ends = time.perf_counter() + seconds
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        if time.perf_counter() > ends:
            await asyncio.sleep(pause)
            ends = time.perf_counter() + seconds
