"""``nri_plrm.util.steps``: one body of work run at once or between the event loop's other work."""

from __future__ import annotations

import asyncio
import sys
import threading
import time

import pytest

from nri_plrm.util import steps
from nri_plrm.util.steps import Steps, beside_loop, finish, stepwise


def counted(n: int, log: list[str]) -> Steps[int]:
    total = 0
    for i in range(n):
        total += i
        log.append("step")
        yield
    return total


def test_finish_runs_every_step_and_returns_the_result() -> None:
    log: list[str] = []
    assert finish(counted(5, log)) == 10
    assert log == ["step"] * 5


def test_stepwise_lets_the_loop_run_other_work_in_between() -> None:
    log: list[str] = []

    async def other() -> None:
        for _ in range(3):
            log.append("other")
            await asyncio.sleep(0)

    async def main() -> int:
        task = asyncio.get_running_loop().create_task(other())
        result = await stepwise(counted(20, log), seconds=0.0)  # hand back after every step
        await task
        return result

    assert asyncio.run(main()) == sum(range(20))
    first_step = log.index("step")
    assert "other" in log[first_step : log.index("step", first_step) + 3]
    assert log.count("step") == 20 and log.count("other") == 3


def test_stepwise_with_time_to_spare_runs_in_one_go() -> None:
    log: list[str] = []

    async def other() -> None:
        log.append("other")

    async def main() -> int:
        task = asyncio.get_running_loop().create_task(other())
        result = await stepwise(counted(50, log), seconds=60.0)
        await task
        return result

    assert asyncio.run(main()) == sum(range(50))
    assert log == ["step"] * 50 + ["other"]


def test_beside_loop_sleeps_between_pieces_once_its_time_is_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pauses: list[float] = []
    monkeypatch.setattr(steps.time, "sleep", pauses.append)
    log: list[str] = []
    assert beside_loop(counted(6, log), seconds=0.0, pause=0.001) == sum(range(6))
    assert log == ["step"] * 6 and pauses == [0.001] * 6
    pauses.clear()
    assert beside_loop(counted(6, log), seconds=60.0) == sum(range(6))
    assert pauses == []


def test_beside_loop_lets_another_thread_run_between_pieces() -> None:
    # CPython hands the GIL to a waiting thread when its holder blocks or after the switch
    # interval: with the interval longer than the test, the main thread can run while the
    # worker computes only because beside_loop sleeps between pieces. The pieces go on until
    # the main thread has run (or a generous deadline passes), so no scheduling delay of the
    # machine can make the main thread miss its chance.
    deadline = time.monotonic() + 20.0
    first_piece_done = threading.Event()
    main_ran = threading.Event()
    log: list[str] = []
    result: list[bool] = []

    def until_main_ran() -> Steps[bool]:
        log.append("step")
        first_piece_done.set()
        yield
        while not main_ran.is_set() and time.monotonic() < deadline:
            log.append("step")
            yield
        log.append("step")
        return main_ran.is_set()

    switch_interval = sys.getswitchinterval()
    sys.setswitchinterval(60.0)
    try:
        worker = threading.Thread(
            target=lambda: result.append(beside_loop(until_main_ran(), seconds=0.0, pause=0.002))
        )
        worker.start()
        assert first_piece_done.wait(30.0)
        log.append("other")
        main_ran.set()
        worker.join(30.0)
    finally:
        sys.setswitchinterval(switch_interval)
    assert result == [True], "the main thread ran only after the worker's last piece"
    assert log[0] == "step" and log[-1] == "step" and log.count("other") == 1
