"""Pool updates to the runtime: other pods' containers are never in an event's reply; they are
sent once decisions pause for ``SETTLE`` and what was created has started (a shrunk pool
``SHRINK_WAIT_MAX`` at most, a grown one ``GROWTH_WAIT_MAX``), so churn that takes the same CPUs
back sends nothing; an update repeating what the runtime was just sent is left out; a failed
one is tried again; after any of this the runtime holds every container's decision."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from inprocess_pods import start
from plrm_harness import serve, stored_plugin
from plrm_invariants import check
from plrm_runtime import FakeRuntime

from nri_plrm.base.cpuset import CPUSet
from nri_plrm.engine.spec import AssignmentType, ContainerAssignment, ContainerSpec, PodSpec
from nri_plrm.plugin import pool_updates
from nri_plrm.plugin.handlers import Plugin
from nri_plrm.plugin.pool_updates import SETTLE, UPDATE_ATTEMPTS, SentUpdates
from nri_plrm.proto import nri_api_pb2 as api
from nri_plrm.translate.pod_to_cri import nri_container

GI = 1 << 30


def best_effort(n: int) -> PodSpec:
    return PodSpec(uid=f"be-{n}", name=f"be-{n}", containers=(ContainerSpec("c"),))


def guaranteed(n: int) -> PodSpec:
    two = {"cpu": 2000, "memory": GI}
    return PodSpec(
        uid=f"g-{n}", name=f"g-{n}", containers=(ContainerSpec("main", requests=two, limits=two),)
    )


def updates_to(sim: object, cids: set[str]) -> int:
    """Updates the runtime received for these containers (replies and UpdateContainers)."""
    count = 0
    for record in sim.records:  # type: ignore[attr-defined]
        reply = record.reply
        if reply is not None and hasattr(reply, "update"):
            count += sum(1 for u in reply.update if u.container_id in cids)
    for request in sim.unsolicited:  # type: ignore[attr-defined]
        count += sum(1 for u in request.update if u.container_id in cids)
    return count


async def follower(rt: FakeRuntime) -> tuple[api.PodSandbox, str]:
    """A best-effort pod whose container ``c`` runs on the node shared pool; its id."""
    sandbox = await rt.launch(best_effort(0))
    return sandbox, rt.id_of(sandbox, "c")


async def followers_and_a_guaranteed_pod(rt: FakeRuntime) -> tuple[set[str], api.PodSandbox]:
    """Three best-effort containers on the node shared pool, then a Guaranteed pod that shrank
    it; the containers' ids and the pod, once the runtime holds every update."""
    sandboxes = [await rt.launch(best_effort(n)) for n in range(3)]
    shared = {rt.id_of(sandbox, "c") for sandbox in sandboxes}
    pod = await rt.launch(guaranteed(0))
    await rt.settle()
    return shared, pod


def test_churn_that_takes_the_same_cpus_back_sends_the_pool_nothing(tmp_path: Path) -> None:
    plugin = stored_plugin(tmp_path / "state")

    async def main() -> None:
        async with serve(plugin, str(tmp_path / "nri.sock")) as s:
            rt, sim = s.runtime, s.sim
            shared, first = await followers_and_a_guaranteed_pod(rt)
            before = updates_to(sim, shared)
            assert before == 3  # the first admission moved the pool once
            for n in range(1, 6):  # remove and admit again, faster than SETTLE
                await rt.remove_pod(first)
                first = await rt.launch(guaranteed(n))
            await rt.settle()
            assert updates_to(sim, shared) == before
            await rt.remove_pod(first)
            await rt.settle()  # the pool grew for good: sent once, after the delay
            assert updates_to(sim, shared) == before + 3
            assert check(plugin.ledger.engine, rt, {p.uid for p in rt.pods.values()}) == []

    asyncio.run(main())


class Timeline:
    """When the plugin decided and when its flusher sent an ``UpdateContainers`` (loop time):
    what a test checks the flusher's rule against, whatever the machine's speed."""

    def __init__(self, plugin: Plugin, monkeypatch: pytest.MonkeyPatch) -> None:
        self.decided: list[float] = []
        self.sent: list[float] = []
        loop = asyncio.get_running_loop()
        commit, send = plugin.ledger.commit, plugin.flusher.sender
        assert send is not None

        def timed_commit(op: object, *, release: bool = False) -> None:
            self.decided.append(loop.time())
            commit(op, release=release)  # type: ignore[arg-type]

        async def timed_send(updates: list[api.ContainerUpdate]) -> object:
            self.sent.append(loop.time())
            return await send(updates)

        monkeypatch.setattr(plugin.ledger, "commit", timed_commit)
        plugin.flusher.sender = timed_send

    def early_sends(self, settle: float, wait_max: float) -> list[str]:
        """Sends made before decisions paused for ``settle`` and before ``wait_max`` since the
        first decision after the previous send (no later than the change the send carries)."""
        early, since = [], self.decided[0] if self.decided else 0.0
        for at in self.sent:
            last = max((t for t in self.decided if t <= at), default=since)
            first = min((t for t in self.decided if t >= since), default=at)
            if at - last < settle and at - first < wait_max:
                early.append(f"sent {at - last:.3f} s after a decision, {at - first:.3f} s queued")
            since = at
        return early


