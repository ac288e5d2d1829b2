"""State and socket permissions, and objects planted in the state directory (docs/security.md).

- The running daemon keeps its state directory 0700 and every file in it 0600, owned by it;
  the PodResources socket is 0600, or 0660 with the configured group; other modes are refused.
- Symlinks planted under every name the plugin writes or reads in the state directory (the
  checkpoint, the journal, their temporary and quarantine names) pointing at a file outside are
  never followed: the outside file is neither read into the state nor written. A FIFO in place
  of a file never blocks start-up. A symlinked state directory is refused.
"""

from __future__ import annotations

import asyncio
import contextlib
import grp
import os
import signal
import stat
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from fakesysfs import write_sysfs
from nrisim import NRISimulator
from plrm_runtime import FakeRuntime

from nri_plrm.checkpoint.store import CheckpointError, CheckpointStore
from nri_plrm.config.file import parse_config
from nri_plrm.config.settings import Config, ConfigError
from nri_plrm.daemon import service as daemon
from nri_plrm.engine.facade import Engine
from nri_plrm.engine.spec import ContainerKind, ContainerSpec, PodSpec
from nri_plrm.ledger import NodeLedger
from nri_plrm.plugin.handlers import Plugin
from nri_plrm.topology.machines import MACHINES
from nri_plrm.translate.pod_to_cri import creation_order, nri_container, nri_pod_sandbox

POD_SCOPE = '[topology_manager]\npolicy = "single-numa-node"\nscope = "pod"\n'
GI = 1 << 30
JOURNAL_FILE = "journal.jsonl"
"""The decision journal in the state directory (a documented name, docs/security.md)."""
BUDGET = {"cpu": 4000, "memory": 4 * GI}
TWO = {"cpu": 2000, "memory": 2 * GI}


def mixed_pod(uid: str) -> PodSpec:
    return PodSpec(
        uid=uid,
        name=uid,
        init_containers=(ContainerSpec("proxy", ContainerKind.SIDECAR),),
        containers=(ContainerSpec("main", requests=TWO, limits=TWO),),
        requests=BUDGET,
        limits=BUDGET,
    )


def private(path: Path) -> list[str]:
    """Every entry under ``path`` that is not private to this process's uid."""
    problems = []
    st = path.lstat()
    if stat.S_IMODE(st.st_mode) != 0o700 or st.st_uid != os.geteuid():
        problems.append(f"{path}: mode {stat.S_IMODE(st.st_mode):04o} uid {st.st_uid}")
    for entry in path.iterdir():
        st = entry.lstat()
        if not stat.S_ISREG(st.st_mode):
            problems.append(f"{entry}: not a regular file")
        elif stat.S_IMODE(st.st_mode) != 0o600 or st.st_uid != os.geteuid():
            problems.append(f"{entry}: mode {stat.S_IMODE(st.st_mode):04o} uid {st.st_uid}")
    return problems


@contextlib.asynccontextmanager
async def daemon_running(
    tmp: Path, pod_resources: str = ""
) -> AsyncIterator[tuple[Config, FakeRuntime]]:
    """The real daemon (in-process) with PodResources on, the given ``[pod_resources]`` keys."""
    write_sysfs(MACHINES["default"], str(tmp / "sys"))
    config = parse_config(
        f"""
[nri]
socket = "{tmp}/nri.sock"
[state]
dir = "{tmp}/state"
kubelet_cpu_manager_state = "{tmp}/kubelet/cpu_manager_state"
[pod_resources]
socket = "{tmp}/run/pod-resources.sock"
{pod_resources}
[metrics]
address = ""
[topology]
sysfs_root = "{tmp}/sys"
{POD_SCOPE}
""",
        str(tmp / "config.toml"),
    )
    sim = await NRISimulator.start(config.nri.socket)
    ready = asyncio.Event()
    task = asyncio.get_running_loop().create_task(daemon.run(config, on_ready=ready.set))
    try:
        await asyncio.wait_for(ready.wait(), 20)
        yield config, FakeRuntime(sim)
    finally:
        if not task.done():
            os.kill(os.getpid(), signal.SIGTERM)
        code = await asyncio.wait_for(task, 20)
        await sim.close()
        assert code == 0, f"daemon exited with {code}"


def test_running_daemon_keeps_state_private_and_socket_0600(tmp_path: Path) -> None:
    async def main() -> None:
        old = os.umask(0o022)  # the daemon must not rely on a strict umask from its caller
        try:
            async with daemon_running(tmp_path) as (config, rt):
                for i in range(3):
                    await rt.launch(mixed_pod(f"sec-{i}"))
                await rt.settle()
                state = Path(config.state.dir)
                assert {p.name for p in state.iterdir()} >= {"state.json", JOURNAL_FILE}
                assert private(state) == []
                sock = Path(config.pod_resources.socket).lstat()
                assert stat.S_ISSOCK(sock.st_mode)
                assert stat.S_IMODE(sock.st_mode) == 0o600
        finally:
            os.umask(old)

    asyncio.run(main())


