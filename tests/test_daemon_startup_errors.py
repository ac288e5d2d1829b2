"""``nri-plrm run`` refusing to start says what and where in one line (no traceback), and
foreground log lines carry timestamps unless systemd's journal stamps them."""

from __future__ import annotations

import io
import logging
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from fakesysfs import write_sysfs

from nri_plrm.observability import log_output
from nri_plrm.topology.machines import load_topology

REPO = Path(__file__).resolve().parents[1]
TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3} [A-Z]+ nri_plrm")


def _run(tmp_path: Path, extra: str) -> subprocess.CompletedProcess[str]:
    write_sysfs(load_topology("sockets=1,cores_per_numa=2"), str(tmp_path / "sys"))
    cfg = tmp_path / "config.toml"
    cfg.write_text(
        f'[state]\ndir = "{tmp_path}/state"\nkubelet_cpu_manager_state = ""\n'
        f'[pod_resources]\nenabled = false\n[topology]\nsysfs_root = "{tmp_path}/sys"\n' + extra
    )
    env = {k: v for k, v in os.environ.items() if k != "JOURNAL_STREAM"}
    return subprocess.run(
        [sys.executable, "-m", "nri_plrm.cli", "run", "--config", str(cfg)],
        env=dict(env, PYTHONPATH=str(REPO)),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_no_socket_without_reconnect_is_one_clear_line(tmp_path: Path) -> None:
    sock = tmp_path / "nri.sock"
    proc = _run(tmp_path, f'[nri]\nsocket = "{sock}"\nreconnect = false\n[metrics]\naddress = ""\n')
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if " ERROR " in line]
    assert len(errors) == 1, proc.stderr
    assert errors[0].endswith(
        f"not starting: cannot connect to the NRI socket {sock}: No such file or directory; "
        "is NRI enabled in containerd and is [nri] socket its path? ([nri] reconnect = false: "
        "the plugin does not wait for the socket)"
    )
    assert all(TIMESTAMP.match(line) for line in proc.stderr.splitlines()), proc.stderr


def test_metrics_address_in_use_names_the_address_and_key(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        proc = _run(tmp_path, f'[metrics]\naddress = "{address}"\n')
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    assert (
        f"not starting: [metrics] address {address}: cannot listen: Address already in use "
        "(another process holds it, maybe another nri-plrm; change [metrics] address or stop it)"
    ) in proc.stderr


def _format_of_setup(monkeypatch: pytest.MonkeyPatch, stream: io.TextIOBase) -> str:
    monkeypatch.setattr(sys, "stderr", stream)
    root = logging.getLogger()
    saved = list(root.handlers), root.level
    try:
        log_output.setup_logging("info", "text")
        assert log_output._output is not None and root.handlers == [log_output._output]
        formatter = log_output._output.formatter
        assert formatter is not None
        return formatter.format(
            logging.LogRecord("nri_plrm.x", logging.INFO, "", 0, "hi", (), None)
        )
    finally:
        log_output.close_logging()
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])


def test_foreground_text_logs_have_timestamps_journal_ones_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with open(tmp_path / "stderr", "w") as stream:
        monkeypatch.delenv("JOURNAL_STREAM", raising=False)
        assert TIMESTAMP.match(_format_of_setup(monkeypatch, stream))
        st = os.fstat(stream.fileno())
        monkeypatch.setenv("JOURNAL_STREAM", f"{st.st_dev}:{st.st_ino}")
        assert _format_of_setup(monkeypatch, stream) == "INFO nri_plrm.x: hi"
        monkeypatch.setenv("JOURNAL_STREAM", f"{st.st_dev}:{st.st_ino + 1}")  # another stream
        assert TIMESTAMP.match(_format_of_setup(monkeypatch, stream))