def test_a_grown_pool_waits_while_decisions_go_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pool grows and shrinks back on both sides of where one ``SETTLE`` after the first
    removal ends: nothing is sent while decisions do not pause that long (on a fast machine:
    nothing at all; a loaded one may pause the test longer, and the flusher may then send)."""
    delay = 0.2
    monkeypatch.setattr(pool_updates, "SETTLE", delay)
    plugin = stored_plugin(tmp_path / "state")

    async def main() -> None:
        async with serve(plugin, str(tmp_path / "nri.sock")) as s:
            rt = s.runtime
            _, pod = await followers_and_a_guaranteed_pod(rt)
            timeline = Timeline(plugin, monkeypatch)
            for n in range(1, 3):
                await rt.remove_pod(pod)  # grown: from here on, one delay would have sent it
                await asyncio.sleep(0.6 * delay)
                pod = await rt.launch(guaranteed(n))
                await asyncio.sleep(0.2 * delay)
            await rt.remove_pod(pod)
            await asyncio.sleep(0.6 * delay)
            await rt.launch(guaranteed(3))
            await rt.settle()
            assert timeline.early_sends(delay, pool_updates.SHRINK_WAIT_MAX) == []
            assert check(plugin.ledger.engine, rt, {p.uid for p in rt.pods.values()}) == []

    asyncio.run(main())


def test_a_grown_pool_is_sent_after_the_longest_wait_however_busy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A node that never settles (``SETTLE`` longer than the test) still gets a grown pool
    once the change waited ``GROWTH_WAIT_MAX``."""
    longest = 0.3
    monkeypatch.setattr(pool_updates, "GROWTH_WAIT_MAX", longest)
    plugin = stored_plugin(tmp_path / "state")

    async def main() -> None:
        async with serve(plugin, str(tmp_path / "nri.sock")) as s:
            rt, sim = s.runtime, s.sim
            be = await rt.launch(best_effort(0))
            pod = await rt.launch(guaranteed(0))
            await rt.settle()
            exclusive = rt.cpus_of(pod, "main")
            sent_before = len(sim.unsolicited)
            monkeypatch.setattr(pool_updates, "SETTLE", 3600.0)
            loop = asyncio.get_running_loop()
            start, n = loop.time(), 1
            await rt.remove_pod(pod)
            while len(sim.unsolicited) == sent_before and loop.time() < start + 60:
                other = await rt.launch(best_effort(n))  # a decision every few milliseconds
                await rt.remove_pod(other)
                await asyncio.sleep(SETTLE / 5)
                n += 1
            waited = loop.time() - start
            assert len(sim.unsolicited) > sent_before, f"nothing sent after {waited:.2f} s"
            assert waited >= longest
            rt.apply_unsolicited()
            assert exclusive <= rt.cpus_of(be, "c")

    asyncio.run(main())


def test_a_shrunk_pool_is_sent_after_the_start_and_a_grown_one_waits(tmp_path: Path) -> None:
    plugin = stored_plugin(tmp_path / "state")

    async def main() -> None:
        async with serve(plugin, str(tmp_path / "nri.sock")) as s:
            rt, sim = s.runtime, s.sim
            be, cid = await follower(rt)
            pod = await rt.run_pod(guaranteed(0))
            reply = await rt.create(pod, guaranteed(0), guaranteed(0).containers[0])
            assert not reply.update  # the pod start waits for no other pod's container
            await asyncio.sleep(3 * SETTLE)
            assert not sim.unsolicited  # nothing while the container has not started
            await rt.start(rt.id_of(pod, "main"))
            await rt.settle()
            exclusive = rt.cpus_of(pod, "main")
            assert not rt.cpus_of(be, "c") & exclusive
            assert len(sim.unsolicited) == 1
            await rt.remove_pod(pod)
            await asyncio.sleep(SETTLE / 5)
            assert len(sim.unsolicited) == 1
            await rt.settle()
            assert exclusive <= rt.cpus_of(be, "c")
            assert updates_to(sim, {cid}) == 2

    asyncio.run(main())


