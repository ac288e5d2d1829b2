"""Suite-wide: the real-containerd tests kept in one xdist worker, and one line for each recorded
input or kit that is absent (the recorded containerd NRI traffic, the recorded kernel uevents,
the containerd kit) and whose tests were skipped."""

from __future__ import annotations

import pytest
from containerd_kit import kit_unavailable
from nrisim.capture import capture_available, missing_capture_reason
from uevent_recordings import missing_shared_reason, shared_dir


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Put every real-containerd test in one xdist group (``--dist loadgroup``): one worker runs
    them one after the other, so one private containerd runs at a time."""
    for item in items:
        if item.get_closest_marker("containerd") is not None:
            item.add_marker(pytest.mark.xdist_group("containerd"))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Say once per missing input why its tests were skipped (pytest -q lists only a count)."""
    for line in skip_summary(terminalreporter.stats.get("skipped", [])):
        terminalreporter.write_line(line)


def skip_summary(skipped: list[pytest.TestReport]) -> list[str]:
    """The lines naming each absent input whose tests are among ``skipped``: the NRI capture
    (``NRI_CAPTURE_DIR``), the uevent recording (``UEVENT_CAPTURE_DIR``), the containerd kit
    (``CONTAINERD_KIT``)."""
    lines = []
    if not capture_available() and skipped:
        lines.append(f"replay tests skipped: {missing_capture_reason()}")
    uevents_missing = missing_shared_reason()
    if shared_dir() is None and any(uevents_missing in _reason(r) for r in skipped):
        lines.append(f"uevent replay tests skipped: {uevents_missing}")
    kit_missing = kit_unavailable()
    if kit_missing is not None and any("containerd" in getattr(r, "keywords", {}) for r in skipped):
        lines.append(f"containerd tests skipped: {kit_missing}")
    return lines


def _reason(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    return longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
