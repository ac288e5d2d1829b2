"""Plugin restarts in-process: checkpoint intact, deleted, corrupted, from a newer version;
runtime changes while the plugin was away; Synchronize reconciliation on the wire."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import shutil
from pathlib import Path

import pytest
from cpu_pods import container
from plrm_harness import serve, stored_plugin
from plrm_invariants import check, exclusive_cpus
from plrm_runtime import FakeRuntime

from nri_plrm.checkpoint.store import CheckpointStore
from nri_plrm.engine.spec import ContainerSpec, PodSpec
from nri_plrm.plugin.handlers import Plugin
from nri_plrm.translate.manifest_to_pod import load_manifests
from nri_plrm.ttrpc.messages import TtrpcError

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def manifest(name: str, copy: int = 0) -> PodSpec:
    (pod,) = load_manifests([EXAMPLES / f"{name}.yaml"])
    if copy:
        pod = dataclasses.replace(pod, uid=f"{pod.uid}-{copy}", name=f"{pod.name}-{copy}")
    return pod


def live_uids(rt: FakeRuntime) -> set[str]:
    return {p.uid for p in rt.pods.values()}


async def first_life(tmp_path: Path) -> FakeRuntime:
    """Run four pods, remove one; return the runtime as the plugin left it."""
    plugin = stored_plugin(tmp_path / "state")
    async with serve(plugin, str(tmp_path / "nri.sock"), clean_stop=False) as s:
        rt = s.runtime
        await rt.launch(manifest("pod-scope-mixed"))
        doomed = await rt.launch(manifest("classic-guaranteed"))
        await rt.launch(manifest("besteffort"))
        await rt.launch(manifest("tightly-coupled-database"))
        await rt.remove_pod(doomed)
        await rt.settle()
        assert check(plugin.ledger.engine, rt, live_uids(rt)) == []
    return rt


async def second_life(tmp_path: Path, rt: FakeRuntime) -> tuple[Plugin, list[str]]:
    """Restart from the same state directory; Synchronize reports what the runtime has."""
    plugin = stored_plugin(tmp_path / "state")
    pods, ctrs = rt.sync_lists()
    async with serve(
        plugin, str(tmp_path / "nri.sock"), pods=pods, containers=ctrs, runtime=rt, clean_stop=False
    ):
        await rt.settle()
    return plugin, check(plugin.ledger.engine, rt, live_uids(rt))


def test_restart_keeps_exact_cpus_and_answers_sync_without_updates(tmp_path: Path) -> None:
    async def main() -> None:
        rt = await first_life(tmp_path)
        before = exclusive_cpus(rt)
        plugin, problems = await second_life(tmp_path, rt)
        assert problems == []
        assert check(plugin.ledger.engine, rt, live_uids(rt), before) == []
        assert rt.sync_updates == 0
        assert len(plugin.ledger.pods()) == 3

    asyncio.run(main())


def test_changes_while_away_are_reconciled(tmp_path: Path) -> None:
    """A pod removed and a pod created while the plugin was down: the first is released, the
    second adopted and pinned by the Synchronize reply."""

    async def main() -> None:
        rt = await first_life(tmp_path)
        gone = next(p for p in rt.pods.values() if p.name == "besteffort")
        await rt.remove_pod(gone)  # no plugin: containerd carries on without it
        late = manifest("pod-scope-mixed", copy=1)
        pod = await rt.launch(late)
        assert rt.applied(pod, "main-app").cpus == ""
        before = exclusive_cpus(rt)
        plugin, problems = await second_life(tmp_path, rt)
        assert problems == []
        assert check(plugin.ledger.engine, rt, live_uids(rt), before) == []
        assert len(rt.cpus_of(pod, "main-app")) == 2
        assert rt.applied(pod, "main-app").quota == -1
        assert {v.name for v in plugin.ledger.pods()} == {p.name for p in rt.pods.values()}

    asyncio.run(main())


def test_checkpoint_deleted_rebuilds_from_the_runtime(tmp_path: Path) -> None:
    """Every container is adopted from what it runs with: exclusive ones stay exclusive with
    as many CPUs as before (quota -1 is read back as their whole-CPU request)."""

    async def main() -> None:
        rt = await first_life(tmp_path)
        before = exclusive_cpus(rt)
        (tmp_path / "state" / "state.json").unlink()
        plugin, problems = await second_life(tmp_path, rt)
        assert problems == []
        assert {v.uid for v in plugin.ledger.pods()} == live_uids(rt)
        after = exclusive_cpus(rt)
        assert {cid: len(c) for cid, c in after.items()} == {
            cid: len(c) for cid, c in before.items()
        }

    asyncio.run(main())


def test_checkpoint_corrupted_is_kept_aside_and_rebuilt(tmp_path: Path) -> None:
    async def main() -> None:
        rt = await first_life(tmp_path)
        path = tmp_path / "state" / "state.json"
        path.write_bytes(path.read_bytes()[:-40] + b"garbage")
        plugin, problems = await second_life(tmp_path, rt)
        assert problems == []
        assert list((tmp_path / "state").glob("state.json.corrupt-*"))
        assert {v.uid for v in plugin.ledger.pods()} == live_uids(rt)

    asyncio.run(main())


def test_checkpoint_from_a_newer_plugin_with_unknown_fields(tmp_path: Path) -> None:
    """A newer plugin's additions that keep the format version are ignored (a newer format
    version is refused: tests/checkpoint/test_format_versions.py)."""

    async def main() -> None:
        rt = await first_life(tmp_path)
        before = exclusive_cpus(rt)
        path = tmp_path / "state" / "state.json"
        doc = json.loads(path.read_text())
        data = doc["data"]
        data["future"] = {"anything": [1, 2, 3]}
        data["plugin"]["newKey"] = "ignored"
        for entry in data["plugin"]["pods"].values():
            entry["annotationsFromTheFuture"] = {"a": "b"}
        data["engine"]["extraTable"] = {}
        store = CheckpointStore(tmp_path / "state")
        store.save(data)
        plugin, problems = await second_life(tmp_path, rt)
        assert problems == []
        assert check(plugin.ledger.engine, rt, live_uids(rt), before) == []
        assert not list((tmp_path / "state").glob("state.json.corrupt-*"))

    asyncio.run(main())


def test_failed_checkpoint_write_fails_the_request_and_rolls_back(tmp_path: Path) -> None:
    """The state directory cannot be written: decisions fail with an error naming the file
    and the cause and are undone; once it can be written again, the next decision writes a
    full checkpoint and everything is durable again, without a restart."""

    async def main() -> None:
        plugin = stored_plugin(tmp_path / "state")
        journal, store = plugin.ledger.persistence.journal, plugin.ledger.persistence.store
        assert journal is not None and store is not None
        async with serve(plugin, str(tmp_path / "nri.sock")) as s:
            rt = s.runtime
            await rt.launch(manifest("besteffort"))
            mixed = manifest("pod-scope-mixed")
            pod = await rt.run_pod(mixed)
            saved = plugin.ledger.snapshot()
            journal.close()
            journal._fd = os.open("/dev/full", os.O_WRONLY)  # every append: ENOSPC
            (tmp_path / "not-a-dir").write_text("a file where a directory should be")
            plugin.ledger.persistence.store = CheckpointStore(tmp_path / "not-a-dir" / "state")
            with pytest.raises(TtrpcError, match=r"decision not applied: journal .*journal.jsonl"):
                await rt.create(pod, mixed, mixed.init_containers[0])
            assert plugin.ledger.snapshot() == saved
            with pytest.raises(TtrpcError, match=r"decision not applied: .*not-a-dir"):
                await rt.run_pod(manifest("tightly-coupled-database"))
            assert plugin.ledger.snapshot() == saved
            plugin.ledger.persistence.store = store
            await rt.create(pod, mixed, mixed.init_containers[0])
            assert journal.broken is None and journal.is_open
        restarted = stored_plugin(tmp_path / "state")
        assert (
            restarted.ledger.snapshot()["engine"]["cpu"]
            == plugin.ledger.snapshot()["engine"]["cpu"]
        )

    asyncio.run(main())


def test_a_pod_demoted_at_synchronize_gets_its_budget_quota_back(tmp_path: Path) -> None:
    """A budget pod's first container, without resources, is promoted (quota -1); the plugin
    dies; containerd creates the second container meanwhile. Synchronize demotes the pod: the
    first container goes to the pod's shared pool with the budget's CFS quota, never keeping
    quota -1 (issue 28)."""
    budget = {"cpu": 4000, "memory": 2 << 30}
    spec = PodSpec(
        uid="uid-demoted",
        name="demoted",
        requests=budget,
        limits=budget,
        containers=(ContainerSpec("app"), ContainerSpec("logger")),
    )

    async def main() -> None:
        plugin = stored_plugin(tmp_path / "state")
        async with serve(plugin, str(tmp_path / "nri.sock"), clean_stop=False) as s:
            rt = s.runtime
            pod = await rt.run_pod(spec)
            await rt.create(pod, spec, spec.containers[0])
            assert rt.applied(pod, "app").quota == -1  # promoted
        await rt.create(pod, spec, spec.containers[1])  # no plugin: created unadjusted
        plugin, problems = await second_life(tmp_path, rt)
        assert problems == []
        app = plugin.ledger.engine.assignment(spec.uid, "app")
        assert app is not None and not app.exclusive
        assert rt.applied(pod, "app").quota == 400_000
        assert rt.cpus_of(pod, "app") == app.cpus

    asyncio.run(main())


def test_state_lost_keeps_shared_guaranteed_pods_on_their_memory_nodes(tmp_path: Path) -> None:
    """The state directory is deleted and a pod removed while the plugin is down. Guaranteed
    pods whose containers are all shared (fractional CPUs) run with their memory pinned: the
    restart keeps each pod on the NUMA node its containers run on (no update moves them) and
    charges their memory there, instead of deciding again, which moved them to the freed node
    and left the last ones without memory accounting (issue 28)."""
    shared = PodSpec(
        uid="uid-all-shared",
        name="all-shared",
        containers=tuple(container(f"c{i}", "500m", memory="1G") for i in range(3)),
    )
    classic = [
        PodSpec(uid=f"uid-cl{i}", name=f"cl{i}", containers=(container("c", "500m", memory="4G"),))
        for i in range(8)
    ]

    async def main() -> None:
        plugin = stored_plugin(tmp_path / "state")
        async with serve(plugin, str(tmp_path / "nri.sock"), clean_stop=False) as s:
            rt = s.runtime
            fill = container("f", "500m", memory="12G")
            filler = await rt.launch(PodSpec(uid="uid-fill", name="fill", containers=(fill,)))
            specs = (shared, *classic)
            pods = [await rt.launch(spec) for spec in specs]
            await rt.settle()
        before = {
            (spec.uid, c.name): rt.applied(pod, c.name).mems
            for spec, pod in zip(specs, pods, strict=True)
            for c in spec.containers
        }
        assert len(set(before.values())) > 1  # spread over the NUMA nodes, not node 0 only
        await rt.remove_pod(filler)  # frees node 0: a fresh decision would move pods there
        shutil.rmtree(tmp_path / "state")
        plugin, problems = await second_life(tmp_path, rt)
        assert problems == []
        assert rt.sync_updates == 0
        engine = plugin.ledger.engine
        for (uid, name), mems in before.items():
            assignment = engine.assignment(uid, name)
            assert assignment is not None
            assert str(assignment.mems) == mems, (uid, name)
            assert [b.numa_nodes for b in assignment.memory] == [(int(mems),)], (uid, name)
        # the checkpoint Synchronize wrote restores the same decisions
        again, problems = await second_life(tmp_path, rt)
        assert problems == [] and rt.sync_updates == 0
        assert again.ledger.engine.assignments() == engine.assignments()

    asyncio.run(main())
