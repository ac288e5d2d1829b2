"""The runtime simulator's cost model: containerd's node-wide NRI lock and the cost of each
update applied under it (``NRISimulator(update_cost=...)``), against the real plugin stub."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from typing import TypeVar

import pytest
from nrisim import NRISimulator

from nri_plrm.nri.stub import Stub
from nri_plrm.proto import nri_api_pb2 as api

T = TypeVar("T")

COST = 0.03
POD = api.PodSandbox(id="pod-1", name="pod", namespace="default", uid="uid-1")


def container(cid: str) -> api.Container:
    return api.Container(id=cid, pod_sandbox_id=POD.id, name=cid)


def update(cid: str, cpus: str) -> api.ContainerUpdate:
    u = api.ContainerUpdate(container_id=cid)
    u.linux.resources.cpu.cpus = cpus
    return u


class Plugin:
    """CreateContainer answered with an exclusive CPU and ``others`` updates of other
    containers; the other events subscribed and answered at once."""

    def __init__(self, others: int) -> None:
        self.others = others

    def create_container(
        self, pod: api.PodSandbox, ctr: api.Container
    ) -> tuple[api.ContainerAdjustment, list[api.ContainerUpdate]]:
        adj = api.ContainerAdjustment()
        adj.linux.resources.cpu.cpus = "1"
        return adj, [update(f"be-{i}", "2-7") for i in range(self.others)]

    def start_container(self, pod: api.PodSandbox, ctr: api.Container) -> None:
        return None


@pytest.fixture
def sock_path() -> Iterator[str]:
    d = tempfile.mkdtemp(prefix="nri")  # short path: AF_UNIX paths are limited to 108 bytes
    yield os.path.join(d, "nri.sock")
    shutil.rmtree(d, ignore_errors=True)


def run(coro_fn: Callable[[], Awaitable[T]]) -> T:
    async def main() -> T:
        return await asyncio.wait_for(coro_fn(), 10.0)

    return asyncio.run(main())


@asynccontextmanager
async def connected(
    path: str, plugin: Plugin, update_cost: float | None
) -> AsyncIterator[tuple[NRISimulator, Stub]]:
    sim = await NRISimulator.start(path, update_cost=update_cost)
    stub = Stub(plugin, name="cost", index="10", socket_path=path, reconnect=False)
    task = asyncio.create_task(stub.run())
    try:
        await sim.wait_registered()
        yield sim, stub
    finally:
        await stub.stop()
        task.cancel()
        await sim.close()


def test_a_reply_with_n_updates_costs_n_times_the_update_cost(sock_path: str) -> None:
    async def scenario() -> None:
        async with connected(sock_path, Plugin(others=5), COST) as (sim, _):
            began = time.perf_counter()
            resp = await sim.create_container(POD, container("main"))
            ended = time.perf_counter()
            assert resp is not None and len(resp.update) == 5
            rec = sim.records[-1]
            assert rec.method == "CreateContainer"
            assert rec.apply_seconds >= 5 * COST
            assert rec.runtime_seconds >= 5 * COST
            assert ended - began >= 5 * COST
            # every update applied (and the new container created) before the event returned,
            # in order, the i-th no sooner than i+1 costs after the reply (the runtime keeps to
            # that schedule: one update woken late lets the next catch up, so only these lower
            # bounds hold on a loaded machine, not the gap between two updates)
            times = [sim.applied[f"be-{i}"].at for i in range(5)]
            assert times == sorted(times)
            for i, at in enumerate(times):
                assert at >= rec.replied_at + (i + 1) * COST * 0.9
            assert {sim.applied[f"be-{i}"].cpus for i in range(5)} == {"2-7"}
            assert sim.applied["main"].cpus == "1"
            assert times[-1] <= sim.applied["main"].at <= ended
            assert sim.updates_applied == 5

    run(scenario)


def test_an_event_waits_for_an_update_containers_in_flight(sock_path: str) -> None:
    async def scenario() -> None:
        async with connected(sock_path, Plugin(others=0), COST) as (sim, stub):
            sent = time.perf_counter()
            batch = asyncio.create_task(
                stub.update_containers([update(f"be-{i}", "0-3") for i in range(4)])
            )
            while not sim.unsolicited:  # the request reached the runtime: its updates run
                await asyncio.sleep(0.001)
            assert sim.node_lock.locked()
            await sim.start_container(POD, container("main"))
            rec = sim.records[-1]
            assert rec.method == "StartContainer"
            last = max(a.at for a in sim.applied.values())
            assert rec.lock_wait >= 2 * COST  # the batch holds the lock for about 4 * COST
            assert rec.replied_at - rec.seconds >= last  # sent only once the batch was applied
            # the UpdateContainers reply left only after its four updates were applied
            assert await batch == []
            assert time.perf_counter() - sent >= 4 * COST

    run(scenario)


def test_an_update_containers_waits_for_an_event_applying_its_reply(sock_path: str) -> None:
    async def scenario() -> None:
        async with connected(sock_path, Plugin(others=4), COST) as (sim, stub):
            create = asyncio.create_task(sim.create_container(POD, container("main")))
            while not sim.records or sim.records[-1].replied_at == 0:
                await asyncio.sleep(0.001)
            # the plugin answered (nothing in flight for it): the runtime applies the reply's
            # four updates under the lock while the plugin sends an UpdateContainers
            asked = time.perf_counter()
            assert await stub.update_containers([update("be-9", "0")]) == []
            await create
            assert sim.applied["be-9"].at >= max(sim.applied[f"be-{i}"].at for i in range(4))
            assert sim.applied["be-9"].at - asked >= 2 * COST

    run(scenario)


def test_without_the_model_no_lock_and_no_cost(sock_path: str) -> None:
    async def scenario() -> None:
        async with connected(sock_path, Plugin(others=200), None) as (sim, _):
            began = time.perf_counter()
            await sim.create_container(POD, container("main"))
            rec = sim.records[-1]
            assert time.perf_counter() - began < 200 * COST / 4
            assert rec.lock_wait == 0 and not sim.node_lock.locked()
            assert sim.updates_applied == 200 and sim.applied["be-0"].cpus == "2-7"
            await sim.remove_container(POD, container("be-0"))
            assert "be-0" not in sim.applied

    run(scenario)
