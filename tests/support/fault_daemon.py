"""The real daemon entry point (``nri_plrm.daemon.main``) in a forked child, for fault tests.

Children fork from a forkserver that imported the package once, so a (re)start costs a fork,
topology discovery, checkpoint restore and the NRI handshake rather than an interpreter start.
``kill()`` is a real SIGKILL; ``limit_file_size()`` sets the child's ``RLIMIT_FSIZE`` from
outside (``prlimit``), so its next write past that size fails with ``EFBIG`` like a full disk.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import resource
from multiprocessing.process import BaseProcess
from pathlib import Path

from nri_plrm import daemon
from nri_plrm.checkpoint.store import CheckpointStore
from nri_plrm.config import parse_config
from nri_plrm.engine.engine import Engine
from nri_plrm.topology.fakesysfs import write_sysfs
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
    from nri_plrm.plugin import Plugin

    cfg = parse_config(config_text(tmp))
    plugin = Plugin(
        Engine(MACHINES[MACHINE], cfg.engine_config()), store=CheckpointStore(tmp / "state")
    )
    problem = plugin.load()
    assert problem is None, f"durable state unusable: {problem}"
    return plugin.engine


class ForkedDaemon:
    """``nri_plrm.daemon.main --config FILE`` in a process forked from a preloaded forkserver."""

    def __init__(self, config: Path) -> None:
        self.ctx = multiprocessing.get_context("forkserver")
        self.ctx.set_forkserver_preload(["nri_plrm.daemon", "nri_plrm.plugin"])
        self.config = config
        self.proc: BaseProcess | None = None

    @property
    def pid(self) -> int:
        assert self.proc is not None and self.proc.pid is not None
        return self.proc.pid

    def start(self) -> None:
        self.proc = self.ctx.Process(target=daemon.main, args=(["--config", str(self.config)],))
        self.proc.start()

    def limit_file_size(self, size: int | None) -> None:
        """Writes past ``size`` bytes fail with EFBIG (None: no limit again)."""
        soft = resource.RLIM_INFINITY if size is None else size
        resource.prlimit(self.pid, resource.RLIMIT_FSIZE, (soft, resource.RLIM_INFINITY))

    async def kill(self) -> None:
        """SIGKILL (no clean-up of any kind) and reap."""
        proc = self.proc
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
