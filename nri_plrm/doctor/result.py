"""The outcome of one doctor check, and how outcomes add up to an exit code."""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass


class Status(enum.IntEnum):
    """A check's verdict; the value is the exit code it contributes (the worst one wins)."""

    OK = 0
    WARN = 1
    FAIL = 2

    @property
    def label(self) -> str:
        """``OK``, ``WARN`` or ``FAIL``."""
        return self.name


@dataclass(frozen=True)
class Check:
    """One check: where (``area``), what (``name``), the verdict, what was found, the fix.

    ``fix`` is empty for OK results and names the file, key or command to change otherwise.
    """

    area: str
    name: str
    status: Status
    message: str
    fix: str = ""

    def to_json(self) -> dict[str, str]:
        """The check as the ``--output json`` record."""
        return {
            "area": self.area,
            "name": self.name,
            "status": self.status.label,
            "message": self.message,
            "fix": self.fix,
        }


def ok(area: str, name: str, message: str) -> Check:
    """An OK result."""
    return Check(area, name, Status.OK, message)


def warn(area: str, name: str, message: str, fix: str) -> Check:
    """A WARN result with its fix."""
    return Check(area, name, Status.WARN, message, fix)


def fail(area: str, name: str, message: str, fix: str) -> Check:
    """A FAIL result with its fix."""
    return Check(area, name, Status.FAIL, message, fix)


def worst(checks: Iterable[Check]) -> Status:
    """The worst status among ``checks`` (OK when there are none)."""
    return max((c.status for c in checks), default=Status.OK)
