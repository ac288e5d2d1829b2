"""A snapshot taken with the forms kept from earlier snapshots equals one converted from
scratch, after any sequence of decisions (pods come and go, so object ids are reused)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from inprocess_pods import admit_and_place, pod_level

from nri_plrm.config.file import parse_config
from nri_plrm.engine.facade import Engine
from nri_plrm.engine.spec import ContainerSpec, PodSpec
from nri_plrm.engine.spec_json import KeptForms
from nri_plrm.ledger import NodeLedger
from nri_plrm.topology.machines import MACHINES

CONFIG = '[topology_manager]\npolicy = "single-numa-node"\nscope = "pod"\n'


def new_pod(kind: int, uid: str) -> PodSpec:
    if kind == 0:
        return PodSpec(uid=uid, name=uid, containers=(ContainerSpec("a"),))
    if kind == 1:
        cpus = {"cpu": 1000 * (1 + len(uid) % 3), "memory": 1 << 30}
        return PodSpec(
            uid=uid, name=uid, containers=(ContainerSpec("c", requests=cpus, limits=cpus),)
        )
    return pod_level(uid)


def converted_from_scratch(ledger: NodeLedger) -> dict[str, Any]:
    engine, tables = ledger.engine, ledger.tables
    kept = engine.forms, tables.intent_forms
    engine.forms, tables.intent_forms = KeptForms(), KeptForms()
    try:
        return ledger.snapshot(1)
    finally:
        engine.forms, tables.intent_forms = kept


@settings(max_examples=60, deadline=None)
@given(
    steps=st.lists(
        st.tuples(st.sampled_from(("start", "stop", "remove")), st.integers(0, 2), st.booleans()),
        min_size=1,
        max_size=20,
    )
)
def test_a_snapshot_with_kept_forms_equals_one_from_scratch(
    steps: list[tuple[str, int, bool]],
) -> None:
    ledger = NodeLedger(Engine(MACHINES["default"], parse_config(CONFIG).engine_config()))
    live: list[PodSpec] = []
    for i, (action, kind, whole) in enumerate(steps):
        if action == "start" or not live:
            spec = new_pod(kind, f"pod-{i}")
            if admit_and_place(ledger, spec, whole):
                live.append(spec)
        elif action == "stop":
            spec = live[i % len(live)]
            ledger.stop((spec.uid, spec.all_containers()[0].name))
        else:
            ledger.remove_pod(live.pop(i % len(live)).uid)
        assert ledger.snapshot(1) == converted_from_scratch(ledger)
