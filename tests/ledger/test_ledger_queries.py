"""The ledger's queries of current assignments."""

from __future__ import annotations

from nri_plrm.config.file import parse_config
from nri_plrm.engine.facade import Engine
from nri_plrm.engine.spec import AssignmentType, ContainerSpec, PodSpec
from nri_plrm.ledger import NodeLedger
from nri_plrm.topology.machines import MACHINES
from nri_plrm.translate.nri_to_pod import pod_intent
from nri_plrm.translate.pod_to_cri import nri_pod_sandbox

CONFIG = '[topology_manager]\npolicy = "single-numa-node"\nscope = "pod"\n'
GI = 1 << 30


def place(ledger: NodeLedger, spec: PodSpec) -> None:
    """Admit the pod as NRI shows it (no spec) and place its containers."""
    sandbox = nri_pod_sandbox(spec)
    ledger.admit(spec.uid, sandbox.id, pod_intent(sandbox), None)
    for c in spec.containers:
        ledger.place(spec.uid, c.name, f"{spec.uid}-{c.name}", c)


def test_assignments_are_the_current_ones_of_the_containers_still_tracked() -> None:
    ledger = NodeLedger(Engine(MACHINES["default"], parse_config(CONFIG).engine_config()))
    one = {"cpu": 1000, "memory": GI}
    place(ledger, PodSpec(uid="be", name="be", containers=(ContainerSpec("a"), ContainerSpec("b"))))
    place(
        ledger,
        PodSpec(uid="g", name="g", containers=(ContainerSpec("x", requests=one, limits=one),)),
    )
    keys = [("be", "a"), ("be", "b"), ("g", "x"), ("gone", "a"), ("be", "never")]
    got = ledger.assignments(keys)
    assert list(got) == keys[:3]
    assert got == {k: ledger.assignment(k) for k in keys[:3]}
    assert got[("be", "a")].assignment is AssignmentType.NODE_SHARED
    assert got[("g", "x")].exclusive
    assert not got[("be", "a")].cpus & got[("g", "x")].cpus
    ledger.remove_container("be-a")
    assert list(ledger.assignments(keys)) == [("be", "b"), ("g", "x")]
    assert ledger.assignment(("be", "a")) is None


def test_a_whole_pods_spec_is_kept_once_by_the_engine_and_follows_its_resizes() -> None:
    """Issue 27: the ledger's record reads the spec the engine keeps (no copy to update by
    hand): after an in-place resize of a container, the record's spec is the engine's."""
    ledger = NodeLedger(Engine(MACHINES["default"], parse_config(CONFIG).engine_config()))
    one, two = {"cpu": 500}, {"cpu": 700}  # a shared container: resized in place
    spec = PodSpec(uid="w", name="w", containers=(ContainerSpec("x", requests=one),))
    sandbox = nri_pod_sandbox(spec)
    ledger.admit(spec.uid, sandbox.id, pod_intent(sandbox), spec)
    ledger.place(spec.uid, "x", "w-x", spec.containers[0])
    record = ledger.pod("w")
    assert record is not None and record.spec is ledger.engine.pod_spec("w")
    ledger.resize(("w", "x"), ContainerSpec("x", requests=two))
    assert record.spec is ledger.engine.pod_spec("w")
    resized = record.spec.container("x") if record.spec is not None else None
    assert resized is not None and resized.requests == two
