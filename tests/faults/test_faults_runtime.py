"""Faults on the runtime side (issue 7, fault 1): containerd going away and coming back,
Synchronize arriving in pages, the kubelet overwriting a pinned cpuset through UpdateContainer.

The daemon is the real entry point in a forked child (``fault_daemon``) with the production
reconnect settings; the runtime is ``nrisim`` + ``FakeRuntime``. Every scenario ends with the
invariants of ``plrm_invariants.check`` on the plugin's durable state.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from fault_daemon import ForkedDaemon, checkpointed_engine, prepare
from nrisim import NRISimulator
from plrm_invariants import check, exclusive_cpus
from plrm_runtime import FakeRuntime

from nri_plrm.base.cpuset import CPUSet
from nri_plrm.engine.spec import ContainerKind, ContainerSpec, PodSpec
from nri_plrm.proto import nri_api_pb2 as api

GI = 1 << 30


def guaranteed(name: str, cpus: int, kind: ContainerKind = ContainerKind.APP) -> ContainerSpec:
    res = {"cpu": cpus * 1000, "memory": GI}
    return ContainerSpec(name, kind, requests=res, limits=res)


def pods(prefix: str, n: int) -> list[PodSpec]:
    """``n`` pods in three shapes: pod-level mixed, classic Guaranteed, BestEffort."""
    out = []
    budget = {"cpu": 3000, "memory": 3 * GI}
    for i in range(n):
        uid = f"{prefix}-{i:03d}"
        if i % 3 == 0:
            out.append(
                PodSpec(
                    uid=uid,
                    name=uid,
                    init_containers=(ContainerSpec("proxy", ContainerKind.SIDECAR),),
                    containers=(guaranteed("main", 2), ContainerSpec("logs")),
                    requests=budget,
                    limits=budget,
                )
            )
        elif i % 3 == 1:
            out.append(PodSpec(uid=uid, name=uid, containers=(guaranteed("app", 1),)))
        else:
            out.append(PodSpec(uid=uid, name=uid, containers=(ContainerSpec("batch"),)))
    return out


@dataclass
class Node:
    tmp: Path
    sim: NRISimulator
    rt: FakeRuntime
    daemon: ForkedDaemon

    def problems(self, before: dict[str, CPUSet] | None = None) -> list[str]:
        uids = {p.uid for p in self.rt.pods.values()}
        return check(checkpointed_engine(self.tmp), self.rt, uids, before)

    async def next_session(self, old: object) -> api.SynchronizeResponse:
        """Wait for a new registered session; apply its Synchronize reply; return the reply."""
        await self.daemon.wait_new_session(self.sim, old)
        session = await self.sim.wait_registered(timeout=30)
        assert session.sync_reply is not None
        self.rt.apply_updates(session.sync_reply.update)
        await self.rt.settle(timeout=2.0)
        return session.sync_reply


@contextlib.asynccontextmanager
async def node(tmp: Path, **sim_kwargs: object) -> AsyncIterator[Node]:
    daemon = ForkedDaemon(prepare(tmp))
    sim = await NRISimulator.start(str(tmp / "nri.sock"), **sim_kwargs)  # type: ignore[arg-type]
    daemon.start()
    try:
        await sim.wait_registered(timeout=60)
        yield Node(tmp, sim, FakeRuntime(sim), daemon)
        assert await daemon.terminate() == 0
    finally:
        await daemon.kill()
        await sim.close()


def test_containerd_restart_resyncs_without_lost_or_duplicated_allocations(
    tmp_path: Path,
) -> None:
    async def main() -> None:
        async with node(tmp_path) as n:
            for spec in pods("before", 9):
                await n.rt.launch(spec)
            await n.rt.settle()
            before = exclusive_cpus(n.rt)
            decided = checkpointed_engine(tmp_path).assignments()
            assert n.problems() == []
            # containerd restarts: connection dropped, socket gone for 1.5 s (the plugin's
            # reconnect attempts fail meanwhile), then the same pods and containers reported
            pods_now, ctrs_now = n.rt.sync_lists()
            old = n.sim.session
            await n.sim.restart(pods_now, ctrs_now, downtime=1.5)
            reply = await n.next_session(old)
            assert n.sim.sessions == 2
            assert list(reply.update) == [], "nothing had changed, nothing to correct"
            assert checkpointed_engine(tmp_path).assignments() == decided
            assert n.problems(before) == []
            # and the plugin serves new pods on the new connection
            for spec in pods("after", 3):
                await n.rt.launch(spec)
            await n.rt.settle()
            assert n.problems(before) == []

    asyncio.run(main())


def test_containerd_restart_with_containers_gone_meanwhile(tmp_path: Path) -> None:
    """Containers that exited while containerd was down are not reported again: their CPUs
    are released (no leaked reservation) and the survivors keep theirs."""

    async def main() -> None:
        async with node(tmp_path) as n:
            launched = [await n.rt.launch(spec) for spec in pods("p", 9)]
            await n.rt.settle()
            gone = launched[0]  # a pod-level pod: budget and exclusive slice must come back
            for cid in [c for c, r in n.rt.containers.items() if r.msg.pod_sandbox_id == gone.id]:
                del n.rt.containers[cid]
            del n.rt.pods[gone.id]
            before = exclusive_cpus(n.rt)
            old = n.sim.session
            await n.sim.restart(*n.rt.sync_lists(), downtime=0.3)
            await n.next_session(old)
            engine = checkpointed_engine(tmp_path)
            assert gone.uid not in engine.pods()
            assert n.problems(before) == []

    asyncio.run(main())


def test_paged_synchronize_after_plugin_restart(tmp_path: Path) -> None:
    """The runtime reports 36 pods in several Synchronize pages (``more``): the restarted
    plugin answers each page, reconciles once at the end and keeps every exclusive CPU."""

    async def main() -> None:
        async with node(tmp_path, max_message_len=24_000) as n:
            for spec in pods("page", 36):
                await n.rt.launch(spec)
            await n.rt.settle()
            before = exclusive_cpus(n.rt)
            assert len(before) >= 10, before
            await n.daemon.kill()
            n.sim.pods, n.sim.containers = n.rt.sync_lists()
            old = n.sim.session
            n.daemon.start()
            reply = await n.next_session(old)
            session = n.sim.session
            assert session is not None and len(session.sync_pages) >= 3
            assert [p.more for p in session.sync_pages][-1] is False
            assert list(reply.update) == []
            assert n.problems(before) == []

    asyncio.run(main())


def test_paged_synchronize_without_checkpoint_adopts_everything(tmp_path: Path) -> None:
    """Same, with the state directory wiped: every container is adopted from the pages and
    pinned by the final reply; exclusive sets stay disjoint."""

    async def main() -> None:
        async with node(tmp_path, max_message_len=24_000) as n:
            for spec in pods("page", 36):
                await n.rt.launch(spec)
            await n.rt.settle()
            await n.daemon.kill()
            for f in (tmp_path / "state").iterdir():
                f.unlink()
            n.sim.pods, n.sim.containers = n.rt.sync_lists()
            old = n.sim.session
            n.daemon.start()
            await n.next_session(old)
            session = n.sim.session
            assert session is not None and len(session.sync_pages) >= 2
            engine = checkpointed_engine(tmp_path)
            assert set(engine.pods()) == {p.uid for p in n.rt.pods.values()}
            assert n.problems() == []

    asyncio.run(main())


def test_kubelet_update_overwriting_a_pinned_cpuset_is_reasserted(tmp_path: Path) -> None:
    """The kubelet (managers off) sends UpdateContainer with its own view: every CPU and the
    container's CFS quota. The reply pins the container back and keeps quota disabled."""

    async def main() -> None:
        async with node(tmp_path) as n:
            for spec in pods("k", 6):
                await n.rt.launch(spec)
            await n.rt.settle()
            before = exclusive_cpus(n.rt)
            for cid in sorted(before):
                kubelet = api.LinuxResources()
                kubelet.CopyFrom(n.rt.containers[cid].msg.linux.resources)
                kubelet.cpu.cpus = "0-63"
                assert kubelet.cpu.quota.value > 0
                resp = await n.rt.update(cid, kubelet)
                assert [u.container_id for u in resp.update] == [cid]
                assert n.rt.containers[cid].cpus == before[cid]
                assert n.rt.containers[cid].applied.quota == -1
            shared = [c for c, r in n.rt.containers.items() if c not in before]
            kubelet = api.LinuxResources()
            kubelet.cpu.cpus = str(next(iter(before.values())))
            for cid in shared:
                await n.rt.update(cid, kubelet)
            assert n.problems(before) == []

    asyncio.run(main())
