"""Suite-wide reporting: one line when the recorded containerd traffic or the containerd kit
is absent."""

from __future__ import annotations

import pytest
from containerd_kit import kit_unavailable
from nrisim.capture import capture_available, missing_capture_reason


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Say once why the replay tests or the real-containerd tests were skipped (pytest -q
    lists only a count)."""
    if not capture_available() and terminalreporter.stats.get("skipped"):
        terminalreporter.write_line(f"replay tests skipped: {missing_capture_reason()}")
    skipped = terminalreporter.stats.get("skipped", [])
    kit_missing = kit_unavailable()
    if kit_missing is not None and any("containerd" in getattr(r, "keywords", {}) for r in skipped):
        terminalreporter.write_line(f"containerd tests skipped: {kit_missing}")
