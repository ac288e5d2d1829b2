"""The in-process harness on a slow machine: ``FakeRuntime.settle`` waits for the updates the
plugin queued however late they come, and a plugin ``serve`` leaves as a crash would writes
nothing afterwards (both made tests fail beside CPU hogs, issue 31)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from plrm_harness import serve, stored_plugin

from nri_plrm.checkpoint.store import STATE_FILE
from nri_plrm.engine.spec import ContainerSpec, PodSpec

GI = 1 << 30
SLOW = 0.5
"""Seconds the machine does not run the plugin: longer than ``settle``'s quiet time."""


def besteffort(n: int) -> PodSpec:
    return PodSpec(uid=f"be-{n}", name=f"be-{n}", containers=(ContainerSpec("c"),))


def guaranteed() -> PodSpec:
    res = {"cpu": 4000, "memory": 2 * GI}
    return PodSpec(uid="g", name="g", containers=(ContainerSpec("app", requests=res, limits=res),))


def test_settle_waits_for_updates_sent_after_its_quiet_time(tmp_path: Path) -> None:
    """The plugin sends the best-effort containers their shrunk pool only after ``SLOW``
    seconds; settle still sees them."""
    plugin = stored_plugin(tmp_path / "state")

    async def main() -> None:
        async with serve(plugin, str(tmp_path / "nri.sock")) as s:
            send = plugin.flusher.sender
            assert send is not None

            async def late(updates: list[Any]) -> Any:
                await asyncio.sleep(SLOW)
                return await send(updates)

            plugin.flusher.sender = late
            rt = s.runtime
            others = [await rt.launch(besteffort(n)) for n in range(3)]
            await rt.launch(guaranteed())
            await rt.settle()
            pool = plugin.ledger.engine.node_shared_pool()
            assert [rt.cpus_of(p, "c") for p in others] == [pool] * 3
            assert len(s.sim.unsolicited) == 1

    asyncio.run(main())


def test_a_crashed_plugins_fold_does_not_finish_after_serve(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fold whose checkpoint write is under way when ``serve`` ends without a clean stop
    either landed before ``serve`` returned or never lands: a file damaged afterwards (as
    the restart tests damage it) stays damaged for the next plugin to find."""
    state = tmp_path / "state"
    plugin = stored_plugin(state)
    persistence = plugin.ledger.persistence
    write: Callable[[bytes, int], bool] = persistence._write
    entered, finished = threading.Event(), threading.Event()

    def slow_write(body: bytes, generation: int) -> bool:
        if threading.current_thread() is threading.main_thread():
            return write(body, generation)
        entered.set()
        threading.Event().wait(SLOW)  # the worker thread is not run for a while
        try:
            return write(body, generation)
        finally:
            finished.set()

    monkeypatch.setattr(persistence, "_write", slow_write)

    async def wait(event: threading.Event) -> None:
        while not event.is_set():
            await asyncio.sleep(0.005)

    async def main() -> None:
        async with serve(plugin, str(tmp_path / "nri.sock"), clean_stop=False) as s:
            await s.runtime.launch(guaranteed())
            fold = persistence.start_fold()
            assert fold is not None
            await wait(entered)
        damaged = (state / STATE_FILE).read_bytes()[:-40] + b"garbage"
        (state / STATE_FILE).write_bytes(damaged)
        await wait(finished)
        await asyncio.gather(fold, return_exceptions=True)
        assert (state / STATE_FILE).read_bytes() == damaged

    asyncio.run(main())
