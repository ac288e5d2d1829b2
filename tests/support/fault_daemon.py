"""The real daemon entry point (``nri_plrm.daemon.service.main``) in a forked child, for fault
tests.

Children fork from a forkserver that imported the package once, so a (re)start costs a fork,
topology discovery, checkpoint restore and the NRI handshake rather than an interpreter start.
``kill()`` is a real SIGKILL; ``limit_file_size()`` sets the child's ``RLIMIT_FSIZE`` from
outside (``prlimit``), so its next write past that size fails with ``EFBIG`` like a full disk.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
import resource
import sys
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

from fakesysfs import write_sysfs

from nri_plrm.checkpoint.store import CheckpointStore
from nri_plrm.config.file import parse_config
from nri_plrm.daemon import service as daemon
from nri_plrm.engine.facade import Engine
from nri_plrm.topology.machines import MACHINES

MACHINE = "default"
"""64 CPUs, 4 NUMA nodes."""


def config_text(tmp: Path, extra: str = "") -> str:
    """Daemon configuration with every path under ``tmp`` (no metrics, no PodResources)."""
    return f"""
[nri]
socket = "{tmp}/nri.sock"
[state]
dir = "{tmp}/state"
kubelet_cpu_manager_state = "{tmp}/kubelet/cpu_manager_state"
[pod_resources]
enabled = false
[metrics]
address = ""
[log]
level = "warning"
[topology]
sysfs_root = "{tmp}/sys"
cgroup_root = "{tmp}/cgroup"
[topology_manager]
policy = "single-numa-node"
scope = "pod"
{extra}
"""


def prepare(tmp: Path, extra: str = "") -> Path:
    """Write the fake sysfs tree and the configuration file; returns the file's path."""
    write_sysfs(MACHINES[MACHINE], str(tmp / "sys"))
    path = tmp / "config.toml"
    path.write_text(config_text(tmp, extra))
    return path


def checkpointed_engine(tmp: Path) -> Engine:
    """The engine as the plugin's durable state (checkpoint + journal) describes it."""
    from nri_plrm.ledger import NodeLedger
    from nri_plrm.plugin.handlers import Plugin

    cfg = parse_config(config_text(tmp))
    plugin = Plugin(
        NodeLedger(
            Engine(MACHINES[MACHINE], cfg.engine_config()), store=CheckpointStore(tmp / "state")
        )
    )
    problem = plugin.ledger.load()
    assert problem is None, f"durable state unusable: {problem}"
    return plugin.ledger.engine


def serve(config: str, log: str) -> None:
    """The child: stdout and stderr appended to ``log``, then the daemon's entry point."""
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    sys.exit(daemon.main(["--config", config]))


def serve_holding_folds(config: str, log: str, gates: str, where: str) -> None:
    """:func:`serve` with the background compaction (a fold) held where a death is to strike.
    The fold's writer thread creates ``<gates>/entered`` and waits while ``<gates>/hold``
    exists, before it replaces ``state.json`` (the requests go on meanwhile). With
    ``where="adopt"`` the event loop is then held for good (until the kill) once that write is
    done, before the journal is replaced, and ``<gates>/adopting`` is created."""
    import threading
    import time

    from nri_plrm.ledger.persistence import Persistence

    write, adopt = Persistence._write, Persistence._adopt
    written = threading.Event()

    def held_write(self: Persistence, body: bytes, generation: int) -> bool:
        if threading.current_thread() is threading.main_thread():
            return write(self, body, generation)
        Path(gates, "entered").touch()
        while Path(gates, "hold").exists():
            time.sleep(0.01)
        done = write(self, body, generation)
        written.set()
        return done

    def held_adopt(self: Persistence, *args: Any) -> None:
        if where == "adopt" and written.is_set():
            Path(gates, "adopting").touch()
            while True:
                time.sleep(1)
        adopt(self, *args)

    Persistence._write = held_write  # type: ignore[method-assign]
    Persistence._adopt = held_adopt  # type: ignore[method-assign]
    serve(config, log)


class ForkedDaemon:
    """``nri_plrm.daemon.service.main --config FILE`` in a process forked from a preloaded
    forkserver;
    its output goes to ``daemon.log`` beside the configuration file."""

    def __init__(self, config: Path) -> None:
        self.ctx = multiprocessing.get_context("forkserver")
        self.ctx.set_forkserver_preload(
            ["nri_plrm.daemon.service", "nri_plrm.plugin.handlers", "fault_daemon"]
        )
        self.config = config
        self.log = config.parent / "daemon.log"
        self.proc: BaseProcess | None = None

    def log_tail(self, lines: int = 40) -> str:
        """The end of the daemon's output, for failure messages."""
        if not self.log.exists():
            return "(no daemon output)"
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    async def wait_new_session(self, sim: Any, old: object, timeout: float = 30.0) -> None:
        """Wait until ``sim`` has a session other than ``old``; fail with the daemon's output
        when the daemon died or never connected."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while sim.session is old:
            proc = self.proc
            if proc is not None and not proc.is_alive():
                raise AssertionError(
                    f"daemon exited with {proc.exitcode} before connecting:\n{self.log_tail()}"
                )
            if loop.time() > deadline:
                raise AssertionError(f"daemon not connected after {timeout} s:\n{self.log_tail()}")
            await asyncio.sleep(0.005)

    @property
    def pid(self) -> int:
        assert self.proc is not None and self.proc.pid is not None
        return self.proc.pid

    def start(self, *, hold_folds: tuple[Path, str] | None = None) -> None:
        """Start a new daemon; the previous one must be dead (killed, terminated).
        ``hold_folds``: (gates directory, where), see :func:`serve_holding_folds`."""
        assert self.proc is None or not self.proc.is_alive(), "previous daemon still running"
        args: tuple[str, ...] = (str(self.config), str(self.log))
        if hold_folds is None:
            self.proc = self.ctx.Process(target=serve, args=args)
        else:
            gates, where = hold_folds
            args += (str(gates), where)
            self.proc = self.ctx.Process(target=serve_holding_folds, args=args)
        self.proc.start()

    def limit_file_size(self, size: int | None) -> None:
        """Writes past ``size`` bytes fail with EFBIG (None: no limit again)."""
        soft = resource.RLIM_INFINITY if size is None else size
        resource.prlimit(self.pid, resource.RLIMIT_FSIZE, (soft, resource.RLIM_INFINITY))

    async def kill(self, proc: BaseProcess | None = None) -> None:
        """SIGKILL (no clean-up of any kind) and reap ``proc``, by default the current daemon.
        A kill that runs later than it was decided (a task) must name its process: by then
        ``start()`` may have replaced the current one."""
        proc = self.proc if proc is None else proc
        if proc is None:
            return
        with contextlib.suppress(ProcessLookupError, ValueError):
            proc.kill()
        while proc.is_alive():
            await asyncio.sleep(0.002)
        proc.join()

    async def terminate(self) -> int | None:
        """SIGTERM; returns the exit code."""
        proc = self.proc
        assert proc is not None
        proc.terminate()
        while proc.is_alive():
            await asyncio.sleep(0.01)
        return proc.exitcode
