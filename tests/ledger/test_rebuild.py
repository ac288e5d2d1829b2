"""Rebuilding from what runs (issue 12, findings 1 and 2), in-process behind the real wire stub.

Finding 2: with the checkpoint lost, every pod used to be re-placed in creation order, so a
node whose history differs from a replay (pods removed since) saw pinned workloads move.
Finding 1: a container the plugin could not place after a restart was left on every CPU.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest
from cpu_pods import container, pod_level
from plrm_harness import serve
from plrm_invariants import check, exclusive_cpus
from plrm_runtime import FakeRuntime

from nri_plrm.base.cpuset import CPUSet
from nri_plrm.checkpoint.store import CheckpointStore
from nri_plrm.config.file import parse_config
from nri_plrm.engine.facade import Engine
from nri_plrm.engine.spec import PodSpec
from nri_plrm.ledger import NodeLedger
from nri_plrm.ledger.rebuild import Running, budget_claim
from nri_plrm.observability.metrics import Metrics
from nri_plrm.plugin.handlers import Plugin
from nri_plrm.proto import nri_api_pb2 as api
from nri_plrm.topology.machines import MACHINES

POD_SCOPE = '[topology_manager]\npolicy = "single-numa-node"\nscope = "pod"\n'
ALL = MACHINES["default"].all_cpus


def single(uid: str, cpus: int) -> PodSpec:
    """One Guaranteed container: NRI shows a budget of ``cpus`` with one shared container."""
    return PodSpec(uid=uid, name=uid, containers=(container("app", str(cpus)),))


def slices(uid: str, cpus: int) -> PodSpec:
    """Two Guaranteed containers: a budget of ``cpus`` + 1 made of two exclusive slices."""
    return PodSpec(
        uid=uid, name=uid, containers=(container("app", str(cpus)), container("aux", "1"))
    )


def pinned(rt: FakeRuntime) -> dict[str, CPUSet]:
    """Container id -> applied cpuset, for every running container."""
    running = api.CONTAINER_RUNNING
    return {cid: rc.cpus for cid, rc in rt.containers.items() if rc.msg.state == running}


def budget_pod(uid: str, cpus: int, slice_cpus: int) -> PodSpec:
    return pod_level(
        uid,
        str(cpus),
        apps=(container("main", str(slice_cpus), memory="1G"), container("side")),
    )


def new_plugin(state: Path, metrics: Metrics | None = None, events: Events | None = None) -> Plugin:
    engine = Engine(MACHINES["default"], parse_config(POD_SCOPE).engine_config())
    ledger = NodeLedger(engine, store=CheckpointStore(state), observer=metrics)
    ledger.open()
    return Plugin(ledger, metrics=metrics, events=events)


class Events:
    """The pod Events the plugin posts (API mode), as (pod uid, reason, message)."""

    def __init__(self) -> None:
        self.posted: list[tuple[str, str, str]] = []

    def record(self, pod_uid: str, namespace: str, name: str, reason: str, message: str) -> None:
        self.posted.append((pod_uid, reason, message))


def crash(plugin: Plugin) -> None:
    """What SIGKILL leaves: nothing of this plugin writes to the state directory later in the
    test's event loop and its journal is closed without a final checkpoint (``serve`` with
    ``clean_stop=False`` does the same)."""
    plugin.ledger.persistence.halt()


def uids(rt: FakeRuntime) -> set[str]:
    return {p.uid for p in rt.pods.values()}


async def life(
    tmp: Path, rt: FakeRuntime | None, metrics: Metrics | None = None, events: Events | None = None
) -> tuple[Plugin, FakeRuntime]:
    """One life of the plugin: restore, Synchronize with what ``rt`` runs, then stop without
    a final checkpoint (as SIGKILL would leave it)."""
    plugin = new_plugin(tmp / "state", metrics, events)
    pods, ctrs = rt.sync_lists() if rt is not None else ([], [])
    async with serve(
        plugin, str(tmp / "nri.sock"), pods=pods, containers=ctrs, runtime=rt, clean_stop=False
    ) as s:
        await s.runtime.settle()
    crash(plugin)
    return plugin, s.runtime


async def history(tmp: Path) -> FakeRuntime:
    """Pods whose CPUs a replay in creation order would not give back: the first pods of each
    shape are removed, so the survivors do not sit where a fresh engine puts them first."""
    _, rt = await life(tmp, None)
    plugin = new_plugin(tmp / "state")
    async with serve(plugin, str(tmp / "nri.sock"), runtime=rt, clean_stop=False) as s:
        rt = s.runtime
        first = await rt.launch(slices("c1", 2))
        await rt.launch(slices("c2", 2))
        lead = await rt.launch(budget_pod("p1", 4, 2))
        await rt.launch(budget_pod("p2", 4, 2))
        await rt.launch(single("s1", 3))
        await rt.launch(slices("c3", 3))
        await rt.remove_pod(first)
        await rt.remove_pod(lead)
        await rt.settle()
        assert check(plugin.ledger.engine, rt, uids(rt)) == []
    crash(plugin)
    return rt


def lose_checkpoint(state: Path, how: str) -> None:
    path = state / "state.json"
    if how == "deleted":
        path.unlink()
        (state / "journal.jsonl").unlink()
    elif how == "corrupt":
        path.write_bytes(path.read_bytes()[: len(path.read_bytes()) // 2])
    elif how == "journal-only":
        path.unlink()


@pytest.mark.parametrize("how", ["deleted", "corrupt", "journal-only"])
def test_lost_checkpoint_keeps_every_running_exclusive_cpuset(tmp_path: Path, how: str) -> None:
    async def main() -> None:
        rt = await history(tmp_path)
        before = exclusive_cpus(rt)
        assert len(before) == 6  # s1 runs promoted (single-container inference)
        running = pinned(rt)
        lose_checkpoint(tmp_path / "state", how)
        metrics = Metrics()
        plugin, rt = await life(tmp_path, rt, metrics)
        assert check(plugin.ledger.engine, rt, uids(rt), before) == []
        assert pinned(rt) == running
        assert rt.sync_updates == 0, "what ran was valid: nothing to correct"
        adopted = metrics.registry.get_sample_value(
            "nri_plrm_reconciled_containers_total", {"action": "adopted"}
        )
        assert adopted == 7.0  # c2, c3: 2 slices each; p2: main and side; s1: app
        assert {v.uid for v in plugin.ledger.pods()} == uids(rt)
        # and the rebuilt state is durable: the next life starts from it with nothing to do
        plugin, rt = await life(tmp_path, rt)
        assert pinned(rt) == running and rt.sync_updates == 0

    asyncio.run(main())


def test_conflicting_containers_are_replaced_and_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Two containers claim the same CPUs (the runtime applied a stale update): the older one
    keeps them, the other is re-placed with a logged, counted correction."""

    async def main() -> None:
        rt = await history(tmp_path)
        (tmp_path / "state" / "state.json").unlink()
        c2 = next(p for p in rt.pods.values() if p.uid == "c2")
        c3 = next(p for p in rt.pods.values() if p.uid == "c3")
        kept = rt.cpus_of(c2, "app")
        clash = rt.applied(c3, "app")
        clash.cpus = str(kept | CPUSet([int(clash.cpus.split(",")[0].split("-")[0])]))
        metrics = Metrics()
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="nri_plrm.plugin"):
            plugin, rt = await life(tmp_path, rt, metrics)
        assert check(plugin.ledger.engine, rt, uids(rt)) == []
        assert rt.cpus_of(c2, "app") == kept
        assert not rt.cpus_of(c3, "app") & kept and len(rt.cpus_of(c3, "app")) == 3
        corrections = [r for r in caplog.records if "reconcile pod=default/c3" in r.getMessage()]
        assert len(corrections) == 1 and "->" in corrections[0].getMessage()
        counted = metrics.registry.get_sample_value(
            "nri_plrm_reconciled_containers_total", {"action": "corrected"}
        )
        assert counted == 1.0

    asyncio.run(main())


