"""The decision journal: encoding, damage handling, replay equal to the live state; the
kubelet-format export; fuzzing of every decoder the plugin reads its state with."""

from __future__ import annotations

import asyncio
import contextlib
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kubelet_decode import decode_cpu_manager_state, decode_memory_manager_state

from nri_plrm.checkpoint.journal import JOURNAL_FILE, DecisionJournal
from nri_plrm.checkpoint.store import CheckpointStore
from nri_plrm.config.file import parse_config
from nri_plrm.engine.facade import Engine
from nri_plrm.engine.spec import AdmissionError
from nri_plrm.engine.spec_json import spec_from_dict
from nri_plrm.ledger import NodeLedger
from nri_plrm.nri.handlers import NRIError
from nri_plrm.plugin.handlers import Plugin
from nri_plrm.topology.machines import MACHINES
from nri_plrm.translate.manifest_to_pod import load_manifests
from nri_plrm.translate.nri_to_pod import intent_from_dict
from nri_plrm.translate.pod_to_cri import creation_order, nri_container, nri_pod_sandbox

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
CONFIG = '[topology_manager]\npolicy = "single-numa-node"\nscope = "pod"\n'

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)


def new_plugin(state: Path, kubelet_state_path: str | None = None) -> Plugin:
    engine = Engine(MACHINES["default"], parse_config(CONFIG).engine_config())
    store = CheckpointStore(state)
    return Plugin(NodeLedger(engine, store=store, kubelet_state_path=kubelet_state_path))


async def drive(plugin: Plugin) -> None:
    """A mixed life: admissions, creations, an exit, a rejection, removals."""
    specs = {p.name: p for p in load_manifests(sorted(EXAMPLES.glob("*.yaml")))}
    for name in ("besteffort", "classic-guaranteed", "pod-scope-mixed", "empty-shared-pool"):
        spec = specs[name]
        sandbox = nri_pod_sandbox(spec)
        await plugin.run_pod_sandbox(sandbox)
        for ctr in creation_order(spec):
            msg = nri_container(spec, ctr)
            try:
                await plugin.create_container(sandbox, msg)
            except NRIError:
                plugin.remove_pod_sandbox(sandbox)
                break
            if ctr.name == "migrate-schema":
                plugin.stop_container(sandbox, msg)
                plugin.stop_container(sandbox, msg)
    victim = specs["besteffort"]
    plugin.remove_container(nri_pod_sandbox(victim), nri_container(victim, victim.containers[0]))
    plugin.remove_pod_sandbox(nri_pod_sandbox(victim))


def test_replay_equals_the_live_state(tmp_path: Path) -> None:
    live = new_plugin(tmp_path)
    live.ledger.open()
    asyncio.run(drive(live))
    assert live.ledger.persistence.journal is not None and live.ledger.persistence.journal.count > 5
    reader = new_plugin(tmp_path)
    assert reader.ledger.load() is None
    assert reader.ledger.snapshot() == live.ledger.snapshot()
    assert reader.ledger.engine.verify() == []


def test_compaction_folds_the_journal_into_the_checkpoint(tmp_path: Path) -> None:
    live = new_plugin(tmp_path)
    live.ledger.open()
    asyncio.run(drive(live))
    live.ledger.compact()
    journal = live.ledger.persistence.journal
    assert journal is not None and journal.count == 0
    reader = new_plugin(tmp_path)
    reader.ledger.load()
    assert reader.ledger.snapshot() == live.ledger.snapshot()


def test_torn_last_line_is_ignored_and_damage_is_kept_aside(tmp_path: Path) -> None:
    live = new_plugin(tmp_path)
    live.ledger.open()
    asyncio.run(drive(live))
    path = tmp_path / JOURNAL_FILE
    whole = path.read_bytes()
    path.write_bytes(whole + b'0badc0de {"op":"remove_pod","uid"')
    reader = new_plugin(tmp_path)
    assert reader.ledger.load() is None
    assert reader.ledger.snapshot() == live.ledger.snapshot()
    lines = whole.split(b"\n")
    lines[3] = lines[3].replace(b'"op"', b'"oq"', 1)
    path.write_bytes(b"\n".join(lines))
    damaged = new_plugin(tmp_path)
    problem = damaged.ledger.load()
    assert problem is not None and "line 4" in problem and "checksum mismatch" in problem
    assert (tmp_path / f"{JOURNAL_FILE}.corrupt-1").exists()
    assert not path.exists()
    assert damaged.ledger.engine.verify() == []


