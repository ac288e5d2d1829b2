"""Running a ``steps`` computation to its end while counting its pieces (tests of code that
yields between pieces so a thread beside the event loop can pause there)."""

from __future__ import annotations

from typing import TypeVar

from nri_plrm.util.steps import Steps

T = TypeVar("T")


def run_counted(steps: Steps[T]) -> tuple[T, int]:
    """``steps`` run to the end: their result and how many times they yielded."""
    pieces = 0
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value, pieces
        pieces += 1