def test_started_pod_that_no_longer_fits_goes_to_the_node_shared_pool(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Finding 1: pods of 14, 15, 15 and 15 exclusive CPUs fill the NUMA nodes; a 4-CPU
    Guaranteed pod started while the plugin is down cannot be placed at Synchronize. It runs in
    the node shared pool (never on every CPU), with a WARNING and the allocation error counted.
    """

    async def main() -> None:
        _, rt = await life(tmp_path, None)
        plugin = new_plugin(tmp_path / "state")
        async with serve(plugin, str(tmp_path / "nri.sock"), runtime=rt, clean_stop=False) as s:
            rt = s.runtime
            for i, n in enumerate((14, 15, 15, 15)):
                await rt.launch(single(f"big{i}", n))
            await rt.settle()
        crash(plugin)
        before = pinned(rt)
        late = await rt.launch(single("late", 4))  # the plugin is down
        assert rt.applied(late, "app").cpus == ""
        metrics, events = Metrics(), Events()
        with caplog.at_level(logging.WARNING, logger="nri_plrm.plugin"):
            plugin, rt = await life(tmp_path, rt, metrics, events)
        shared = plugin.ledger.engine.node_shared_pool()
        assert rt.cpus_of(late, "app") == shared != ALL
        assert not shared & CPUSet().union(*before.values())
        assert check(plugin.ledger.engine, rt, uids(rt), before) == []
        assert any(
            "default/late" in r.getMessage() and "node shared pool" in r.getMessage()
            for r in caplog.records
            if r.levelno == logging.WARNING
        )
        errors = metrics.registry.get_sample_value(
            "resource_manager_allocation_errors_total", {"resource_name": "cpu", "source": "node"}
        )
        assert errors is not None and errors >= 1.0
        assert any(
            uid == "late" and reason == "UnexpectedAdmissionError" and "node shared pool" in text
            for uid, reason, text in events.posted
        ), events.posted
        # its next container too (journaled: a restart replays it), and the pool change when a
        # big pod leaves reaches them
        big = next(p for p in rt.pods.values() if p.uid == "big1")
        plugin = new_plugin(tmp_path / "state")
        pods, ctrs = rt.sync_lists()
        async with serve(
            plugin,
            str(tmp_path / "nri.sock"),
            pods=pods,
            containers=ctrs,
            runtime=rt,
            clean_stop=False,
        ) as s:
            rt = s.runtime
            spec = single("late", 4)
            await rt.create(late, spec, container("helper"))
            assert rt.cpus_of(late, "helper") == plugin.ledger.engine.node_shared_pool()
        crash(plugin)
        probe = new_plugin(tmp_path / "state")  # checkpoint + journal, before any Synchronize
        known = {(v.uid, c.name) for v in probe.ledger.pods() for c in v.containers}
        assert ("late", "helper") in known, "the journal had the helper in the node shared pool"
        crash(probe)
        plugin, rt = await life(tmp_path, rt)
        assert rt.sync_updates == 0
        plugin = new_plugin(tmp_path / "state")
        pods, ctrs = rt.sync_lists()
        async with serve(
            plugin, str(tmp_path / "nri.sock"), pods=pods, containers=ctrs, runtime=rt
        ) as s:
            rt = s.runtime
            await rt.remove_pod(big)
            await rt.settle()
            for name in ("app", "helper"):
                assert rt.cpus_of(late, name) == plugin.ledger.engine.node_shared_pool()
            assert len(rt.cpus_of(late, "app")) > len(shared)
            assert check(plugin.ledger.engine, rt, uids(rt)) == []

    asyncio.run(main())


def running(cpus: str | None, exclusive: bool = True) -> Running:
    return Running(None if cpus is None else CPUSet.parse(cpus), CPUSet(), exclusive)


def test_budget_claim_keeps_consistent_slices_and_pool() -> None:
    free = CPUSet.parse("1-31,33-63")
    members = [(2, running("4,36")), (0, running("5-6,37-38", False))]
    assert budget_claim(6, members, free, ALL) == CPUSet.parse("4-6,36-38")


def test_budget_claim_drops_what_does_not_fit_or_is_taken() -> None:
    free = CPUSet.parse("1-31,33-63")
    # wrong size, taken CPU (0 is reserved), overlap with an earlier slice: none kept
    members = [
        (2, running("4")),
        (2, running("0,32")),
        (2, running("8,40")),
        (2, running("8,41")),
    ]
    assert budget_claim(4, members, free, ALL) == CPUSet.parse("8,40")
    # slices beyond the budget (one CPU kept for the running shared container)
    members = [(2, running("8,40")), (2, running("9,41")), (0, running("10", False))]
    assert budget_claim(4, members, free, ALL) == CPUSet.parse("8,10,40")
    # a shared container never pinned (every CPU) claims nothing
    assert budget_claim(4, [(0, running(str(ALL), False))], free, ALL) == CPUSet()


def test_cold_synchronize_logs_changes_not_every_container(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Finding 7: a cold Synchronize on a full node wrote an INFO line per pod and container
    (thousands of lines inside containerd's deadline). Containers kept as they run are logged
    at DEBUG, with one INFO summary; what changes is still logged line by line."""

    async def main() -> None:
        rt = await history(tmp_path)
        plugin = new_plugin(tmp_path / "state")
        pods, ctrs = rt.sync_lists()
        async with serve(
            plugin, str(tmp_path / "nri.sock"), pods=pods, containers=ctrs, runtime=rt
        ) as s:
            rt = s.runtime
            for i in range(30):
                await rt.launch(PodSpec(uid=f"be{i}", name=f"be{i}", containers=(container("c"),)))
        lose_checkpoint(tmp_path / "state", "deleted")
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="nri_plrm.plugin"):
            plugin, rt = await life(tmp_path, rt)
        assert rt.sync_updates == 0
        info = [
            r.getMessage()
            for r in caplog.records
            if r.levelno >= logging.INFO and r.name == "nri_plrm.plugin"
        ]
        summary = [m for m in info if m.startswith("synchronized 34 pods and 37 containers")]
        assert len(summary) == 1, info
        assert "6 kept as they run, 31 placed" in summary[0]
        assert len(info) <= 3, info

    asyncio.run(main())


class CountingSource:
    """A pod spec source that knows no pod (NRI-only decisions) and counts the lookups."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    async def lookup(self, uid: str, namespace: str, name: str, timeout: float) -> None:
        self.asked.append(uid)


def test_each_unknown_pod_is_looked_up_once(tmp_path: Path) -> None:
    """In API mode a lookup may wait up to ``lookup_timeout``: keeping what runs must not ask
    the API a second time for the pods it then admits."""

    async def main() -> None:
        rt = await history(tmp_path)
        lose_checkpoint(tmp_path / "state", "deleted")
        plugin = new_plugin(tmp_path / "state")
        source = CountingSource()
        plugin.pod_specs = source
        pods, ctrs = rt.sync_lists()
        await plugin.synchronize(pods, ctrs)
        assert sorted(source.asked) == sorted(p.uid for p in pods)
        crash(plugin)

    asyncio.run(main())
