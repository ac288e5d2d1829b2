"""Run a ``Plugin`` behind the real wire stub against ``nrisim`` over a unix socket."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from pathlib import Path

from nrisim import NRISimulator
from plrm_runtime import FakeRuntime

from nri_plrm.checkpoint.store import CheckpointStore
from nri_plrm.config.file import parse_config
from nri_plrm.engine.facade import Engine
from nri_plrm.ledger import NodeLedger
from nri_plrm.nri.stub import Stub
from nri_plrm.plugin.handlers import Plugin
from nri_plrm.proto import nri_api_pb2 as api
from nri_plrm.topology.machines import MACHINES

POD_SCOPE = '[topology_manager]\npolicy = "single-numa-node"\nscope = "pod"\n'


def stored_plugin(state: Path, config: str = POD_SCOPE) -> Plugin:
    """A plugin on the default machine, its checkpoint and journal in ``state`` (opened)."""
    engine = Engine(MACHINES["default"], parse_config(config).engine_config())
    plugin = Plugin(NodeLedger(engine, store=CheckpointStore(state)))
    plugin.ledger.open()
    return plugin


@dataclass
class Session:
    sim: NRISimulator
    runtime: FakeRuntime
    stub: Stub
    task: asyncio.Task[None]


@contextlib.asynccontextmanager
async def serve(
    plugin: Plugin,
    socket_path: str,
    *,
    pods: Iterable[api.PodSandbox] = (),
    containers: Iterable[api.Container] = (),
    runtime: FakeRuntime | None = None,
    clean_stop: bool = True,
    **sim_kwargs: object,
) -> AsyncIterator[Session]:
    """Start the simulator, connect the plugin's stub, wait for Synchronize, yield, tear down.

    ``clean_stop`` ends like the daemon on SIGTERM (the journal folded into a checkpoint);
    False leaves the state as a crash would (checkpoint plus journal), and nothing of this
    plugin writes to the state directory afterwards (a fold it started does not finish over
    the files a restarted plugin uses).
    """
    sim = await NRISimulator.start(
        socket_path,
        pods=pods,
        containers=containers,
        **sim_kwargs,  # type: ignore[arg-type]
    )
    stub = Stub(plugin, name="nri-plrm", index="50", socket_path=socket_path, backoff_initial=0.05)
    plugin.attach(stub.update_containers, nri_version=lambda: stub.runtime_nri_version)
    task = asyncio.get_running_loop().create_task(stub.run())
    try:
        await sim.wait_registered()
        if runtime is None:
            runtime = FakeRuntime(sim)
        else:
            runtime.sim = sim
        sync = sim.session.sync_reply if sim.session is not None else None
        if sync is not None:
            runtime.sync_updates = len(sync.update)
            runtime.apply_updates(sync.update)
        runtime.flushed = plugin.flusher.idle
        yield Session(sim, runtime, stub, task)
    finally:
        if runtime is not None:
            runtime.flushed = None
        await stub.stop()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(task, 5)
        await sim.close()
        if clean_stop:
            plugin.ledger.close()
        else:
            plugin.ledger.persistence.halt()
