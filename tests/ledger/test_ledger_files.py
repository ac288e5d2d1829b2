"""NodeLedger's files and what it reports about them through the metrics.

``data/state-with-counters.json`` is a checkpoint written by the release before the ledger
(the engine's counters inside, a whole-mode pod's spec saved twice); ``.views.json`` is what
that release showed for it (PodResources view: pods, containers, assignments).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from nri_plrm.checkpoint.store import STATE_FILE, CheckpointStore
from nri_plrm.config.file import parse_config
from nri_plrm.engine.facade import Engine
from nri_plrm.ledger import NodeLedger, NotSavedError
from nri_plrm.observability.metrics import Metrics
from nri_plrm.topology.machines import MACHINES
from nri_plrm.translate.manifest_to_pod import load_manifests
from nri_plrm.translate.nri_to_pod import pod_intent
from nri_plrm.translate.pod_to_cri import nri_pod_sandbox

DATA = Path(__file__).resolve().parent / "data"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
CONFIG = '[topology_manager]\npolicy = "single-numa-node"\nscope = "pod"\n'


def new_ledger(state: Path, metrics: Metrics | None = None, config: str = CONFIG) -> NodeLedger:
    engine = Engine(MACHINES["default"], parse_config(config).engine_config())
    return NodeLedger(engine, store=CheckpointStore(state), observer=metrics)


def sample(metrics: Metrics, name: str, **labels: str) -> float:
    value = metrics.registry.get_sample_value(name, labels)
    return 0.0 if value is None else value


def admit(ledger: NodeLedger, example: str) -> None:
    (spec,) = load_manifests([EXAMPLES / f"{example}.yaml"])
    sandbox = nri_pod_sandbox(spec)
    ledger.admit(spec.uid, sandbox.id, pod_intent(sandbox), spec)


def views(ledger: NodeLedger) -> list[dict[str, Any]]:
    return [
        {
            "uid": v.uid,
            "pod": f"{v.namespace}/{v.name}",
            "cpus": str(v.cpus),
            "containers": [
                [
                    c.name,
                    c.assignment.assignment.value,
                    str(c.assignment.cpus),
                    str(c.assignment.mems),
                ]
                for c in v.containers
                if c.assignment is not None
            ],
        }
        for v in ledger.pods()
    ]


def test_state_written_with_counters_loads_and_drops_them(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    shutil.copy(DATA / "state-with-counters.json", state / STATE_FILE)
    old = json.loads((state / STATE_FILE).read_text())["data"]
    assert "counters" in old["engine"]
    twice = {uid for uid, p in old["plugin"]["pods"].items() if p.get("spec") is not None}
    assert twice, "the old file saves whole-mode pods' specs in the tables too"

    ledger = new_ledger(state)
    assert ledger.open() is None
    assert views(ledger) == json.loads((DATA / "state-with-counters.views.json").read_text())
    for uid in twice:
        record = ledger.pod(uid)
        assert record is not None and record.spec == ledger.engine.pod_spec(uid) is not None

    saved = json.loads((state / STATE_FILE).read_text())["data"]
    assert "counters" not in saved["engine"]
    assert all("spec" not in p for p in saved["plugin"]["pods"].values())
    assert saved["engine"]["pods"].keys() == old["engine"]["pods"].keys()
    again = new_ledger(state)
    assert again.load() is None and again.snapshot() == ledger.snapshot()


def test_checkpoint_writes_are_counted_with_their_outcome(tmp_path: Path) -> None:
    """A failed write counts as a failure (not a success) and its duration is observed."""
    metrics = Metrics()
    ledger = new_ledger(tmp_path / "state", metrics)
    ledger.open()  # the start-up checkpoint
    admit(ledger, "besteffort")  # one journal append
    assert sample(metrics, "nri_plrm_checkpoint_writes_total") == 2
    assert sample(metrics, "nri_plrm_checkpoint_write_failures_total") == 0
    journal = ledger.persistence.journal
    assert journal is not None
    journal.close()
    journal._fd = os.open("/dev/full", os.O_WRONLY)  # every append: ENOSPC
    before = ledger.snapshot()
    with pytest.raises(NotSavedError, match="decision not applied: journal"):
        admit(ledger, "classic-guaranteed")
    assert ledger.snapshot() == before
    assert sample(metrics, "nri_plrm_checkpoint_writes_total") == 2
    assert sample(metrics, "nri_plrm_checkpoint_write_failures_total") == 1
    assert sample(metrics, "nri_plrm_checkpoint_write_duration_seconds_count") == 3
    total = sample(metrics, "nri_plrm_checkpoint_write_duration_seconds_sum")
    assert 0 < total < 5


@pytest.mark.parametrize(
    ("contents", "kind"),
    [(b"{not json", "invalid-json"), (b"[]", "bad-layout")],
)
def test_unusable_checkpoint_is_counted_by_kind(tmp_path: Path, contents: bytes, kind: str) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    (state / STATE_FILE).write_bytes(contents)
    metrics = Metrics()
    ledger = new_ledger(state, metrics)
    problem = ledger.open()
    assert problem is not None and str(state / STATE_FILE) in problem
    assert sample(metrics, "nri_plrm_checkpoint_corrupt_total", kind=kind) == 1
    assert sample(metrics, "nri_plrm_checkpoint_corrupt_total", kind="journal") == 0
    assert ledger.pods() == () and ledger.engine.pods() == ()


def test_admissions_and_placements_are_counted(tmp_path: Path) -> None:
    metrics = Metrics()
    ledger = new_ledger(tmp_path / "state", metrics)
    ledger.open()
    admit(ledger, "pod-scope-mixed")
    (spec,) = load_manifests([EXAMPLES / "pod-scope-mixed.yaml"])
    for n, container in enumerate(spec.all_containers()):
        ledger.place(spec.uid, container.name, f"c{n}", container)
    assert sample(metrics, "topology_manager_admission_requests_total") == 1
    assert sample(
        metrics, "resource_manager_allocations_total", resource_name="cpu", source="pod"
    ) == len(spec.all_containers())
    assert sample(metrics, "resource_manager_pinning_requests_total", resource_name="cpu") == 3


def test_policy_none_counts_no_topology_admission(tmp_path: Path) -> None:
    metrics = Metrics()
    ledger = new_ledger(tmp_path / "state", metrics, '[topology_manager]\npolicy = "none"\n')
    ledger.open()
    admit(ledger, "classic-guaranteed")
    assert len(ledger.tables.pods) == 1
    assert sample(metrics, "topology_manager_admission_requests_total") == 0
