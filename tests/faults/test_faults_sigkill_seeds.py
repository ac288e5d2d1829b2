"""The daemon SIGKILLed at a random moment of a churn, once per seed (50 seeds), restarted (for
a third of the seeds killed again while starting up), and the node checked after every restart
(issue 7, fault 1).

The daemon is the real entry point (``nri_plrm.daemon.service.main``) forked from a preloaded
forkserver (``fault_daemon``), so a restart costs a fork, topology discovery, checkpoint
restore and the NRI handshake, not an interpreter start. The runtime (``nrisim`` + ``FakeRuntime``)
carries on while the plugin is dead, exactly as containerd does: requests in flight fail, pods
are created and removed without the plugin. After each restart the invariants of
``plrm_invariants.check`` must hold: no CPU in two exclusive sets, every running container
applied what the checkpointed engine decided, containers pinned before the kill keep their
CPUs, no state held for pods the runtime no longer has, the node shared pool equal to a fresh
computation (no leaked reservations).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from multiprocessing.process import BaseProcess
from pathlib import Path

from fault_daemon import ForkedDaemon, checkpointed_engine, prepare
from nrisim import NRISimulator
from plrm_invariants import check, exclusive_cpus
from plrm_runtime import FakeRuntime

from nri_plrm.base.cpuset import CPUSet
from nri_plrm.engine.spec import ContainerKind, ContainerSpec, PodSpec
from nri_plrm.proto import nri_api_pb2 as api
from nri_plrm.ttrpc.messages import TtrpcError

SEEDS = tuple(range(7001, 7051))
"""One SIGKILL per seed; the seed fixes the churn, the delay before the kill, a second kill
during start-up and the changes made while the plugin is away. A failure names its seed."""
MAX_LIVE = 8
GI = 1 << 30


def guaranteed(name: str, cpus: int, kind: ContainerKind = ContainerKind.APP) -> ContainerSpec:
    res = {"cpu": cpus * 1000, "memory": GI}
    return ContainerSpec(name, kind, requests=res, limits=res)


def pod_shape(uid: str, rng: random.Random) -> PodSpec:
    """One of five pod shapes, drawn from ``rng``."""
    kind = rng.randrange(5)
    if kind == 0:
        budget = {"cpu": 4000, "memory": 4 * GI}
        return PodSpec(
            uid=uid,
            name=uid,
            init_containers=(ContainerSpec("sidecar", ContainerKind.SIDECAR),),
            containers=(guaranteed("main", rng.choice((1, 2, 3))),),
            requests=budget,
            limits=budget,
        )
    if kind == 1:
        return PodSpec(
            uid=uid,
            name=uid,
            init_containers=(guaranteed("init", 1, ContainerKind.INIT),),
            containers=(guaranteed("web", rng.choice((1, 2))), guaranteed("cache", 1)),
        )
    if kind == 2:
        two = {"cpu": 2000, "memory": GI}
        return PodSpec(
            uid=uid,
            name=uid,
            containers=(ContainerSpec("a"), ContainerSpec("b")),
            requests=two,
            limits=two,
        )
    if kind == 3:
        return PodSpec(uid=uid, name=uid, containers=(ContainerSpec("batch"),))
    return PodSpec(uid=uid, name=uid, containers=(ContainerSpec("burst", requests={"cpu": 500}),))


async def churn_step(rt: FakeRuntime, rng: random.Random, live: list[str], uid: str) -> None:
    """Launch a pod, remove one, or stop (exit) a running container, as ``rng`` says."""
    action = rng.random()
    if (action < 0.55 or not live) and len(live) < MAX_LIVE:
        spec = pod_shape(uid, rng)
        with contextlib.suppress(TtrpcError):  # rejected (node full): the kubelet gives up
            await rt.launch(spec)
        live.extend(p.id for p in rt.pods.values() if p.uid == uid)
    elif action < 0.85 or len(live) >= MAX_LIVE:
        victim = live.pop(rng.randrange(len(live)))
        await rt.remove_pod(rt.pods[victim])
    else:
        running = [c for c, r in rt.containers.items() if r.msg.state == api.CONTAINER_RUNNING]
        if running:
            await rt.stop(rng.choice(sorted(running)))


async def kill_after(proc: ForkedDaemon, victim: BaseProcess, delay: float) -> None:
    """SIGKILL ``victim`` after ``delay`` seconds. The victim is fixed when the kill is
    scheduled: a kill reading the current process when it lands could hit the next daemon."""
    await asyncio.sleep(delay)
    await proc.kill(victim)


async def one_kill(
    seed: int, sim: NRISimulator, rt: FakeRuntime, proc: ForkedDaemon, live: list[str]
) -> dict[str, CPUSet]:
    """Churn until the plugin dies at the seed's moment; containerd carries on without it."""
    rng = random.Random(seed)
    before = exclusive_cpus(rt)
    victim = proc.proc
    assert victim is not None
    killer = asyncio.get_running_loop().create_task(
        kill_after(proc, victim, rng.uniform(0.0, 0.04))
    )
    step = 0
    while not killer.done() and step < 40:
        await churn_step(rt, rng, live, f"s{seed}-{step}")
        step += 1
    await killer  # the victim is dead and reaped: nothing of this kill outlives it
    for k in range(rng.randrange(3)):  # changes while the plugin is away
        await churn_step(rt, rng, live, f"s{seed}-away-{k}")
    return before


async def restart(seed: int, sim: NRISimulator, rt: FakeRuntime, proc: ForkedDaemon) -> None:
    """Start the plugin again; for about a third of the seeds, kill it once more while it is
    starting (discovery, restore, registration or the Synchronize) and start it again."""
    rng = random.Random(seed * 7919)
    sim.pods, sim.containers = rt.sync_lists()
    old = sim.session
    proc.start()
    if rng.random() < 0.35:
        await asyncio.sleep(rng.uniform(0.0, 0.15))
        await proc.kill()
        old = sim.session
        proc.start()
    await proc.wait_new_session(sim, old)
    session = await sim.wait_registered(timeout=30)
    assert session.sync_reply is not None
    rt.apply_updates(session.sync_reply.update)
    await rt.settle(timeout=2.0)


def test_sigkill_at_random_points_of_a_churn_50_seeds(tmp_path: Path) -> None:
    proc = ForkedDaemon(prepare(tmp_path))

    async def main() -> None:
        sim = await NRISimulator.start(str(tmp_path / "nri.sock"))
        rt = FakeRuntime(sim)
        live: list[str] = []
        proc.start()
        try:
            await sim.wait_registered(timeout=60)
            interrupted = 0
            for seed in SEEDS:
                sent = len(sim.records)
                before = await one_kill(seed, sim, rt, proc, live)
                interrupted += any(r.error is not None for r in sim.records[sent:])
                await restart(seed, sim, rt, proc)
                uids = {p.uid for p in rt.pods.values()}
                problems = check(checkpointed_engine(tmp_path), rt, uids, before)
                assert problems == [], f"seed {seed} (of {SEEDS}):\n" + "\n".join(problems)
            # most kills must land while a request is in flight, or the test proves little
            assert interrupted >= len(SEEDS) // 2, f"only {interrupted} kills interrupted a request"
            print(f"{interrupted} of {len(SEEDS)} kills interrupted a request")
            assert await proc.terminate() == 0
        finally:
            with contextlib.suppress(Exception):
                await proc.kill()
            await sim.close()

    asyncio.run(main())
