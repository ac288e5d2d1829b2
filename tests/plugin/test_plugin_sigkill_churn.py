"""The daemon in a subprocess, SIGKILLed at random points during a churn of 200 pods created
and deleted through the runtime simulator, restarted each time; the restart invariants hold
after every restart and at the end (issue 4 acceptance)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import random
import signal
import sys
from pathlib import Path

from fault_daemon import checkpointed_engine, prepare
from nrisim import NRISimulator
from plrm_invariants import check, exclusive_cpus
from plrm_runtime import FakeRuntime

from nri_plrm.base.cpuset import CPUSet
from nri_plrm.engine.spec import ContainerKind, ContainerSpec, PodSpec

GI = 1 << 30
PODS = 200
KILLS = 6
MAX_LIVE = 10


def guaranteed(
    name: str, cpus: int, gi: int, kind: ContainerKind = ContainerKind.APP
) -> ContainerSpec:
    res = {"cpu": cpus * 1000, "memory": gi * GI}
    return ContainerSpec(name, kind, requests=res, limits=res)


def shapes(i: int) -> PodSpec:
    """Pod ``i`` of the churn: five shapes in turn (pod-level mixed, pod-level all shared,
    classic Guaranteed with an init container, BestEffort, Burstable)."""
    uid = f"churn-{i:04d}"
    kind = i % 5
    budget = {"cpu": 4000, "memory": 4 * GI}
    if kind == 0:
        return PodSpec(
            uid=uid,
            name=uid,
            init_containers=(ContainerSpec("sidecar", ContainerKind.SIDECAR),),
            containers=(guaranteed("main", 2, 2),),
            requests=budget,
            limits=budget,
        )
    if kind == 1:
        two = {"cpu": 2000, "memory": GI}
        return PodSpec(
            uid=uid,
            name=uid,
            containers=(ContainerSpec("a"), ContainerSpec("b")),
            requests=two,
            limits=two,
        )
    if kind == 2:
        return PodSpec(
            uid=uid,
            name=uid,
            init_containers=(guaranteed("init", 1, 1, ContainerKind.INIT),),
            containers=(guaranteed("web", 1, 1), guaranteed("cache", 1, 1)),
        )
    if kind == 3:
        return PodSpec(uid=uid, name=uid, containers=(ContainerSpec("batch"),))
    return PodSpec(uid=uid, name=uid, containers=(ContainerSpec("burst", requests={"cpu": 500}),))


class Daemon:
    """``python -m nri_plrm.daemon.service`` in a subprocess."""

    def __init__(self, cfg: Path, log: Path) -> None:
        self.cfg = cfg
        self.log = log
        self.proc: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        env = dict(os.environ)
        env.pop("NOTIFY_SOCKET", None)
        with open(self.log, "ab") as err:
            self.proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "nri_plrm.daemon.service",
                "--config",
                str(self.cfg),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=err,
                stderr=err,
                env=env,
            )

    async def kill(self, proc: asyncio.subprocess.Process | None = None) -> None:
        """SIGKILL and reap ``proc``, by default the current daemon (a kill decided earlier
        names its process: ``start()`` may have replaced the current one since)."""
        proc = self.proc if proc is None else proc
        assert proc is not None
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGKILL)
        await proc.wait()

    async def kill_after(self, victim: asyncio.subprocess.Process, delay: float) -> None:
        """SIGKILL ``victim`` after ``delay`` seconds, even if a new daemon started since."""
        await asyncio.sleep(delay)
        await self.kill(victim)

    async def terminate(self) -> int:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        return await asyncio.wait_for(self.proc.wait(), 10)


def test_sigkill_churn_of_200_pods(tmp_path: Path) -> None:
    cfg = prepare(tmp_path)
    rng = random.Random(20261129)
    kill_at = set(rng.sample(range(10, PODS - 5), KILLS))

    async def restart(sim: NRISimulator, rt: FakeRuntime, daemon: Daemon) -> None:
        sim.pods, sim.containers = rt.sync_lists()
        old = sim.session
        await daemon.start()
        while sim.session is old:
            await asyncio.sleep(0.01)
        session = await sim.wait_registered(timeout=30)
        assert session.sync_reply is not None
        rt.apply_updates(session.sync_reply.update)
        await rt.settle()

    async def verify(rt: FakeRuntime, before: dict[str, CPUSet] | None) -> None:
        uids = {p.uid for p in rt.pods.values()}
        problems = check(checkpointed_engine(tmp_path), rt, uids, before)
        assert problems == [], "\n".join(problems)

    async def main() -> None:
        sim = await NRISimulator.start(str(tmp_path / "nri.sock"))
        rt = FakeRuntime(sim)
        daemon = Daemon(cfg, tmp_path / "daemon.log")
        await daemon.start()
        await sim.wait_registered(timeout=30)
        live: list[tuple[str, PodSpec]] = []
        try:
            for i in range(PODS):
                killer = None
                before = None
                if i in kill_at:
                    before = exclusive_cpus(rt)
                    delay = rng.uniform(0, 0.02)
                    assert daemon.proc is not None
                    killer = asyncio.get_running_loop().create_task(
                        daemon.kill_after(daemon.proc, delay)
                    )
                spec = shapes(i)
                pod = await rt.launch(spec)
                live.append((pod.id, spec))
                if len(live) > MAX_LIVE:
                    victim_id, _ = live.pop(rng.randrange(len(live)))
                    await rt.remove_pod(rt.pods[victim_id])
                if killer is not None:
                    await killer  # the daemon is dead and reaped
                    # containerd carries on without the plugin for a while
                    extra = shapes(PODS + i)
                    pod = await rt.launch(dataclasses.replace(extra, uid=f"away-{i}"))
                    live.append((pod.id, extra))
                    await restart(sim, rt, daemon)
                    await verify(rt, before)
            await rt.settle()
            await verify(rt, None)
            assert await daemon.terminate() == 0
        finally:
            with contextlib.suppress(Exception):
                await daemon.kill()
            await sim.close()

    asyncio.run(main())
