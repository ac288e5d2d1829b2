"""The daemon and the CLI as operators run them: separate interpreters (``python -m``).

``daemon_on_simulator`` starts ``nrisim`` and ``python -m nri_plrm.daemon.service --config FILE``
with
its output appended to a log file, yields once the plugin registered, and kills the daemon if a
test left it running. ``stop_cleanly`` is the SIGTERM stop a test asserts on.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Mapping
from pathlib import Path

from nrisim import NRISimulator


def config_text(
    tmp: Path,
    *,
    kubelet_state: str = "",
    state_keys: str = "",
    level: str | None = None,
    log_format: str = "json",
    extra: str = "",
) -> str:
    """A daemon configuration with every path under ``tmp``, no PodResources and no metrics.

    ``state_keys`` are more ``[state]`` lines; ``extra`` more tables at the end. The log level
    is left to the default unless ``level`` is given."""
    level_line = f'level = "{level}"\n' if level is not None else ""
    return f"""
[nri]
socket = "{tmp}/nri.sock"
[state]
dir = "{tmp}/state"
{state_keys}kubelet_cpu_manager_state = "{kubelet_state}"
[pod_resources]
enabled = false
[metrics]
address = ""
[log]
{level_line}format = "{log_format}"
[topology]
sysfs_root = "{tmp}/sys"
{extra}"""


def run_cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """``python -m nri_plrm.cli ARGS`` with no stdin; text output captured."""
    return subprocess.run(
        [sys.executable, "-m", "nri_plrm.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def start_daemon(
    cfg: Path, log: Path, env: Mapping[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """``python -m nri_plrm.daemon.service --config CFG``, stdout and stderr appended to ``log``.

    Without ``env`` the daemon gets this process's environment minus ``NOTIFY_SOCKET``."""
    if env is None:
        env = {k: v for k, v in os.environ.items() if k != "NOTIFY_SOCKET"}
    with open(log, "ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "nri_plrm.daemon.service", "--config", str(cfg)],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            env=dict(env),
        )


async def stop_cleanly(proc: subprocess.Popen[bytes], timeout: float = 20) -> int:
    """Send SIGTERM and return the daemon's exit code."""
    proc.send_signal(signal.SIGTERM)
    return await asyncio.get_running_loop().run_in_executor(None, proc.wait, timeout)


@contextlib.asynccontextmanager
async def daemon_on_simulator(
    cfg: Path, log: Path, nri_socket: Path, env: Mapping[str, str] | None = None
) -> AsyncIterator[tuple[NRISimulator, subprocess.Popen[bytes]]]:
    """nrisim on ``nri_socket`` and the daemon on ``cfg``; yields both once registered."""
    sim = await NRISimulator.start(str(nri_socket))
    proc = start_daemon(cfg, log, env)
    try:
        await sim.wait_registered(timeout=30)
        yield sim, proc
    finally:
        if proc.poll() is None:
            proc.kill()
        await sim.close()


async def wait_logged(log: Path, text: str, timeout: float = 20) -> str:
    """Wait until ``text`` is in ``log``; returns the log's content then."""
    deadline = time.monotonic() + timeout
    while text not in (content := log.read_text()):
        assert time.monotonic() < deadline, f"{text!r} not logged; log:\n{content[-5000:]}"
        await asyncio.sleep(0.05)
    return content


def log_records(log: Path) -> list[dict[str, object]]:
    """The JSON log lines of ``log``, decoded."""
    return [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
