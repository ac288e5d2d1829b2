"""``nri-plrm state`` from the state directory includes the decisions still in the journal, and
reads a damaged journal without moving it."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from nri_plrm.checkpoint.journal import JOURNAL_FILE
from nri_plrm.checkpoint.store import CheckpointStore
from nri_plrm.cli.state import StateError, from_checkpoint
from nri_plrm.config.file import parse_config
from nri_plrm.engine.facade import Engine
from nri_plrm.ledger import NodeLedger
from nri_plrm.plugin.handlers import Plugin
from nri_plrm.topology.machines import MACHINES
from nri_plrm.translate.manifest_to_pod import load_manifests
from nri_plrm.translate.pod_to_cri import creation_order, nri_container, nri_pod_sandbox

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "pod-scope-mixed.yaml"
CONFIG = parse_config('[topology_manager]\npolicy = "single-numa-node"\nscope = "pod"\n')


def place_seed_pod(state: Path) -> Plugin:
    """A plugin that admitted pod-scope-mixed after its start-up checkpoint (journal only)."""
    plugin = Plugin(
        NodeLedger(
            Engine(MACHINES["default"], CONFIG.engine_config()), store=CheckpointStore(state)
        )
    )
    plugin.ledger.open()
    (spec,) = load_manifests([EXAMPLE])

    async def create() -> None:
        sandbox = nri_pod_sandbox(spec)
        await plugin.run_pod_sandbox(sandbox)
        for ctr in creation_order(spec):
            await plugin.create_container(sandbox, nri_container(spec, ctr))

    asyncio.run(create())
    assert (
        plugin.ledger.persistence.journal is not None
        and plugin.ledger.persistence.journal.count > 0
    )
    return plugin


def test_state_shows_decisions_not_yet_compacted(tmp_path: Path) -> None:
    plugin = place_seed_pod(tmp_path)
    shown = from_checkpoint(str(tmp_path), MACHINES["default"], CONFIG)
    (pod,) = shown["pods"]
    assert pod["name"] == "pod-scope-mixed"
    assert len(pod["cpu_ids"]) == 4
    cpus = {c["name"]: c["cpus"] for c in pod["containers"]}
    live = {name: str(a.cpus) for (uid, name), a in plugin.ledger.engine.assignments().items()}
    assert cpus == live


def test_damaged_journal_is_reported_and_left_in_place(tmp_path: Path) -> None:
    place_seed_pod(tmp_path)
    journal = tmp_path / JOURNAL_FILE
    journal.write_bytes(journal.read_bytes() + b"deadbeef {}\ntrailing\n")
    with pytest.raises(StateError, match="checksum mismatch"):
        from_checkpoint(str(tmp_path), MACHINES["default"], CONFIG)
    assert journal.exists()
    assert not list(tmp_path.glob(f"{JOURNAL_FILE}.corrupt-*"))
