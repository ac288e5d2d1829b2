"""When the ledger's read model shows a decision: at once outside an event loop; inside one,
when the current step ends (after the reply went out), and at once to the loop's own thread."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from pathlib import Path

from nri_plrm.config.file import parse_config
from nri_plrm.engine.facade import Engine
from nri_plrm.ledger import NodeLedger
from nri_plrm.ledger.view import PodView
from nri_plrm.topology.machines import MACHINES
from nri_plrm.translate.manifest_to_pod import load_manifests
from nri_plrm.translate.nri_to_pod import pod_intent
from nri_plrm.translate.pod_to_cri import nri_pod_sandbox

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
CONFIG = '[topology_manager]\npolicy = "single-numa-node"\nscope = "pod"\n'


def new_ledger(changes: list[int] | None = None) -> NodeLedger:
    engine = Engine(MACHINES["default"], parse_config(CONFIG).engine_config())
    on_change = None if changes is None else (lambda: changes.append(1))
    return NodeLedger(engine, on_change=on_change)


def admit_example(ledger: NodeLedger) -> str:
    (spec,) = load_manifests([EXAMPLES / "pod-scope-mixed.yaml"])
    sandbox = nri_pod_sandbox(spec)
    ledger.admit(spec.uid, sandbox.id, pod_intent(sandbox), spec)
    return spec.uid


def from_other_thread(ledger: NodeLedger) -> Sequence[PodView]:
    seen: list[Sequence[PodView]] = []
    reader = threading.Thread(target=lambda: seen.append(ledger.pods()))
    reader.start()
    reader.join()
    return seen[0]


def test_outside_an_event_loop_a_decision_is_published_at_once() -> None:
    changes: list[int] = []
    ledger = new_ledger(changes)
    uid = admit_example(ledger)
    assert [p.uid for p in from_other_thread(ledger)] == [uid]
    assert changes == [1]


def test_inside_a_loop_other_threads_see_a_decision_when_the_step_ends() -> None:
    async def scenario() -> None:
        changes: list[int] = []
        ledger = new_ledger(changes)
        uid = admit_example(ledger)
        assert from_other_thread(ledger) == ()
        assert changes == []
        await asyncio.sleep(0)
        assert [p.uid for p in from_other_thread(ledger)] == [uid]
        assert changes == [1]

    asyncio.run(scenario())


def test_the_loop_thread_reads_its_own_decisions_at_once_and_they_publish_once() -> None:
    async def scenario() -> None:
        changes: list[int] = []
        ledger = new_ledger(changes)
        uid = admit_example(ledger)
        assert [p.uid for p in ledger.pods()] == [uid]
        assert [p.uid for p in from_other_thread(ledger)] == [uid]
        await asyncio.sleep(0)
        assert changes == [1]

    asyncio.run(scenario())


def test_the_decisions_of_one_step_are_published_together() -> None:
    async def scenario() -> None:
        changes: list[int] = []
        ledger = new_ledger(changes)
        admit_example(ledger)
        (spec,) = load_manifests([EXAMPLES / "pod-scope-mixed.yaml"])
        for container in spec.all_containers():
            cid = f"{spec.uid}-{container.name}"
            ledger.place(spec.uid, container.name, cid, container)
        await asyncio.sleep(0)
        assert changes == [1]
        (view,) = from_other_thread(ledger)
        assert [c.name for c in view.containers] == [c.name for c in spec.all_containers()]

    asyncio.run(scenario())
