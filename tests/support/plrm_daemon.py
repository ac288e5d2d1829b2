"""Run the real daemon (``nri_plrm.daemon.service.run``) in-process against ``nrisim`` on a fake
sysfs.

Everything the operator surface serves is real: the NRI connection over a unix socket, the
PodResources gRPC socket and the metrics HTTP port. The daemon stops on SIGTERM, as in
production (asyncio's signal handler turns it into a clean stop).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fakesysfs import write_sysfs
from nrisim import NRISimulator
from plrm_runtime import FakeRuntime

from nri_plrm.config.file import parse_config
from nri_plrm.config.settings import Config
from nri_plrm.daemon import service as daemon
from nri_plrm.topology.machines import load_topology
from nri_plrm.topology.synthetic import DEFAULT_SPEC


def free_port() -> int:
    """A TCP port that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Running:
    config: Config
    sim: NRISimulator
    runtime: FakeRuntime
    podresources_socket: str
    metrics_url: str


def daemon_config(tmp: Path, policy_toml: str, port: int) -> Config:
    """A config with every path under ``tmp`` and the given manager tables appended."""
    text = f"""
[nri]
socket = "{tmp}/nri.sock"
[state]
dir = "{tmp}/state"
kubelet_cpu_manager_state = "{tmp}/kubelet/cpu_manager_state"
[pod_resources]
socket = "{tmp}/run/pod-resources.sock"
[metrics]
address = "127.0.0.1:{port}"
[topology]
sysfs_root = "{tmp}/sys"
cgroup_root = "{tmp}/cgroup"
{policy_toml}
"""
    return parse_config(text, str(tmp / "config.toml"))


@contextlib.asynccontextmanager
async def running_daemon(
    tmp: Path, policy_toml: str = "", **sim_options: Any
) -> AsyncIterator[Running]:
    """Start nrisim (with ``sim_options``) and the daemon; yield once the plugin registered;
    stop with SIGTERM. The root logger, which the daemon configures, is restored after."""
    root = logging.getLogger()
    root_level, root_handlers = root.level, root.handlers[:]
    write_sysfs(load_topology(DEFAULT_SPEC), str(tmp / "sys"))
    port = free_port()
    config = daemon_config(tmp, policy_toml, port)
    sim = await NRISimulator.start(config.nri.socket, **sim_options)
    ready = asyncio.Event()
    task = asyncio.get_running_loop().create_task(daemon.run(config, on_ready=ready.set))
    try:
        await asyncio.wait_for(ready.wait(), 20)
        yield Running(
            config,
            sim,
            FakeRuntime(sim),
            config.pod_resources.socket,
            f"http://127.0.0.1:{port}",
        )
    finally:
        if not task.done():
            os.kill(os.getpid(), signal.SIGTERM)
        code = await asyncio.wait_for(task, 20)
        await sim.close()
        root.setLevel(root_level)
        root.handlers[:] = root_handlers
        assert code == 0, f"daemon exited with {code}"
