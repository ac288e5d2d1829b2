"""Rollback and downgrade (issue 31 item 12): a checkpoint or journal of a newer format version
is refused at start with a message naming the file, the version and what to do, and left in
place; the state the last landed commit (21e5c6f) wrote is read by this code."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from fakesysfs import write_sysfs
from ledger_decisions import decisions

from nri_plrm.checkpoint.journal import JOURNAL_FILE, JOURNAL_FORMAT, DecisionJournal
from nri_plrm.checkpoint.store import (
    CURRENT_VERSION,
    STATE_FILE,
    CheckpointStore,
    NewerFormatError,
    data_checksum,
)
from nri_plrm.config.settings import Config
from nri_plrm.engine.facade import Engine
from nri_plrm.ledger import NodeLedger
from nri_plrm.topology.machines import load_topology
from nri_plrm.topology.synthetic import DEFAULT_SPEC

REPO = Path(__file__).resolve().parents[2]
FIXTURE = REPO / "tests" / "data" / "checkpoint-21e5c6f"
FORMAT_1_FIXTURE = REPO / "tests" / "data" / "checkpoint-4aec994"


def _state_dir(tmp_path: Path) -> Path:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    return state


def _journal_header(**header: object) -> bytes:
    return DecisionJournal.encode(header)


def test_journal_header_names_its_format_and_an_old_header_is_format_1(tmp_path: Path) -> None:
    state = _state_dir(tmp_path)
    journal = DecisionJournal(state)
    journal.reset(7)
    journal.close()
    first = (state / JOURNAL_FILE).read_bytes().split(b"\n", 1)[0]
    assert DecisionJournal.decode(first) == {"format": JOURNAL_FORMAT, "generation": 7}
    (state / JOURNAL_FILE).write_bytes(_journal_header(generation=3))
    assert DecisionJournal(state).read() == (3, [], None)


def test_newer_journal_is_refused_and_left_in_place(tmp_path: Path) -> None:
    state = _state_dir(tmp_path)
    path = state / JOURNAL_FILE
    path.write_bytes(_journal_header(format=JOURNAL_FORMAT + 1, generation=1))
    before = path.read_bytes()
    for quarantine in (True, False):
        with pytest.raises(NewerFormatError) as refused:
            DecisionJournal(state).read(quarantine=quarantine)
        assert str(refused.value).startswith(
            f"journal {path}: format version {JOURNAL_FORMAT + 1}, newer than the version "
            f"{JOURNAL_FORMAT} this nri-plrm reads"
        )
    assert path.read_bytes() == before
    assert sorted(p.name for p in state.iterdir()) == [JOURNAL_FILE]


def test_a_bad_journal_format_is_damage_not_a_newer_version(tmp_path: Path) -> None:
    state = _state_dir(tmp_path)
    (state / JOURNAL_FILE).write_bytes(_journal_header(format="two", generation=1))
    _, _, problem = DecisionJournal(state).read()
    assert problem is not None and "format 'two', must be an integer >= 1" in problem


def _run(tmp_path: Path, state: Path) -> subprocess.CompletedProcess[str]:
    write_sysfs(load_topology("sockets=1,cores_per_numa=2"), str(tmp_path / "sys"))
    cfg = tmp_path / "config.toml"
    cfg.write_text(
        f'[nri]\nsocket = "{tmp_path}/nri.sock"\nreconnect = false\n'
        f'[state]\ndir = "{state}"\nkubelet_cpu_manager_state = ""\n'
        f'[pod_resources]\nenabled = false\n[metrics]\naddress = ""\n'
        f'[topology]\nsysfs_root = "{tmp_path}/sys"\n'
    )
    return subprocess.run(
        [sys.executable, "-m", "nri_plrm", "run", "--config", str(cfg)],
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize("newer", ["checkpoint", "journal"])
def test_run_refuses_to_start_on_newer_state(tmp_path: Path, newer: str) -> None:
    state = _state_dir(tmp_path)
    if newer == "checkpoint":
        data: dict[str, object] = {"engine": {}}
        document = {"version": CURRENT_VERSION + 1, "data": data, "checksum": data_checksum(data)}
        (state / STATE_FILE).write_text(json.dumps(document))
        path, found = state / STATE_FILE, CURRENT_VERSION + 1
    else:
        (state / JOURNAL_FILE).write_bytes(_journal_header(format=JOURNAL_FORMAT + 1, generation=1))
        path, found = state / JOURNAL_FILE, JOURNAL_FORMAT + 1
    before = {p.name: p.read_bytes() for p in state.iterdir()}
    proc = _run(tmp_path, state)
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    (error,) = [line for line in proc.stderr.splitlines() if " ERROR " in line]
    assert f"not starting: state directory {state}: {newer} {path}: format version {found}" in error
    assert f"move {state} aside" in error and "Rollback and downgrade" in error
    assert {p.name: p.read_bytes() for p in state.iterdir()} == before


def _restored_as_decided(fixture: Path, tmp_path: Path) -> None:
    state = tmp_path / "state"
    shutil.copytree(fixture, state, ignore=shutil.ignore_patterns("*.md", "*.py", "expected.json"))
    state.chmod(0o700)
    assert sorted(p.name for p in state.iterdir()) == [JOURNAL_FILE, STATE_FILE]
    ledger = NodeLedger(
        Engine(load_topology(DEFAULT_SPEC), Config().engine_config()),
        store=CheckpointStore(state),
    )
    assert ledger.load() is None
    restored = decisions(ledger)
    expected = json.loads((fixture / "expected.json").read_text())
    assert len(expected) == 3
    assert restored == expected


def test_state_written_by_21e5c6f_is_restored_as_it_was_decided(tmp_path: Path) -> None:
    first = (FIXTURE / JOURNAL_FILE).read_bytes().split(b"\n", 1)[0]
    assert "format" not in DecisionJournal.decode(first), "the fixture predates the header's format"
    _restored_as_decided(FIXTURE, tmp_path)


def test_promote_and_demote_records_of_4aec994_are_restored_as_they_were_decided(
    tmp_path: Path,
) -> None:
    """The single-container inference's records before ``readmit`` (format 1) still replay."""
    journal = (FORMAT_1_FIXTURE / JOURNAL_FILE).read_text()
    assert '"op":"promote"' in journal and '"op":"demote"' in journal
    assert DecisionJournal.decode(journal.split("\n", 1)[0].encode())["format"] == 1
    _restored_as_decided(FORMAT_1_FIXTURE, tmp_path)
