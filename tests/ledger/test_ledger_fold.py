"""Folding the journal beside the requests (``Persistence``'s timer path): decisions made while
the new checkpoint is being written are kept at every moment a death can strike, a full
checkpoint written meanwhile wins, and a Synchronize batch is never folded half-way.

"Dies here" is checked by loading a second ledger from the files as they are at that moment:
every write is in the page cache, which is what a SIGKILL leaves behind.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from inprocess_pods import pod_level, start

from nri_plrm.checkpoint.journal import DecisionJournal
from nri_plrm.checkpoint.store import CheckpointError, CheckpointStore, canonical_json
from nri_plrm.config.file import parse_config
from nri_plrm.engine.facade import Engine
from nri_plrm.engine.spec import ContainerSpec, PodSpec
from nri_plrm.ledger import NodeLedger
from nri_plrm.ledger.persistence import FOLDED, IDLE_COMPACT_MIN
from nri_plrm.plugin.handlers import Plugin
from nri_plrm.topology.machines import MACHINES
from nri_plrm.translate.pod_to_cri import creation_order, nri_container, nri_pod_sandbox

CONFIG = '[topology_manager]\npolicy = "single-numa-node"\nscope = "pod"\n'
GI = 1 << 30


def new_plugin(state: Path) -> Plugin:
    engine = Engine(MACHINES["default"], parse_config(CONFIG).engine_config())
    return Plugin(NodeLedger(engine, store=CheckpointStore(state)))


def guaranteed(n: int) -> PodSpec:
    one = {"cpu": 1000, "memory": GI}
    return PodSpec(
        uid=f"fold-{n}",
        name=f"fold-{n}",
        containers=(ContainerSpec("main", requests=one, limits=one),),
    )


def on_disk(state: Path) -> dict[str, Any]:
    """The state a plugin started now would restore."""
    reader = new_plugin(state)
    assert reader.ledger.load() is None
    assert reader.ledger.engine.verify() == []
    return live(reader)


def live(plugin: Plugin) -> dict[str, Any]:
    """The plugin's state, without the checkpoint generation it continues."""
    return plugin.ledger.snapshot(0)


def journal_generation(state: Path) -> int | None:
    return DecisionJournal(state).read(quarantine=False)[0]


class Gate:
    """Holds the checkpoint writer thread at ``Persistence._write`` until opened; ``done`` is
    set once the write returned."""

    def __init__(self, plugin: Plugin, monkeypatch: pytest.MonkeyPatch) -> None:
        self.entered = threading.Event()
        self.open = threading.Event()
        self.done = threading.Event()
        persistence = plugin.ledger.persistence
        write: Callable[[bytes, int], bool] = persistence._write

        def held(body: bytes, generation: int) -> bool:
            if threading.current_thread() is threading.main_thread():
                return write(body, generation)
            self.entered.set()
            assert self.open.wait(10)
            try:
                return write(body, generation)
            finally:
                self.done.set()

        monkeypatch.setattr(persistence, "_write", held)


def held_fold(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Plugin, Gate]:
    """An opened plugin whose folds' writer waits at a :class:`Gate`."""
    plugin = new_plugin(tmp_path)
    plugin.ledger.open()
    return plugin, Gate(plugin, monkeypatch)


async def wait_for(event: threading.Event) -> None:
    for _ in range(1000):
        if event.is_set():
            return
        await asyncio.sleep(0.005)
    raise AssertionError("the checkpoint writer did not get there")


def test_decisions_during_a_fold_survive_a_death_at_every_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plugin, gate = held_fold(tmp_path, monkeypatch)
    persistence = plugin.ledger.persistence

    async def life() -> None:
        for n in range(4):
            await start(plugin, guaranteed(n))
        before = persistence.generation
        folded = len(persistence.records)
        assert persistence.start_fold() is not None
        await wait_for(gate.entered)
        # the state is taken; the writer thread is held before it writes
        for n in range(4, 7):
            await start(plugin, guaranteed(n))
        made = len(persistence.records) - folded
        assert made >= 3
        assert on_disk(tmp_path) == live(plugin)
        # the writer replaces state.json; the loop is held, so the journal is not replaced yet
        gate.open.set()
        assert gate.done.wait(10)
        assert journal_generation(tmp_path) == before
        stored = CheckpointStore(tmp_path).read_only()
        assert stored is not None
        assert stored[1][FOLDED] == {"generation": before, "records": folded}
        assert on_disk(tmp_path) == live(plugin)
        # the fold ends: a journal of the new generation holds the decisions made meanwhile
        await asyncio.sleep(0.05)
        assert persistence.generation == before + 1
        assert journal_generation(tmp_path) == before + 1
        assert persistence.journal is not None and persistence.journal.count == made
        assert len(persistence.records) == made
        assert on_disk(tmp_path) == live(plugin)
        # and decisions go on into it
        await start(plugin, guaranteed(7))
        assert on_disk(tmp_path) == live(plugin)

    asyncio.run(life())
    plugin.ledger.close()
    assert on_disk(tmp_path) == live(plugin)


