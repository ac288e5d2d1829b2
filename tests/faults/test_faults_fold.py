"""A SIGKILL in the middle of a compaction running beside the requests (a fold): before it
replaces ``state.json``, and after that but before it replaces the journal. Decisions
acknowledged while it ran (they went into the old journal) survive both, in the real daemon.

The fold is held at that point in the daemon process itself (``serve_holding_folds``); the
kill is a real SIGKILL, the restart reads what the dead process left in the page cache.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path

import pytest
from fault_daemon import ForkedDaemon, checkpointed_engine, prepare
from inprocess_pods import pod_level
from nrisim import NRISimulator
from plrm_invariants import check, exclusive_cpus
from plrm_runtime import FakeRuntime

from nri_plrm.checkpoint.journal import DecisionJournal


async def wait_for(path: Path, daemon: ForkedDaemon, timeout: float = 30.0) -> None:
    for _ in range(int(timeout / 0.01)):
        if path.exists():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"the fold was not held at {path}:\n{daemon.log_tail()}")


@pytest.mark.parametrize("where", ["write", "adopt"])
def test_sigkill_during_a_fold_loses_no_acknowledged_decision(tmp_path: Path, where: str) -> None:
    daemon = ForkedDaemon(prepare(tmp_path))
    gates = tmp_path / "gates"
    gates.mkdir()
    (gates / "hold").touch()
    state = tmp_path / "state"

    async def main() -> None:
        sim = await NRISimulator.start(str(tmp_path / "nri.sock"))
        rt = FakeRuntime(sim)
        daemon.start(hold_folds=(gates, where))
        try:
            await sim.wait_registered(timeout=60)
            for i in range(3):
                await rt.launch(pod_level(f"before-{i}"))
            await rt.settle()
            # the plugin is idle now: it starts a fold, held where the death strikes
            await wait_for(gates / "entered", daemon)
            generation = DecisionJournal(state).read(quarantine=False)[0]
            during = [await rt.launch(pod_level(f"during-{i}")) for i in range(2)]
            await rt.settle()
            pinned = exclusive_cpus(rt)
            if where == "adopt":  # the fold writes state.json; the loop stops before the journal
                (gates / "hold").unlink()
                await wait_for(gates / "adopting", daemon)
            stored = json.loads((state / "state.json").read_bytes())["data"]
            assert DecisionJournal(state).read(quarantine=False)[0] == generation
            if where == "adopt":
                assert stored["journal"]["generation"] == generation
            else:
                assert "journal" not in stored
            await daemon.kill()

            uids = {p.uid for p in rt.pods.values()}
            assert {p.uid for p in during} <= uids
            problems = check(checkpointed_engine(tmp_path), rt, uids, pinned)
            assert problems == [], "\n".join(problems)

            with contextlib.suppress(FileNotFoundError):
                (gates / "hold").unlink()
            sim.pods, sim.containers = rt.sync_lists()
            old = sim.session
            daemon.start()
            await daemon.wait_new_session(sim, old)
            session = await sim.wait_registered(timeout=60)
            assert session.sync_reply is not None
            assert list(session.sync_reply.update) == []  # nothing to move: nothing was lost
            await rt.launch(pod_level("after"))
            await rt.settle()
            uids = {p.uid for p in rt.pods.values()}
            problems = check(checkpointed_engine(tmp_path), rt, uids, pinned)
            assert problems == [], "\n".join(problems)
            assert await daemon.terminate() == 0
        finally:
            with contextlib.suppress(Exception):
                await daemon.kill()
            await sim.close()

    asyncio.run(main())
