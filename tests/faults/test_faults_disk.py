"""The state directory cannot be written (issue 7, fault 1): a decision is refused with a clear
error and never applied without being durable; releases carry on; the plugin recovers when the
disk does, and a SIGKILL in the middle of it all loses nothing.

"Disk full" is a real write failure of the daemon process: ``RLIMIT_FSIZE`` set on it from the
outside (``prlimit``) makes every write past the limit fail with ``EFBIG`` exactly where a full
disk fails with ``ENOSPC`` (CPython ignores ``SIGXFSZ``). A read-only state directory is
checked at start-up, where the daemon must refuse to run rather than decide without a
checkpoint.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fault_daemon import ForkedDaemon, checkpointed_engine, prepare
from nrisim import NRISimulator
from plrm_invariants import check, exclusive_cpus
from plrm_runtime import FakeRuntime

from nri_plrm.engine.spec import ContainerKind, ContainerSpec, PodSpec
from nri_plrm.ttrpc.messages import TtrpcError

GI = 1 << 30


def pod(uid: str) -> PodSpec:
    one = {"cpu": 2000, "memory": GI}
    budget = {"cpu": 3000, "memory": 2 * GI}
    return PodSpec(
        uid=uid,
        name=uid,
        init_containers=(ContainerSpec("proxy", ContainerKind.SIDECAR),),
        containers=(ContainerSpec("main", requests=one, limits=one),),
        requests=budget,
        limits=budget,
    )


def test_disk_full_refuses_decisions_keeps_releases_and_recovers(tmp_path: Path) -> None:
    daemon = ForkedDaemon(prepare(tmp_path))

    async def main() -> None:
        sim = await NRISimulator.start(str(tmp_path / "nri.sock"))
        rt = FakeRuntime(sim)
        daemon.start()
        try:
            await sim.wait_registered(timeout=60)
            kept = [await rt.launch(pod(f"ok-{i}")) for i in range(3)]
            await rt.settle()
            before = exclusive_cpus(rt)

            daemon.limit_file_size(1)  # the disk is full from now on
            with pytest.raises(TtrpcError) as refused:
                await rt.launch(pod("refused"))
            message = str(refused.value)
            assert "decision not applied" in message, message
            assert str(tmp_path / "state") in message, message
            assert "File too large" in message, message
            assert {p.uid for p in rt.pods.values()} == {p.uid for p in kept}
            # a new container of an admitted pod is refused the same way
            spec = pod("ok-0")
            extra = ContainerSpec("late")
            with pytest.raises(TtrpcError, match="decision not applied"):
                await rt.create(kept[0], spec, extra)
            # releases are answered (containerd ignores their errors anyway) and kept in memory
            await rt.remove_pod(kept.pop())
            await rt.settle()

            daemon.limit_file_size(None)  # space freed: decisions work again, no restart
            kept.append(await rt.launch(pod("after")))
            await rt.settle()
            assert len(rt.cpus_of(kept[-1], "main")) == 2
            assert rt.applied(kept[-1], "main").quota == -1

            # SIGKILL now: the durable state must match what the runtime applied
            await daemon.kill()
            sim.pods, sim.containers = rt.sync_lists()
            old = sim.session
            daemon.start()
            await daemon.wait_new_session(sim, old)
            session = await sim.wait_registered(timeout=30)
            assert session.sync_reply is not None
            rt.apply_updates(session.sync_reply.update)
            await rt.settle()
            uids = {p.uid for p in rt.pods.values()}
            engine = checkpointed_engine(tmp_path)
            assert "refused" not in engine.pods()
            still = {c: cpus for c, cpus in before.items() if c in rt.containers}
            assert check(engine, rt, uids, still) == []
            assert await daemon.terminate() == 0
        finally:
            await daemon.kill()
            await sim.close()

    asyncio.run(main())


def test_disk_full_at_every_decision_of_a_pod_then_sigkill(tmp_path: Path) -> None:
    """The disk fills up before each step of a pod's creation in turn (sandbox, sidecar,
    main); whatever was refused is absent after a SIGKILL and restart, whatever was applied
    is present with the same CPUs."""
    daemon = ForkedDaemon(prepare(tmp_path))

    async def main() -> None:
        sim = await NRISimulator.start(str(tmp_path / "nri.sock"))
        rt = FakeRuntime(sim)
        daemon.start()
        try:
            await sim.wait_registered(timeout=60)
            for step in range(3):
                spec = pod(f"step-{step}")
                daemon.limit_file_size(None)
                sandbox = None
                for i, ctr in enumerate((None, *spec.init_containers, *spec.containers)):
                    if i == step:
                        daemon.limit_file_size(1)
                    with contextlib.suppress(TtrpcError):
                        if ctr is None:
                            sandbox = await rt.run_pod(spec)
                        elif sandbox is not None:
                            await rt.create(sandbox, spec, ctr)
                assert all(r.applied.cpus for r in rt.containers.values())
                before = exclusive_cpus(rt)
                await daemon.kill()
                sim.pods, sim.containers = rt.sync_lists()
                old = sim.session
                daemon.start()
                await daemon.wait_new_session(sim, old)
                session = await sim.wait_registered(timeout=30)
                assert session.sync_reply is not None
                rt.apply_updates(session.sync_reply.update)
                await rt.settle()
                uids = {p.uid for p in rt.pods.values()}
                problems = check(checkpointed_engine(tmp_path), rt, uids, before)
                assert problems == [], f"disk full at step {step}:\n" + "\n".join(problems)
            assert await daemon.terminate() == 0
        finally:
            await daemon.kill()
            await sim.close()

    asyncio.run(main())


def test_read_only_state_directory_refuses_to_start(tmp_path: Path) -> None:
    """A state directory the daemon cannot write: it exits with an error naming the directory
    instead of making decisions it could not keep. Root ignores permission bits, so as root
    the directory is a read-only bind mount; without root it is mode 0500."""
    config = prepare(tmp_path)
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    mounted = False
    if os.geteuid() == 0:
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "ro,mode=0700,size=1m", "nri-plrm-ro", str(state)],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            pytest.skip(f"root without mount rights, cannot make a read-only dir: {done.stderr}")
        mounted = True
    else:
        state.chmod(0o500)
    try:
        run = subprocess.run(
            [sys.executable, "-m", "nri_plrm.daemon.service", "--config", str(config)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        if mounted:
            subprocess.run(["umount", str(state)], check=True)
        else:
            state.chmod(0o700)
    assert run.returncode != 0
    assert str(state) in run.stderr, run.stderr
    assert "Traceback" not in run.stderr, run.stderr


def budget_pod(uid: str) -> PodSpec:
    """A budget pod whose first container (no resources) is promoted, then demoted by the
    second (issue 28)."""
    budget = {"cpu": 4000, "memory": 2 * GI}
    return PodSpec(
        uid=uid,
        name=uid,
        requests=budget,
        limits=budget,
        containers=(ContainerSpec("app"), ContainerSpec("logger")),
    )


def journal_lines(tmp: Path) -> list[bytes]:
    return (tmp / "state" / "journal.jsonl").read_bytes().splitlines(keepends=True)


def test_disk_full_at_a_demotion_leaves_the_pod_promoted_as_it_runs(
    tmp_path: Path,
) -> None:
    """The disk fills up while a demotion is written. The demotion and the second container's
    placement are one decision (one ``readmit`` record, issue 27), so both are refused
    together: the pod stays promoted, as the runtime still runs its first container (quota
    -1), and a restart (after a SIGKILL) and its Synchronize find it so. Before, the demotion
    could be written without the placement, leaving the pod demoted while the first container
    ran unthrottled until Synchronize repaired it (issue 28)."""
    gates = tmp_path / "gates"
    gates.mkdir()
    (gates / "hold").touch()  # no fold replaces the journal while its lines are counted
    daemon = ForkedDaemon(prepare(tmp_path))

    async def main() -> None:
        sim = await NRISimulator.start(str(tmp_path / "nri.sock"))
        rt = FakeRuntime(sim)
        daemon.start(hold_folds=(gates, "write"))
        try:
            await sim.wait_registered(timeout=60)
            for i in range(4):
                await rt.launch(pod(f"filler-{i}"))
            # a dry run measures the demotion's journal line
            dry = budget_pod("dry-run-0")
            sandbox = await rt.run_pod(dry)
            await rt.create(sandbox, dry, dry.containers[0])
            before = len(journal_lines(tmp_path))
            await rt.create(sandbox, dry, dry.containers[1])
            (demoted,) = journal_lines(tmp_path)[before:]
            assert b'"readmit"' in demoted and b'"demote"' in demoted

            spec = budget_pod("full-run-0")
            sandbox = await rt.run_pod(spec)
            await rt.create(sandbox, spec, spec.containers[0])
            assert rt.applied(sandbox, "app").quota == -1  # promoted
            size = (tmp_path / "state" / "journal.jsonl").stat().st_size
            daemon.limit_file_size(size + len(demoted) // 2)
            with pytest.raises(TtrpcError, match="decision not applied"):
                await rt.create(sandbox, spec, spec.containers[1])
            # at most a torn line after the promotion: the demotion was never decided
            full_run = [line for line in journal_lines(tmp_path) if b'"full-run-0"' in line]
            assert b'"promote"' in full_run[-1] and b'"demote"' not in b"".join(full_run)
            assert rt.applied(sandbox, "app").quota == -1
            daemon.limit_file_size(None)

            await daemon.kill()
            sim.pods, sim.containers = rt.sync_lists()
            old = sim.session
            (gates / "hold").unlink()
            daemon.start()
            await daemon.wait_new_session(sim, old)
            session = await sim.wait_registered(timeout=30)
            assert session.sync_reply is not None
            rt.apply_updates(session.sync_reply.update)
            await rt.settle()
            assert rt.applied(sandbox, "app").quota == -1
            engine = checkpointed_engine(tmp_path)
            app = engine.assignment(spec.uid, "app")
            assert app is not None and app.exclusive
            assert engine.assignment(spec.uid, spec.containers[1].name) is None
            assert rt.cpus_of(sandbox, "app") == app.cpus
            uids = {p.uid for p in rt.pods.values()}
            assert check(engine, rt, uids) == []
            assert await daemon.terminate() == 0
        finally:
            await daemon.kill()
            await sim.close()

    asyncio.run(main())