def test_journal_of_a_missing_checkpoint_is_ignored(tmp_path: Path) -> None:
    live = new_plugin(tmp_path)
    live.ledger.open()
    asyncio.run(drive(live))
    (tmp_path / "state.json").unlink()
    reader = new_plugin(tmp_path)
    assert reader.ledger.load() is None
    assert reader.ledger.pods() == ()


def test_kubelet_format_export(tmp_path: Path) -> None:
    export = tmp_path / "kubelet"
    live = new_plugin(tmp_path / "state", kubelet_state_path=str(export))
    live.ledger.open()
    asyncio.run(drive(live))
    live.ledger.export_kubelet_state()
    cpu = decode_cpu_manager_state((export / "cpu_manager_state").read_bytes()).state
    assert cpu.policy_name == "static"
    assert cpu.default_cpuset == live.ledger.engine.node_shared_pool()
    for uid, names in cpu.entries.items():
        for name, cpus in names.items():
            got = live.ledger.engine.assignment(uid, name)
            assert got is not None and got.cpus == cpus
    assert set(cpu.pod_entries) == {v.uid for v in live.ledger.pods() if v.cpus}
    memory = decode_memory_manager_state((export / "memory_manager_state").read_bytes()).state
    assert memory.policy_name == "Static"


@given(json_values)
def test_fuzz_journal_round_trip(value: Any) -> None:
    record = {"op": "x", "value": value}
    line = DecisionJournal.encode(record)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert DecisionJournal.decode(line[:-1]) == record


@given(st.binary(max_size=200))
def test_fuzz_journal_decode_rejects_garbage_with_value_error(data: bytes) -> None:
    try:
        DecisionJournal.decode(data)
    except ValueError:
        return


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=400))
def test_fuzz_journal_read_never_raises(tmp_path: Path, data: bytes) -> None:
    for leftover in tmp_path.iterdir():
        leftover.unlink()
    (tmp_path / JOURNAL_FILE).write_bytes(data)
    _generation, records, problem = DecisionJournal(tmp_path).read()
    assert problem is not None or all(isinstance(r, dict) for r in records)


@given(json_values)
def test_fuzz_checkpoint_decoders_raise_only_what_load_handles(value: Any) -> None:
    for decode in (intent_from_dict, spec_from_dict):
        with contextlib.suppress(KeyError, TypeError, ValueError, AttributeError):
            decode(value)


@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.dictionaries(st.sampled_from(["op", "uid", "cid", "name", "sandbox"]), json_values))
def test_fuzz_replay_of_foreign_records(tmp_path: Path, record: dict[str, Any]) -> None:
    plugin = new_plugin(tmp_path)
    with contextlib.suppress(AdmissionError, KeyError, TypeError, ValueError, AttributeError):
        plugin.ledger.replay_journal(0, [record])
    assert plugin.ledger.engine.verify() == []


def test_journal_refuses_appends_until_reset(tmp_path: Path) -> None:
    journal = DecisionJournal(tmp_path)
    from nri_plrm.checkpoint.journal import JournalError

    with pytest.raises(JournalError, match="not open"):
        journal.append({"op": "stop"})
    journal.reset(3)
    journal.append({"op": "stop", "uid": "u", "name": "n"})
    journal.close()
    journal._fd = os.open("/dev/full", os.O_WRONLY)
    with pytest.raises(JournalError, match="No space left"):
        journal.append({"op": "stop"})
    generation, records, problem = DecisionJournal(tmp_path).read()
    assert (generation, problem) == (3, None)
    assert records == [{"op": "stop", "uid": "u", "name": "n"}]