def test_a_full_checkpoint_written_during_a_fold_wins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plugin, gate = held_fold(tmp_path, monkeypatch)
    persistence = plugin.ledger.persistence

    async def life() -> None:
        await start(plugin, guaranteed(0))
        assert persistence.start_fold() is not None
        await wait_for(gate.entered)
        await start(plugin, guaranteed(1))
        plugin.ledger.compact()  # e.g. the state directory was replaced: written at once
        newest = persistence.generation
        gate.open.set()
        await wait_for(gate.done)
        await asyncio.sleep(0.05)
        # the fold's older state was not written over the newer one, nor its journal adopted
        assert persistence.generation == newest
        stored = CheckpointStore(tmp_path).read_only()
        assert stored is not None and stored[1]["plugin"]["generation"] == newest
        assert FOLDED not in stored[1]
        assert journal_generation(tmp_path) == newest
        assert on_disk(tmp_path) == live(plugin)

    asyncio.run(life())


def test_no_fold_starts_inside_a_batch(tmp_path: Path) -> None:
    plugin = new_plugin(tmp_path)
    plugin.ledger.open()
    persistence = plugin.ledger.persistence

    async def life() -> None:
        with plugin.ledger.batch():
            await start(plugin, guaranteed(0))
            assert persistence.start_fold() is None
        assert on_disk(tmp_path) == live(plugin)

    asyncio.run(life())


def test_a_folded_checkpoint_replays_only_the_records_it_does_not_hold(tmp_path: Path) -> None:
    """The death between state.json and the journal, written by hand: the checkpoint of
    generation 2 holds the first record of generation 1's journal, which has two."""
    plugin = new_plugin(tmp_path)
    plugin.ledger.open()
    gen = plugin.ledger.persistence.generation

    async def life() -> None:
        await start(plugin, guaranteed(0))
        folded = len(plugin.ledger.persistence.records)
        data = plugin.ledger.snapshot(gen + 1)
        data[FOLDED] = {"generation": gen, "records": folded}
        await start(plugin, guaranteed(1))
        CheckpointStore(tmp_path).save(data)

    asyncio.run(life())
    assert journal_generation(tmp_path) == gen
    assert on_disk(tmp_path) == live(plugin)


@pytest.mark.parametrize(
    "folded",
    [{"generation": 0, "records": "1"}, {"generation": 0, "records": True}, [0, 1], None],
)
def test_a_journal_the_checkpoint_does_not_name_is_ignored(tmp_path: Path, folded: Any) -> None:
    plugin = new_plugin(tmp_path)
    plugin.ledger.open()
    gen = plugin.ledger.persistence.generation

    async def life() -> None:
        await start(plugin, guaranteed(0))

    asyncio.run(life())
    data = plugin.ledger.snapshot(gen + 1)
    if folded is not None:
        data[FOLDED] = folded
    CheckpointStore(tmp_path).save(data)
    reader = new_plugin(tmp_path)
    reader.ledger.load()
    assert reader.ledger.persistence.records == []


def test_a_state_with_a_non_string_key_is_refused_by_name(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match=r"data\.pods\.x: key 3 is int"):
        CheckpointStore(tmp_path).encode({"pods": {"x": {3: "y"}}})


def test_a_snapshot_shares_nothing_the_decisions_after_it_change(tmp_path: Path) -> None:
    """A fold encodes the state some steps after taking it: later decisions must not reach
    into it."""
    plugin = new_plugin(tmp_path)
    plugin.ledger.open()

    async def life() -> None:
        specs = [guaranteed(n) if n % 2 else pod_level(f"fold-pl-{n}") for n in range(6)]
        for spec in specs[:4]:
            await start(plugin, spec)
        taken = plugin.ledger.snapshot(0)
        encoded = canonical_json(taken)
        for spec in specs[4:]:
            await start(plugin, spec)
        for spec in specs[:3]:
            sandbox = nri_pod_sandbox(spec)
            for one in creation_order(spec):
                ctr = nri_container(spec, one)
                plugin.stop_container(sandbox, ctr)
                plugin.remove_container(sandbox, ctr)
            plugin.remove_pod_sandbox(sandbox)
        assert canonical_json(live(plugin)) != encoded
        assert canonical_json(taken) == encoded

    asyncio.run(life())


def test_the_idle_fold_waits_for_a_pause_and_keeps_one_timer(tmp_path: Path) -> None:
    plugin = new_plugin(tmp_path)
    plugin.ledger.open()
    persistence = plugin.ledger.persistence
    first = persistence.generation

    async def life() -> None:
        await start(plugin, guaranteed(0))
        armed = [persistence._compact_handle]  # kept alive: their ids stay distinct
        decisions = len(persistence.records)
        for n in range(1, 8):  # a burst: each decision well within the idle delay of the last
            await asyncio.sleep(IDLE_COMPACT_MIN / 4)
            await start(plugin, guaranteed(n))
            armed.append(persistence._compact_handle)
        # the timer is armed again when it fires during the burst, not at every decision
        assert len(persistence.records) - decisions >= 14 and len({id(h) for h in armed}) <= 4
        assert persistence.generation == first
        for _ in range(200):
            await asyncio.sleep(0.01)
            if persistence.generation > first and persistence._fold is None:
                break
        assert persistence.generation == first + 1
        assert persistence.records == []
        assert on_disk(tmp_path) == live(plugin)

    asyncio.run(life())
