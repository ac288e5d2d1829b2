"""The kubelet-format export beside the requests: the files a timer-started export writes equal
the ones written at once for the same state, changes made while it runs are exported after
it, and the state it encodes is a copy later decisions do not reach."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from inprocess_pods import pod_level, start
from kubelet_decode import decode_cpu_manager_state

from nri_plrm.checkpoint.kubelet import (
    CPU_MANAGER_STATE_FILE,
    MEMORY_MANAGER_STATE_FILE,
    CPUManagerState,
    MemoryManagerState,
    kubelet_files_steps,
)
from nri_plrm.checkpoint.store import CheckpointStore
from nri_plrm.config.file import parse_config
from nri_plrm.engine.facade import Engine
from nri_plrm.engine.spec import PodSpec
from nri_plrm.ledger import NodeLedger
from nri_plrm.ledger import persistence as persistence_module
from nri_plrm.ledger.persistence import _kubelet_states
from nri_plrm.plugin.handlers import Plugin
from nri_plrm.topology.machines import MACHINES
from nri_plrm.translate.pod_to_cri import nri_pod_sandbox
from nri_plrm.util.steps import finish

CONFIG = '[topology_manager]\npolicy = "single-numa-node"\nscope = "pod"\n'
GI = 1 << 30


def new_plugin(tmp: Path) -> Plugin:
    engine = Engine(MACHINES["default"], parse_config(CONFIG).engine_config())
    store = CheckpointStore(tmp / "state")
    return Plugin(NodeLedger(engine, store=store, kubelet_state_path=str(tmp / "kubelet")))


def pod(n: int) -> PodSpec:
    return pod_level(f"export-{n}")


def expected(plugin: Plugin) -> dict[str, bytes]:
    return finish(kubelet_files_steps(*_kubelet_states(plugin.ledger.engine)))


def on_disk(tmp: Path) -> dict[str, bytes]:
    return {
        name: (tmp / "kubelet" / name).read_bytes()
        for name in (CPU_MANAGER_STATE_FILE, MEMORY_MANAGER_STATE_FILE)
    }


async def settled(plugin: Plugin) -> None:
    """Until no export is armed or running."""
    persistence = plugin.ledger.persistence
    for _ in range(500):
        await asyncio.sleep(0.01)
        if not persistence.export_pending:
            return
    raise AssertionError("the export did not finish")


def test_an_export_beside_the_requests_writes_what_one_at_once_would(tmp_path: Path) -> None:
    plugin = new_plugin(tmp_path)
    plugin.ledger.open()

    async def life() -> None:
        for n in range(4):
            await start(plugin, pod(n))
        await settled(plugin)
        assert on_disk(tmp_path) == expected(plugin)
        cpu = decode_cpu_manager_state(on_disk(tmp_path)[CPU_MANAGER_STATE_FILE]).state
        assert cpu.default_cpuset == plugin.ledger.engine.node_shared_pool()

    asyncio.run(life())
    plugin.ledger.close()


def test_changes_during_an_export_are_exported_after_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plugin = new_plugin(tmp_path)
    plugin.ledger.open()
    taken: list[tuple[object, ...]] = []

    def states(engine: Engine) -> tuple[CPUManagerState, MemoryManagerState]:
        got = _kubelet_states(engine)
        taken.append(got)
        return got

    monkeypatch.setattr(persistence_module, "_kubelet_states", states)

    async def life() -> None:
        await start(plugin, pod(0))
        while not taken:  # the export has taken the state of the first pod
            await asyncio.sleep(0.001)
        for n in range(1, 4):  # and is still encoding or writing it
            await start(plugin, pod(n))
        await settled(plugin)
        assert len(taken) == 2
        assert on_disk(tmp_path) == expected(plugin)
        cpu = decode_cpu_manager_state(on_disk(tmp_path)[CPU_MANAGER_STATE_FILE]).state
        assert {f"export-{n}" for n in range(4)} <= set(cpu.pod_entries)

    asyncio.run(life())
    plugin.ledger.close()


def test_the_exported_state_is_a_copy(tmp_path: Path) -> None:
    plugin = new_plugin(tmp_path)
    plugin.ledger.open()

    async def life() -> None:
        for n in range(3):
            await start(plugin, pod(n))
        states = _kubelet_states(plugin.ledger.engine)
        files = finish(kubelet_files_steps(*states))
        await start(plugin, pod(3))
        plugin.remove_pod_sandbox(nri_pod_sandbox(pod(0)))
        assert finish(kubelet_files_steps(*states)) == files
        assert expected(plugin) != files

    asyncio.run(life())
    plugin.ledger.close()
