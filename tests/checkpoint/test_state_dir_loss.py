"""The state directory deleted or replaced under a running plugin (issue 12, finding 3): the
loss is noticed before the next acknowledgement, the directory recreated (mode 0700) and a full
checkpoint written, so a restart finds every acknowledged decision."""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import stat
from pathlib import Path

import pytest
from cpu_pods import container
from plrm_harness import serve

from nri_plrm.checkpoint.dirguard import StateDirGuard
from nri_plrm.checkpoint.store import CheckpointStore
from nri_plrm.config.file import parse_config
from nri_plrm.engine.facade import Engine
from nri_plrm.engine.spec import PodSpec
from nri_plrm.ledger import NodeLedger
from nri_plrm.observability.metrics import Metrics
from nri_plrm.plugin.handlers import Plugin
from nri_plrm.topology.machines import MACHINES


def new_plugin(state: Path, metrics: Metrics | None = None) -> Plugin:
    engine = Engine(MACHINES["default"], parse_config("").engine_config())
    ledger = NodeLedger(engine, store=CheckpointStore(state), observer=metrics)
    ledger.open()
    return Plugin(ledger, metrics=metrics)


def pod(uid: str) -> PodSpec:
    return PodSpec(uid=uid, name=uid, containers=(container("app", "2"), container("aux", "1")))


def remove_dir(state: Path) -> None:
    shutil.rmtree(state)


def replace_dir(state: Path) -> None:
    state.rename(state.with_name("state.old"))
    state.mkdir(mode=0o700)


@pytest.mark.parametrize("loss", [remove_dir, replace_dir], ids=["deleted", "replaced"])
def test_next_decision_rewrites_the_lost_state_directory(
    tmp_path: Path, loss: object, caplog: pytest.LogCaptureFixture
) -> None:
    state = tmp_path / "state"

    async def main() -> None:
        metrics = Metrics()
        plugin = new_plugin(state, metrics)
        async with serve(plugin, str(tmp_path / "nri.sock"), clean_stop=False) as s:
            await s.runtime.launch(pod("before"))
            loss(state)  # type: ignore[operator]
            with caplog.at_level(logging.ERROR, logger="nri_plrm.plugin"):
                await s.runtime.launch(pod("after"))
            decided = plugin.ledger.engine.assignments()
        assert stat.S_IMODE(os.stat(state).st_mode) == 0o700
        assert (state / "state.json").exists() and (state / "journal.jsonl").exists()
        lost = metrics.registry.get_sample_value("nri_plrm_state_directory_lost_total")
        assert lost == 1.0
        assert sum("recreating it" in r.getMessage() for r in caplog.records) == 1
        # no clean stop (SIGKILL): a restart from the directory has every decision
        again = new_plugin(state)
        assert again.ledger.engine.assignments() == decided
        assert {v.uid for v in again.ledger.pods()} == {"before", "after"}

    asyncio.run(main())


def test_guard_reports_an_unlinked_journal_and_a_replaced_directory(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    guard = StateDirGuard(state)
    guard.remember()
    fd = os.open(state / "journal.jsonl", os.O_CREAT | os.O_WRONLY, 0o600)
    try:
        assert guard.lost(fd) is None
        os.unlink(state / "journal.jsonl")
        assert "journal" in (guard.lost(fd) or "")
    finally:
        os.close(fd)
    assert guard.lost(None) is None
    state.rename(tmp_path / "aside")  # the old inode stays alive, so the new one differs
    assert "deleted" in (guard.lost(None) or "")
    state.mkdir()
    assert "replaced" in (guard.lost(None) or "")
