"""``nri_plrm.steps``: one body of work run at once or between the event loop's other work."""

from __future__ import annotations

import asyncio

from nri_plrm.steps import Steps, finish, stepwise


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
