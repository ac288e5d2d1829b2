"""No device flush on the caller's path: the journal, the checkpoint store and the plugin's
requests only write; the Flusher thread syncs in the background, batched, and at close. What a
crash leaves behind (a SIGKILL, a torn or emptied file after a power loss) is recovered."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from nri_plrm.checkpoint.flusher import Flusher
from nri_plrm.checkpoint.journal import JOURNAL_FILE, DecisionJournal
from nri_plrm.checkpoint.store import STATE_FILE, CheckpointStore
from nri_plrm.config.file import parse_config
from nri_plrm.engine.facade import Engine
from nri_plrm.ledger import NodeLedger
from nri_plrm.nri.handlers import NRIError
from nri_plrm.plugin.handlers import Plugin
from nri_plrm.topology.machines import MACHINES
from nri_plrm.translate.manifest_to_pod import load_manifests
from nri_plrm.translate.pod_to_cri import creation_order, nri_container, nri_pod_sandbox

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
CONFIG = '[topology_manager]\npolicy = "single-numa-node"\nscope = "pod"\n'


@dataclass(frozen=True)
class Sync:
    call: str
    thread: str
    target: str


class SyncLog:
    """Every fsync/fdatasync of the process: which call, from which thread, on which file."""

    def __init__(self) -> None:
        self.calls: list[Sync] = []
        self.lock = threading.Lock()

    def wrap(self, name: str, real: Any) -> Any:
        def recorded(fd: int) -> None:
            target = os.readlink(f"/proc/self/fd/{fd}")
            with self.lock:
                self.calls.append(Sync(name, threading.current_thread().name, target))
            real(fd)

        return recorded

    def on(self, thread: str) -> list[Sync]:
        with self.lock:
            return [c for c in self.calls if c.thread == thread]


@pytest.fixture
def syncs(monkeypatch: pytest.MonkeyPatch) -> Iterator[SyncLog]:
    log = SyncLog()
    monkeypatch.setattr(os, "fsync", log.wrap("fsync", os.fsync))
    monkeypatch.setattr(os, "fdatasync", log.wrap("fdatasync", os.fdatasync))
    yield log


def _main() -> str:
    return threading.current_thread().name


def test_journal_appends_never_sync_on_the_callers_thread(tmp_path: Path, syncs: SyncLog) -> None:
    journal = DecisionJournal(tmp_path, flusher=Flusher(interval=0.01))
    journal.reset(1)
    for n in range(50):
        journal.append({"op": "remove", "cid": f"c{n}"})
    assert syncs.on(_main()) == []
    journal.flush()
    background = [c for c in syncs.calls if c.target == str(tmp_path / JOURNAL_FILE)]
    assert background and all(c.thread == "nri-plrm-flusher" for c in background)
    assert any(c.call == "fdatasync" for c in background)
    assert any(c.call == "fsync" and c.target == str(tmp_path) for c in syncs.calls)
    journal.close()
    assert syncs.on(_main()) == []
    generation, records, problem = DecisionJournal(tmp_path).read()
    assert (generation, len(records), problem) == (1, 50, None)


def open_under(directory: Path) -> list[str]:
    """This process's descriptors open on ``directory`` or a file in it (counting all of them
    instead would see other tests' flusher threads still closing theirs)."""
    found = []
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/self/fd/{fd}")
            if target == str(directory) or target.startswith(f"{directory}/"):
                found.append(target)
    return found


def test_flushes_are_batched(tmp_path: Path, syncs: SyncLog) -> None:
    journal = DecisionJournal(tmp_path, flusher=Flusher(interval=0.5))
    journal.reset(1)
    journal.flush()
    before = len(syncs.calls)
    for n in range(200):
        journal.append({"op": "remove", "cid": f"c{n}"})
    journal.flush()
    assert [c.call for c in syncs.calls[before:]] == ["fdatasync"]
    journal.close()


def test_close_makes_pending_appends_durable_and_releases_descriptors(
    tmp_path: Path, syncs: SyncLog
) -> None:
    journal = DecisionJournal(tmp_path, flusher=Flusher(interval=60.0))
    for generation in range(1, 4):
        journal.reset(generation)
        journal.append({"op": "remove", "cid": "c"})
    assert syncs.calls == []  # a minute's batching: nothing synced yet
    journal.close()
    journal_syncs = [c for c in syncs.calls if c.target == str(tmp_path / JOURNAL_FILE)]
    assert journal_syncs and journal_syncs[-1].call == "fdatasync"
    assert open_under(tmp_path) == []