def test_a_failed_update_is_sent_again(tmp_path: Path) -> None:
    plugin = stored_plugin(tmp_path / "state")

    async def main() -> None:
        async with serve(plugin, str(tmp_path / "nri.sock")) as s:
            rt, sim = s.runtime, s.sim
            be, cid = await follower(rt)
            sim.fail_update_ids.add(cid)
            pod = await rt.launch(guaranteed(0))
            await rt.settle()
            assert updates_to(sim, {cid}) == UPDATE_ATTEMPTS  # refused every time
            assert plugin.sent.new([(cid, _pool(plugin))]) == [(cid, _pool(plugin))]
            sim.fail_update_ids.clear()
            await rt.remove_pod(pod)
            again = await rt.launch(guaranteed(1))
            await rt.settle()
            assert rt.cpus_of(be, "c") == plugin.ledger.engine.node_shared_pool()
            assert not rt.cpus_of(be, "c") & rt.cpus_of(again, "main")

    asyncio.run(main())


def _pool(plugin: Plugin) -> ContainerAssignment:
    return plugin.ledger.engine.node_shared_assignment()


def test_sent_updates_are_trusted_for_a_while() -> None:
    now = [100.0]
    sent = SentUpdates(remember=60.0, clock=lambda: now[0])
    a = ContainerAssignment(AssignmentType.NODE_SHARED, CPUSet.parse("0-3"), CPUSet())
    b = ContainerAssignment(AssignmentType.NODE_SHARED, CPUSet.parse("0-5"), CPUSet())
    assert sent.new([("x", a)]) == [("x", a)]
    sent.record([("x", a)])
    assert sent.new([("x", a), ("y", a)]) == [("y", a)]
    assert sent.new([("x", b)]) == [("x", b)]
    assert sent.new([("x", ContainerAssignment(a.assignment, CPUSet.parse("0-3"), CPUSet()))]) == []
    now[0] += 60.5
    assert sent.new([("x", a)]) == [("x", a)]
    sent.record([("x", a)])
    sent.forget(["x"])
    assert sent.new([("x", a)]) == [("x", a)]
    sent.record([("x", a), ("y", b)])
    sent.clear()
    assert len(sent) == 0


def test_a_container_that_moved_while_its_update_was_out_is_sent_again(tmp_path: Path) -> None:
    """The runtime holds what reached it last: when a decision moves the pool while an
    ``UpdateContainers`` is out, the containers it named are sent their new assignment."""
    plugin = stored_plugin(tmp_path / "state")
    sent: list[list[tuple[str, str]]] = []

    async def main() -> None:
        async def sender(updates: list[api.ContainerUpdate]) -> list[api.ContainerUpdate]:
            sent.append([(u.container_id, u.linux.resources.cpu.cpus) for u in updates])
            if len(sent) == 1:  # a pod is admitted while this request is out
                await start(plugin, guaranteed(1))
            return []

        plugin.attach(sender)
        await start(plugin, best_effort(0))
        await start(plugin, guaranteed(0))
        await plugin.drain()
        cid = nri_container(best_effort(0), best_effort(0).containers[0]).id
        assert [s for s in sent if s] == [
            [(cid, sent[0][0][1])],
            [(cid, str(plugin.ledger.engine.node_shared_pool()))],
        ]
        assert sent[0][0][1] != str(plugin.ledger.engine.node_shared_pool())

    asyncio.run(main())


def test_an_update_that_never_got_an_answer_is_not_trusted(tmp_path: Path) -> None:
    """An ``UpdateContainers`` that failed without an answer may or may not have been applied:
    it is tried again, and after the last attempt the plugin does not take it as sent."""
    plugin = stored_plugin(tmp_path / "state")

    async def main() -> None:
        calls: list[list[tuple[str, str]]] = []

        async def sender(updates: list[api.ContainerUpdate]) -> list[api.ContainerUpdate]:
            calls.append([(u.container_id, u.linux.resources.cpu.cpus) for u in updates])
            raise ConnectionError("connection closed")

        plugin.attach(sender)
        await start(plugin, best_effort(0))
        await start(plugin, guaranteed(0))
        await plugin.drain()
        cid = nri_container(best_effort(0), best_effort(0).containers[0]).id
        shrunk = _pool(plugin)
        assert calls == [[(cid, str(shrunk.cpus))]] * UPDATE_ATTEMPTS
        assert plugin.sent.new([(cid, shrunk)]) == [(cid, shrunk)]

    asyncio.run(main())


def test_creations_that_never_started_are_forgotten(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A container whose creation failed sends no PostStartContainer: it holds updates back for
    ``START_WAIT`` at most, and is forgotten once many are pending."""
    plugin = stored_plugin(tmp_path / "state")
    flusher = plugin.flusher
    now = [1000.0]
    monkeypatch.setattr(pool_updates.time, "monotonic", lambda: now[0])
    for n in range(pool_updates.STARTING_KEPT):
        flusher.starting(f"failed-{n}")
    flusher.started("failed-0")
    assert not flusher.settled(now[0])
    now[0] += pool_updates.START_WAIT
    flusher.starting("new")  # the expired ones go
    assert not flusher.settled(now[0])
    flusher.started("new")
    assert flusher.settled(now[0])
