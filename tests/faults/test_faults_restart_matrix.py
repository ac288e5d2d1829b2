"""The restart matrix of issue 12: every way the plugin can go away and come back, crossed with
what the runtime did meanwhile, on the real daemon (``fault_daemon``) and the runtime simulator.

Faults: SIGKILL while a request is in flight, clean stop (SIGTERM), checkpoint deleted (state
and journal), checkpoint corrupt, state directory deleted while running (then SIGKILL), only
the journal left. Changes while the plugin is down: none, a pod started, a pod removed, a pod
started that no longer fits. After each restart: no valid exclusive allocation moved, every
running container on the cpuset the plugin decided (none on every CPU), no CPU in two exclusive
sets, no state for pods that are gone, the node shared pool equal to a fresh computation, and
every update of the Synchronize reply logged with its old and new cpuset.

One daemon, simulator and runtime serve the whole module (a cell costs a restart, not a start
from scratch); each cell starts from an empty node and leaves one.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import stat
import threading
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
from cpu_pods import container, pod_level
from fault_daemon import ForkedDaemon, checkpointed_engine, prepare
from nrisim import NRISimulator
from plrm_invariants import check, exclusive_cpus
from plrm_runtime import FakeRuntime

from nri_plrm.base.cpuset import CPUSet
from nri_plrm.engine.spec import PodSpec
from nri_plrm.proto import nri_api_pb2 as api
from nri_plrm.topology.machines import MACHINES

T = TypeVar("T")
ALL = MACHINES["default"].all_cpus

FAULTS = ("sigkill", "clean-stop", "checkpoint-deleted", "checkpoint-corrupt", "dir-deleted")
FAULTS += ("journal-only",)
CHANGES = ("nothing", "pod-started", "pod-removed", "pod-no-longer-fits")


def single(uid: str, cpus: int) -> PodSpec:
    """One Guaranteed container: a budget of ``cpus`` with one container on its pool."""
    return PodSpec(uid=uid, name=uid, containers=(container("app", str(cpus)),))


def baseline(cell: str) -> list[PodSpec]:
    """Every pod shape: pod-level with a slice and a shared container, two slices, one shared
    container, BestEffort; then three fillers so no NUMA node has more than 5 free CPUs."""
    budget = pod_level(
        f"{cell}-pl", "4", apps=(container("main", "2", memory="1G"), container("side"))
    )
    two = PodSpec(
        uid=f"{cell}-2s",
        name=f"{cell}-2s",
        containers=(container("app", "2"), container("aux", "1")),
    )
    best_effort = PodSpec(uid=f"{cell}-be", name=f"{cell}-be", containers=(container("c"),))
    fillers = [single(f"{cell}-f{i}", 12) for i in range(3)]
    return [budget, two, single(f"{cell}-one", 3), best_effort, *fillers]


@dataclass
class Node:
    tmp: Path
    loop: asyncio.AbstractEventLoop
    sim: NRISimulator
    rt: FakeRuntime
    daemon: ForkedDaemon

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 60) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    @property
    def state(self) -> Path:
        return self.tmp / "state"

    def log_size(self) -> int:
        return self.daemon.log.stat().st_size if self.daemon.log.exists() else 0

    def log_since(self, offset: int) -> list[str]:
        with open(self.daemon.log, "rb") as f:
            f.seek(offset)
            return f.read().decode(errors="replace").splitlines()

    async def logged_since(self, offset: int, text: str, timeout: float = 10) -> list[str]:
        """The log lines after ``offset`` once one contains ``text`` (a thread writes them)."""
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            lines = self.log_since(offset)
            if any(text in line for line in lines):
                return lines
            assert asyncio.get_running_loop().time() < deadline, f"{text!r} not logged"
            await asyncio.sleep(0.02)

    async def restart(self) -> api.SynchronizeResponse:
        """Start the daemon again with what the runtime has; apply the Synchronize reply."""
        self.sim.pods, self.sim.containers = self.rt.sync_lists()
        old = self.sim.session
        self.daemon.start()
        await self.daemon.wait_new_session(self.sim, old)
        session = await self.sim.wait_registered(timeout=30)
        assert session.sync_reply is not None
        self.rt.apply_updates(session.sync_reply.update)
        await self.rt.settle(timeout=2.0)
        return session.sync_reply

    async def clear(self) -> None:
        """Remove every pod with the plugin running (started again if a failed cell left it
        dead), so the next cell starts from an empty node."""
        proc = self.daemon.proc
        if proc is None or not proc.is_alive():
            await self.restart()
        for pod in list(self.rt.pods.values()):
            await self.rt.remove_pod(pod)
        await self.rt.settle()


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    tmp = tmp_path_factory.mktemp("matrix")
    config = prepare(tmp)
    config.write_text(config.read_text().replace('level = "warning"', 'level = "info"'))
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    def run(coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, loop).result(60)

    sim = run(NRISimulator.start(str(tmp / "nri.sock")))
    daemon = ForkedDaemon(config)
    daemon.start()
    run(sim.wait_registered(timeout=60))
    n = Node(tmp, loop, sim, run(_runtime(sim)), daemon)
    try:
        yield n
        assert run(daemon.terminate()) == 0
    finally:
        with contextlib.suppress(Exception):
            run(daemon.kill())
        run(sim.close())
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)


async def _runtime(sim: NRISimulator) -> FakeRuntime:
    return FakeRuntime(sim)


def running_cpus(rt: FakeRuntime) -> dict[str, CPUSet]:
    """Container id -> applied cpuset of every container that has not exited."""
    return {
        cid: CPUSet.parse(rc.applied.cpus) if rc.applied.cpus else CPUSet()
        for cid, rc in rt.containers.items()
        if rc.msg.state != api.CONTAINER_STOPPED
    }


async def in_flight_kill(n: Node, cell: str) -> None:
    """SIGKILL while a pod is being started (its requests fail; containerd carries on)."""
    launch = asyncio.ensure_future(n.rt.launch(single(f"{cell}-inflight", 1)))
    sent = len(n.sim.records)
    deadline = asyncio.get_running_loop().time() + 5
    while len(n.sim.records) == sent and not launch.done():
        if asyncio.get_running_loop().time() > deadline:
            break
        await asyncio.sleep(0)
    await n.daemon.kill()
    await launch


async def remove_tree(path: Path) -> None:
    """``rm -rf`` as an operator would, again when the daemon wrote into the directory while it
    was being emptied (a fold's worker thread writes its file beside the requests)."""
    for _ in range(100):
        try:
            shutil.rmtree(path)
            return
        except OSError:
            await asyncio.sleep(0.01)
    shutil.rmtree(path)


async def apply_fault(n: Node, fault: str, cell: str) -> dict[str, CPUSet]:
    """Take the plugin away as ``fault`` says; returns the exclusive cpusets to keep."""
    if fault == "dir-deleted":
        await remove_tree(n.state)
        await n.rt.launch(single(f"{cell}-after-rm", 1))  # acknowledged after the loss
        await n.rt.settle()
    before = exclusive_cpus(n.rt)
    if fault == "sigkill":
        await in_flight_kill(n, cell)
    elif fault == "clean-stop":
        assert await n.daemon.terminate() == 0
    else:
        await n.daemon.kill()
    state, journal = n.state / "state.json", n.state / "journal.jsonl"
    if fault == "checkpoint-deleted":
        state.unlink()
        journal.unlink(missing_ok=True)
    elif fault == "checkpoint-corrupt":
        raw = bytearray(state.read_bytes())
        raw[len(raw) // 2] ^= 0xFF
        state.write_bytes(bytes(raw[: len(raw) * 3 // 4]))
    elif fault == "journal-only":
        state.unlink()
    return before


async def apply_change(n: Node, change: str, cell: str) -> None:
    """What the runtime does while the plugin is down (it never asks the plugin)."""
    if change == "pod-started":
        await n.rt.launch(single(f"{cell}-late", 1))
    elif change == "pod-removed":
        victim = next(p for p in n.rt.pods.values() if p.uid == f"{cell}-2s")
        await n.rt.remove_pod(victim)
    elif change == "pod-no-longer-fits":
        await n.rt.launch(single(f"{cell}-big", 6))


@pytest.mark.parametrize("change", CHANGES)
@pytest.mark.parametrize("fault", FAULTS)
def test_restart(node: Node, fault: str, change: str) -> None:
    cell = f"{FAULTS.index(fault)}{CHANGES.index(change)}"

    async def main() -> None:
        try:
            await one_cell(node, fault, change, cell)
        finally:
            await node.clear()
        assert check(checkpointed_engine(node.tmp), node.rt, set()) == []

    node.run(main())


async def one_cell(n: Node, fault: str, change: str, cell: str) -> None:
    """Baseline pods, the fault, the change while away, the restart and its checks."""
    for spec in baseline(cell):
        await n.rt.launch(spec)
    await n.rt.settle()
    assert check(checkpointed_engine(n.tmp), n.rt, {p.uid for p in n.rt.pods.values()}) == []
    before = await apply_fault(n, fault, cell)
    await apply_change(n, change, cell)
    offset = n.log_size()
    reply = await n.restart()
    uids = {p.uid for p in n.rt.pods.values()}
    problems = check(checkpointed_engine(n.tmp), n.rt, uids, before)
    assert problems == [], "\n".join(problems) + "\n" + n.daemon.log_tail()
    for cid, cpus in running_cpus(n.rt).items():
        assert cpus and cpus != ALL, f"container {cid} runs on {cpus or 'every cpu'}"
    if fault != "sigkill" and change == "nothing":
        assert list(reply.update) == [], "nothing changed: nothing to correct"
    lines = await n.logged_since(offset, "plugin: synchronized ")
    corrections = [line for line in lines if " reconcile pod=" in line and " -> " in line]
    assert len(corrections) == len(reply.update), "\n".join(lines)
    summary = [line for line in lines if "plugin: synchronized " in line]
    assert summary and f"{len(reply.update)} updates" in summary[-1], "\n".join(lines)
    if change == "pod-no-longer-fits":
        assert any("cannot get its allocation" in line for line in lines), "\n".join(lines)
    if fault == "dir-deleted":
        assert stat.S_IMODE(os.stat(n.state).st_mode) == 0o700
        await n.logged_since(0, "recreating it")