def test_descriptors_are_closed_once_while_the_thread_syncs_them(tmp_path: Path) -> None:
    """Resets release the old file while the thread may be syncing it: no leak, no double
    close (which would close a descriptor reused by the next open)."""
    journal = DecisionJournal(tmp_path, flusher=Flusher(interval=0.0))
    for generation in range(1, 301):
        journal.reset(generation)
        for n in range(3):
            journal.append({"op": "remove", "cid": f"g{generation}-{n}"})
    journal.close()
    assert open_under(tmp_path) == []
    generation, records, problem = DecisionJournal(tmp_path).read()
    assert (generation, problem) == (300, None)
    assert [r["cid"] for r in records] == ["g300-0", "g300-1", "g300-2"]


def test_checkpoint_save_defers_its_fsyncs(tmp_path: Path, syncs: SyncLog) -> None:
    store = CheckpointStore(tmp_path / "state", flusher=Flusher(interval=0.01))
    store.save({"a": 1})
    store.save({"a": 2})
    assert syncs.on(_main()) == []
    assert store.load().data == {"a": 2}  # in the page cache: readable at once
    store.close()
    state = str(tmp_path / "state" / STATE_FILE)
    flushed = [c for c in syncs.calls if c.thread == "nri-plrm-flusher"]
    assert any(c.call == "fsync" and c.target == state for c in flushed)
    assert any(c.call == "fsync" and c.target == str(tmp_path / "state") for c in flushed)
    assert syncs.on(_main()) == []


def test_a_failed_background_sync_is_logged_and_counted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(fd: int) -> None:
        raise OSError(5, "Input/output error")

    failed: list[str] = []
    flusher = Flusher(interval=0.01, on_failure=lambda: failed.append(_main()))
    journal = DecisionJournal(tmp_path, flusher=flusher)
    journal.reset(1)
    journal.flush()
    monkeypatch.setattr(os, "fdatasync", broken)
    journal.append({"op": "remove", "cid": "c"})
    with caplog.at_level(logging.ERROR, logger="nri_plrm.checkpoint"):
        journal.flush()
    assert flusher.failures == 1 and failed == ["nri-plrm-flusher"]
    assert "Input/output error" in caplog.text and JOURNAL_FILE in caplog.text
    monkeypatch.undo()
    journal.append({"op": "remove", "cid": "d"})  # the thread carries on
    journal.close()
    assert len(DecisionJournal(tmp_path).read()[1]) == 2


def _plugin(state: Path, kubelet_state_path: str | None = None) -> Plugin:
    engine = Engine(MACHINES["default"], parse_config(CONFIG).engine_config())
    store = CheckpointStore(state)
    return Plugin(NodeLedger(engine, store=store, kubelet_state_path=kubelet_state_path))


async def _create_all(plugin: Plugin) -> int:
    created = 0
    for spec in load_manifests(sorted(EXAMPLES.glob("*.yaml"))):
        sandbox = nri_pod_sandbox(spec)
        await plugin.run_pod_sandbox(sandbox)
        for ctr in creation_order(spec):
            try:
                await plugin.create_container(sandbox, nri_container(spec, ctr))
            except NRIError:  # an example the kubelet rejects, too
                plugin.remove_pod_sandbox(sandbox)
                break
            created += 1
    return created


def test_plugin_requests_never_wait_for_a_sync(tmp_path: Path, syncs: SyncLog) -> None:
    exports = tmp_path / "kubelet"
    plugin = _plugin(tmp_path, kubelet_state_path=str(exports))
    plugin.ledger.open()
    at_start = len(syncs.on(_main()))
    assert asyncio.run(_create_all(plugin)) > 5
    plugin.ledger.compact()  # the checkpoint write of a compaction on the loop, too
    plugin.ledger.export_kubelet_state()  # and the kubelet-format export
    assert (exports / "cpu_manager_state").exists()
    assert len(syncs.on(_main())) == at_start
    plugin.ledger.close()
    flushed = {(c.call, c.target) for c in syncs.calls if c.thread == "nri-plrm-flusher"}
    assert ("fsync", str(tmp_path / STATE_FILE)) in flushed
    assert ("fsync", str(tmp_path)) in flushed
    assert ("fsync", str(exports / "cpu_manager_state")) in flushed
    reader = _plugin(tmp_path)
    assert reader.ledger.load() is None
    assert reader.ledger.snapshot()["plugin"]["pods"] == plugin.ledger.snapshot()["plugin"]["pods"]