def test_group_socket_is_0660_with_the_group(tmp_path: Path) -> None:
    group = grp.getgrgid(os.getegid()).gr_name

    async def main() -> None:
        async with daemon_running(tmp_path, f'mode = "0660"\ngroup = "{group}"') as (config, _):
            sock = Path(config.pod_resources.socket).lstat()
            assert stat.S_IMODE(sock.st_mode) == 0o660
            assert sock.st_gid == os.getegid()

    asyncio.run(main())


@pytest.mark.parametrize("mode", ["0666", "0644", "0777", "0700", "0604"])
def test_socket_modes_other_than_0600_and_0660_are_refused(mode: str) -> None:
    with pytest.raises(ConfigError, match=r"pod_resources\.mode"):
        parse_config(f'[pod_resources]\nmode = "{mode}"\n')


def populated_plugin(state: Path) -> Plugin:
    """A plugin on ``state`` holding one pod-level pod (decisions checkpointed/journaled)."""
    engine = Engine(MACHINES["default"], parse_config(POD_SCOPE).engine_config())
    plugin = Plugin(NodeLedger(engine, store=CheckpointStore(state)))
    plugin.ledger.open()
    spec = mixed_pod("victim")

    async def fill() -> None:
        sandbox = nri_pod_sandbox(spec)
        await plugin.run_pod_sandbox(sandbox)
        for ctr in creation_order(spec):
            await plugin.create_container(sandbox, nri_container(spec, ctr))

    asyncio.run(fill())
    return plugin


def life(plugin: Plugin) -> None:
    """Decisions, a release and a compaction: every write path of the state directory."""
    spec = mixed_pod("own")

    async def go() -> None:
        sandbox = nri_pod_sandbox(spec)
        await plugin.run_pod_sandbox(sandbox)
        for ctr in creation_order(spec):
            await plugin.create_container(sandbox, nri_container(spec, ctr))
        plugin.remove_pod_sandbox(sandbox)
        await plugin.run_pod_sandbox(sandbox)

    asyncio.run(go())
    plugin.ledger.compact()


PLANTED = [
    "state.json",
    JOURNAL_FILE,
    ".state.json.tmp",
    f".{JOURNAL_FILE}.tmp",
    "state.json.corrupt-1",
    f"{JOURNAL_FILE}.corrupt-1",
]


@pytest.mark.parametrize("name", PLANTED)
def test_planted_symlinks_are_never_followed(tmp_path: Path, name: str) -> None:
    # the outside file is a real, valid state directory's file: following the link would
    # either adopt the "victim" pod or overwrite the file
    other = tmp_path / "other"
    populated_plugin(other)
    source = other / ("state.json" if "state" in name else JOURNAL_FILE)
    victim = tmp_path / "victim"
    victim.write_bytes(source.read_bytes())
    original = victim.read_bytes()
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    os.symlink(victim, state / name)

    engine = Engine(MACHINES["default"], parse_config(POD_SCOPE).engine_config())
    plugin = Plugin(NodeLedger(engine, store=CheckpointStore(state)))
    plugin.ledger.open()
    assert "victim" not in plugin.ledger.engine.pods()
    life(plugin)
    assert victim.read_bytes() == original
    assert "victim" not in plugin.ledger.engine.pods()
    assert plugin.ledger.engine.verify() == []
    links = [p for p in state.iterdir() if p.is_symlink()]
    for link in links:  # a link may stay (moved aside or unused), never be written through
        assert os.readlink(link) == str(victim)


@pytest.mark.parametrize("name", ["state.json", JOURNAL_FILE])
def test_fifo_in_the_state_directory_does_not_block_start_up(tmp_path: Path, name: str) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    os.mkfifo(state / name, 0o600)
    engine = Engine(MACHINES["default"], parse_config(POD_SCOPE).engine_config())
    plugin = Plugin(NodeLedger(engine, store=CheckpointStore(state)))
    outcome: list[object] = []
    worker = threading.Thread(target=lambda: outcome.append(plugin.ledger.open()), daemon=True)
    worker.start()
    worker.join(timeout=10)
    assert not worker.is_alive(), f"start-up blocked opening the FIFO {state / name}"
    assert outcome and isinstance(outcome[0], str) and name in outcome[0]
    life(plugin)
    assert plugin.ledger.engine.verify() == []


def test_symlinked_state_directory_is_refused(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    link = tmp_path / "state"
    link.symlink_to(real)
    engine = Engine(MACHINES["default"], parse_config(POD_SCOPE).engine_config())
    plugin = Plugin(NodeLedger(engine, store=CheckpointStore(link)))
    with pytest.raises(CheckpointError, match="symlink"):
        plugin.ledger.open()
    assert list(real.iterdir()) == []
