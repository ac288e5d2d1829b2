"""Suite-wide reporting: one line when the recorded containerd traffic is absent."""

from __future__ import annotations

import pytest
from nrisim.capture import capture_available, missing_capture_reason


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Say once why the replay tests were skipped (pytest -q lists only a count)."""
    if not capture_available() and terminalreporter.stats.get("skipped"):
        terminalreporter.write_line(f"replay tests skipped: {missing_capture_reason()}")
