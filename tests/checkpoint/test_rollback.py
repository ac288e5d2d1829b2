"""Rollback (issue 31 item 12): the state directory this code writes is read by the previous
release's code exactly as it was decided, or refused by it with a message naming the state and
nothing changed; never taken as damaged and rebuilt, which would lose every decision.

The previous release is the newest ``v*`` tag below HEAD, else the version this one replaces
(``PREVIOUS_RELEASE``, as docs/operations.md says; there are no release tags yet). Its
``nri_plrm`` is unpacked from git into a scratch directory and run in a subprocess
(``previous_release_reader.py``). Without git history (an
archive, a shallow clone) the test skips.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest
from ledger_decisions import decisions
from plrm_harness import serve

from nri_plrm.checkpoint.store import CheckpointStore
from nri_plrm.config.settings import Config
from nri_plrm.engine.facade import Engine
from nri_plrm.engine.spec import ContainerSpec, PodSpec
from nri_plrm.ledger import NodeLedger, persistence
from nri_plrm.plugin.handlers import Plugin
from nri_plrm.topology.machines import load_topology
from nri_plrm.topology.synthetic import DEFAULT_SPEC
from nri_plrm.translate.manifest_to_pod import load_manifests

REPO = Path(__file__).resolve().parents[2]
READER = Path(__file__).with_name("previous_release_reader.py")
PREVIOUS_RELEASE = "d6b08af"
"""The version this one replaces while there is no release tag (docs/operations.md)."""
EXAMPLES = (
    "pod-scope-mixed.yaml",
    "classic-guaranteed.yaml",
    "besteffort.yaml",
    "tightly-coupled-database.yaml",
)
GI = 1 << 30


def git(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        ["git", "-C", str(REPO), *args], capture_output=True, timeout=60, check=False
    )


def previous_release() -> str:
    """The newest release tag below HEAD (not HEAD's own), else ``PREVIOUS_RELEASE``; skips
    the test when git or that commit is not here."""
    if shutil.which("git") is None or git("rev-parse", "--git-dir").returncode != 0:
        pytest.skip("rollback test: no git repository here (an archive); run it in a clone")
    at_head = set(git("tag", "--points-at", "HEAD").stdout.decode().split())
    tags = git("tag", "--merged", "HEAD", "--sort=-v:refname", "--list", "v[0-9]*")
    older = [tag for tag in tags.stdout.decode().split() if tag not in at_head]
    release = older[0] if older else PREVIOUS_RELEASE
    if git("cat-file", "-e", f"{release}^{{commit}}").returncode != 0:
        pytest.skip(f"rollback test: {release} is not in this clone's history (shallow?)")
    return release


@pytest.fixture(scope="module")
def release_tree(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    """The previous release's ``nri_plrm``, unpacked from git."""
    release = previous_release()
    archive = git("archive", "--format=tar", release, "nri_plrm")
    assert archive.returncode == 0, archive.stderr.decode()
    tree = tmp_path_factory.mktemp(f"release-{release}")
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        if hasattr(tarfile, "data_filter"):
            tar.extractall(tree, filter="data")
        else:  # Python before 3.10.12 / 3.11.4
            tar.extractall(tree)  # our own repository's archive
    return release, tree


def budget_pod() -> PodSpec:
    """A pod-level budget whose first container is promoted, then demoted by the second."""
    res = {"cpu": 4000, "memory": 2 * GI}
    return PodSpec(
        uid="uid-budget",
        name="budget",
        requests=res,
        limits=res,
        containers=(ContainerSpec("app"), ContainerSpec("logger")),
    )


def write_state(
    tmp_path: Path, clean_stop: bool, monkeypatch: pytest.MonkeyPatch
) -> tuple[Path, dict[str, Any]]:
    """Run the examples and a promoted-then-demoted budget pod through this code's plugin;
    the state directory it leaves and what it decided. A crash comes before any idle
    compaction, so the journal still holds every decision, the readmit included."""
    if not clean_stop:
        monkeypatch.setattr(persistence, "IDLE_COMPACT_MIN", 3600.0)
        monkeypatch.setattr(persistence, "IDLE_COMPACT_MAX", 3600.0)
    state = tmp_path / "state"
    engine = Engine(load_topology(DEFAULT_SPEC), Config().engine_config())
    plugin = Plugin(NodeLedger(engine, store=CheckpointStore(state)))
    plugin.ledger.open()
    pods = [*load_manifests([REPO / "examples" / name for name in EXAMPLES]), budget_pod()]

    async def scenario() -> None:
        async with serve(plugin, str(tmp_path / "nri.sock"), clean_stop=clean_stop) as session:
            for pod in pods:
                await session.runtime.launch(pod)
            await session.runtime.settle()

    asyncio.run(scenario())
    if not clean_stop:
        journal = (state / "journal.jsonl").read_text()
        assert '"op":"readmit"' in journal.replace(" ", ""), "the crash left no readmit record"
    return state, decisions(plugin.ledger)


@pytest.mark.parametrize("stop", ["clean", "crash"])
def test_previous_release_reads_this_state_or_refuses_it(
    tmp_path: Path, release_tree: tuple[str, Path], stop: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``crash`` leaves a checkpoint and the journal after it, ``clean`` a checkpoint alone."""
    release, tree = release_tree
    state, expected = write_state(tmp_path, clean_stop=stop == "clean", monkeypatch=monkeypatch)
    assert len(expected) == len(EXAMPLES) + 1
    before = {p.name: p.read_bytes() for p in state.iterdir()}
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run(
        [sys.executable, str(READER), str(state), str(tree)],
        env={**env, "PYTHONPATH": str(tree)},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if proc.returncode == 1:  # refused: the message names the state, nothing is changed
        assert str(state) in proc.stderr and "newer" in proc.stderr, proc.stderr
        assert "Traceback" not in proc.stderr
        assert {p.name: p.read_bytes() for p in state.iterdir()} == before
        return
    assert proc.returncode == 0, (
        f"{release} neither reads this state nor refuses it (exit {proc.returncode}); "
        f"it would lose the decisions: {proc.stderr.strip()}"
    )
    assert json.loads(proc.stdout) == expected