_APPENDER = """
import sys
from nri_plrm.checkpoint.flusher import Flusher
from nri_plrm.checkpoint.journal import DecisionJournal
journal = DecisionJournal(sys.argv[1], flusher=Flusher(interval=3600.0))
journal.reset(7)
n = 0
while True:
    journal.append({"op": "remove", "cid": "c%d" % n, "pad": "x" * (n % 700)})
    print(n, flush=True)
    n += 1
"""


def test_sigkill_after_an_acknowledged_append_loses_nothing(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-c", _APPENDER, str(tmp_path)], stdout=subprocess.PIPE, env=env
    )
    assert proc.stdout is not None
    acknowledged = -1
    while acknowledged < 3000:
        acknowledged = int(proc.stdout.readline())
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    generation, records, problem = DecisionJournal(tmp_path).read()
    assert generation == 7 and problem is None
    assert len(records) >= acknowledged + 1
    assert [r["cid"] for r in records] == [f"c{n}" for n in range(len(records))]


def _journal_with(tmp_path: Path, count: int) -> bytes:
    journal = DecisionJournal(tmp_path)
    journal.reset(3)
    for n in range(count):
        journal.append({"op": "remove", "cid": f"c{n}"})
    journal.close()
    return (tmp_path / JOURNAL_FILE).read_bytes()


def test_power_loss_cut_anywhere_in_the_tail_keeps_every_whole_record(tmp_path: Path) -> None:
    whole = _journal_with(tmp_path, 5)
    ends = [i + 1 for i, byte in enumerate(whole) if byte == ord("\n")]
    path = tmp_path / JOURNAL_FILE
    for cut in range(ends[2], len(whole) + 1):
        path.write_bytes(whole[:cut])
        generation, records, problem = DecisionJournal(tmp_path).read()
        complete = sum(1 for end in ends[1:] if end <= cut)
        assert (generation, problem) == (3, None)
        assert [r["cid"] for r in records] == [f"c{n}" for n in range(complete)]


def test_power_loss_nul_filled_tail_is_a_torn_tail(tmp_path: Path) -> None:
    """A file whose size reached the disk but not its last pages reads back NUL bytes there."""
    whole = _journal_with(tmp_path, 6)
    ends = [i + 1 for i, byte in enumerate(whole) if byte == ord("\n")]
    keep = ends[4]  # header + 4 records
    (tmp_path / JOURNAL_FILE).write_bytes(whole[:keep] + b"\0" * (len(whole) - keep))
    generation, records, problem = DecisionJournal(tmp_path).read()
    assert (generation, problem) == (3, None)
    assert [r["cid"] for r in records] == ["c0", "c1", "c2", "c3"]


@pytest.mark.parametrize("content", [b"", b"\0" * 4096], ids=["zero-length", "nul-filled"])
def test_emptied_checkpoint_after_power_loss_is_unusable_not_fatal(
    tmp_path: Path, content: bytes
) -> None:
    store = CheckpointStore(tmp_path)
    store.save({"a": 1})
    store.close()
    (tmp_path / STATE_FILE).write_bytes(content)
    result = CheckpointStore(tmp_path).load()
    assert result.data is None and result.problem is not None
    assert result.problem.kind == "empty"
    assert f"{len(content)} bytes and no data" in result.problem.message
    assert (tmp_path / f"{STATE_FILE}.corrupt-1").read_bytes() == content


def test_plugin_starts_empty_from_an_emptied_checkpoint(tmp_path: Path) -> None:
    live = _plugin(tmp_path)
    live.ledger.open()
    asyncio.run(_create_all(live))
    live.ledger.compact()
    live.ledger.close()
    (tmp_path / STATE_FILE).write_bytes(b"")  # the rename reached the disk, its data did not
    plugin = _plugin(tmp_path)
    problem = plugin.ledger.open()
    assert problem is not None and "no data" in problem
    assert plugin.ledger.snapshot()["plugin"]["pods"] == {}
    assert plugin.ledger.engine.verify() == []
    plugin.ledger.close()
