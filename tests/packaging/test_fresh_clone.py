"""The suite runs from the repository alone: replay tests skip with one line naming
``NRI_CAPTURE_DIR`` when the recorded containerd traffic is absent, the real-containerd tests
with one line naming the kit when it is absent."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MODULES = ["tests/nri/test_nri_capture.py", "tests/translate/test_pod_to_cri.py"]


def _pytest(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """The suite's pytest (in 2 xdist workers, as the README's command runs it: the skip lines
    come from the controller) on ``args`` with ``env`` added to the environment."""
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rN", "-n", "2", *args],
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT), **env),
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_missing_capture_skips_replay_tests_with_one_line(tmp_path: Path) -> None:
    missing = str(tmp_path / "no-such-capture")
    proc = _pytest({"NRI_CAPTURE_DIR": missing}, *MODULES, "-k", "not fuzz")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "error" not in proc.stdout.lower()
    lines = [line for line in proc.stdout.splitlines() if "NRI_CAPTURE_DIR" in line]
    assert lines == [
        f"replay tests skipped: recorded containerd NRI traffic not found at {missing}: "
        "set NRI_CAPTURE_DIR to the nri-capture directory to run the replay tests"
    ]


def test_translation_tests_without_recordings_still_run(tmp_path: Path) -> None:
    proc = _pytest(
        {"NRI_CAPTURE_DIR": str(tmp_path)},
        "tests/translate/test_pod_to_cri.py",
        "-k",
        "formulas or page_sizes",
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "NRI_CAPTURE_DIR" not in proc.stdout  # nothing was skipped


def test_missing_containerd_kit_skips_its_tests_with_one_line(tmp_path: Path) -> None:
    """Without the containerd kit beside the clone the real-containerd tests skip, and pytest
    ends with one line naming the kit's place and how to point at it."""
    missing = tmp_path / "no-such-kit"
    proc = _pytest({"CONTAINERD_KIT": str(missing)}, "-m", "containerd")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = [line for line in proc.stdout.splitlines() if "containerd tests skipped" in line]
    assert lines == [
        f"containerd tests skipped: no containerd kit at {missing} (set CONTAINERD_KIT to the "
        "kit's folder)"
    ]
    assert " passed" not in proc.stdout


def test_missing_uevent_recording_skips_its_replay_test_with_one_line(tmp_path: Path) -> None:
    """Without the shared uevent recording the uevent replay test skips, and pytest ends with
    one line naming where it was looked for and ``UEVENT_CAPTURE_DIR``."""
    missing = tmp_path / "no-such-uevents"
    proc = _pytest({"UEVENT_CAPTURE_DIR": str(missing)}, "tests/topology/test_hotplug_uevent.py")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert " skipped" in proc.stdout
    lines = [line for line in proc.stdout.splitlines() if "UEVENT_CAPTURE_DIR" in line]
    assert lines == [
        f"uevent replay tests skipped: recorded kernel uevents not found at {missing}: set "
        "UEVENT_CAPTURE_DIR to the uevents directory to run the uevent replay tests"
    ]
