"""Liveness: heartbeat age, the oldest in-flight request against the budget, registration."""

from __future__ import annotations

import asyncio
import socket
from dataclasses import dataclass
from pathlib import Path

from nri_plrm.daemon.liveness import LOOP_STALL_AFTER, Liveness
from nri_plrm.daemon.sdnotify import Notifier


@dataclass
class Requests:
    request_timeout: float = 2.0
    oldest: tuple[str, float] | None = None

    def oldest_request(self) -> tuple[str, float] | None:
        return self.oldest


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def registered() -> tuple[bool, str]:
    return True, "ok"


def test_heartbeat_age_decides_the_loop() -> None:
    clock = Clock()
    live = Liveness(Requests(), registered, clock=clock)
    clock.now += LOOP_STALL_AFTER
    assert live.health() == (True, "ok")
    clock.now += 0.2
    assert live.health() == (False, "event loop stuck: no heartbeat for 1.2 s")
    live.beat()
    assert live.alive() == (True, "ok")


def test_oldest_request_against_the_runtime_budget() -> None:
    clock = Clock()
    requests = Requests(request_timeout=2.0, oldest=("CreateContainer", clock.now))
    live = Liveness(requests, registered, clock=clock)
    clock.now += 2.0
    live.beat()
    assert live.alive() == (True, "ok")
    clock.now += 0.5
    live.beat()
    assert live.alive() == (
        False,
        "NRI CreateContainer in flight for 2.5 s, over the runtime's 2 s request timeout",
    )
    requests.request_timeout = 5.0  # the runtime's value from Configure
    assert live.alive() == (True, "ok")


def test_registration_only_gates_health() -> None:
    live = Liveness(Requests(), lambda: (False, "not connected to the runtime's NRI socket"))
    assert live.alive() == (True, "ok")
    assert live.health() == (False, "not connected to the runtime's NRI socket")


def test_run_beats_and_feeds_the_watchdog_only_while_alive(tmp_path: Path) -> None:
    path = str(tmp_path / "notify.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(path)
        sock.setblocking(False)
        requests = Requests(request_timeout=0.05)
        live = Liveness(requests, registered, interval=0.01)

        def drain() -> int:
            count = 0
            while True:
                try:
                    assert sock.recv(64) == b"WATCHDOG=1\n"
                except BlockingIOError:
                    return count
                count += 1

        async def main() -> tuple[int, int]:
            task = asyncio.create_task(live.run(Notifier(path, watchdog_usec=40_000)))
            loop = asyncio.get_running_loop()
            fed, deadline = 0, loop.time() + 10
            while fed < 3 and loop.time() < deadline:  # however slowly the machine runs it
                await asyncio.sleep(0.01)
                fed += drain()
            requests.oldest = ("Synchronize", live.clock() - 1.0)
            await asyncio.sleep(0.05)
            drain()
            await asyncio.sleep(0.2)
            starved = drain()
            task.cancel()
            return fed, starved

        fed, starved = asyncio.run(main())
        assert fed >= 3
        assert starved == 0
        assert live.clock() - live.heartbeat < 1.0
