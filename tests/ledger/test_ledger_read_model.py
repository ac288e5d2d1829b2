"""The read model after any sequence of decisions equals views rebuilt from scratch, although
pods whose containers only followed the node shared pool are not rebuilt when it moves."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from inprocess_pods import admit_and_place, pod_level

from nri_plrm.config.file import parse_config
from nri_plrm.engine.facade import Engine
from nri_plrm.engine.spec import (
    AssignmentType,
    ContainerSpec,
    PodSpec,
)
from nri_plrm.ledger import NodeLedger
from nri_plrm.ledger.read_model import ReadModel
from nri_plrm.topology.machines import MACHINES
from nri_plrm.translate.nri_to_pod import pod_intent
from nri_plrm.translate.pod_to_cri import nri_pod_sandbox

CONFIG = '[topology_manager]\npolicy = "single-numa-node"\nscope = "pod"\n'
GI = 1 << 30
KINDS = ("best-effort", "exclusive", "pinned-memory", "pod-level")


def spec_of(kind: str, uid: str) -> PodSpec:
    """A pod whose containers land on the node shared pool (best-effort; pinned-memory: a
    Guaranteed pod of half a CPU, its memory on one NUMA node), on exclusive CPUs, or in a pod
    budget with a sidecar on its pod shared pool."""
    if kind == "best-effort":
        return PodSpec(uid=uid, name=uid, containers=(ContainerSpec("a"), ContainerSpec("b")))
    if kind == "exclusive":
        two = {"cpu": 2000, "memory": GI}
        return PodSpec(
            uid=uid, name=uid, containers=(ContainerSpec("c", requests=two, limits=two),)
        )
    if kind == "pinned-memory":
        half = {"cpu": 500, "memory": GI}
        return PodSpec(
            uid=uid, name=uid, containers=(ContainerSpec("m", requests=half, limits=half),)
        )
    return pod_level(uid)


def expected(ledger: NodeLedger) -> dict[str, dict[str, object]]:
    """Each tracked pod's containers and their assignments, asked of the engine now."""
    return {
        uid: {name: ledger.assignment((uid, name)) for name in record.containers}
        for uid, record in ledger.tables.pods.items()
    }


@settings(max_examples=60, deadline=None)
@given(
    steps=st.lists(
        st.tuples(st.booleans(), st.sampled_from(KINDS), st.booleans()), min_size=1, max_size=16
    )
)
def test_read_model_equals_a_rebuild_after_every_decision(
    steps: list[tuple[bool, str, bool]],
) -> None:
    ledger = NodeLedger(Engine(MACHINES["default"], parse_config(CONFIG).engine_config()))
    live: list[str] = []
    for i, (start, kind, whole) in enumerate(steps):
        if start or not live:
            spec = spec_of(kind, f"{kind}-{i}")
            if not admit_and_place(ledger, spec, whole):
                continue
            live.append(spec.uid)
        else:
            ledger.remove_pod(live.pop(0))
        seen = ledger.pods()
        views = {p.uid: {c.name: c.assignment for c in p.containers} for p in seen}
        assert views == expected(ledger)
        assert ledger.pods() is seen


def test_a_container_reported_as_following_the_pool_is_rebuilt_when_its_view_is_elsewhere() -> None:
    """The read model does not trust a follower blindly: a container whose view shows it on
    exclusive CPUs, reported as following the node shared pool, gets its pod rebuilt."""
    ledger = NodeLedger(Engine(MACHINES["default"], parse_config(CONFIG).engine_config()))
    spec = spec_of("exclusive", "p")
    sandbox = nri_pod_sandbox(spec)
    ledger.admit(spec.uid, sandbox.id, pod_intent(sandbox), spec)
    ledger.place(spec.uid, "c", "p-c", spec.containers[0])
    model = ReadModel()
    model.rebuild(ledger.engine, ledger.tables)
    assert model.pods()[0].containers[0].assignment == ledger.assignment(("p", "c"))
    engine = ledger.engine
    engine.remove_pod("p")
    engine.admit_pod(PodSpec(uid="p", name="p", containers=(ContainerSpec("c"),)))
    now = ledger.assignment(("p", "c"))
    assert now is not None and now.assignment is AssignmentType.NODE_SHARED
    model.rebuild(engine, ledger.tables, (), {("p", "c")})
    assert model.pods()[0].containers[0].assignment == now
