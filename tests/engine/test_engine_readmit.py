"""Engine.readmit (issue 27): a pod re-admitted under another kind and its next container
placed are one operation; a refusal at any step puts back that pod's entries, so the engine is
exactly as before, and a success ends where the separate steps end."""

from __future__ import annotations

from typing import Any

import pytest
from seed_pods import GI, seed_config, seed_topology

from nri_plrm.engine.facade import Engine
from nri_plrm.engine.readmit import ReadmitRefused
from nri_plrm.engine.spec import AssignmentType, ContainerSpec, PodSpec

BUDGET = {"cpu": 4000, "memory": 2 * GI}


def budget_pod() -> PodSpec:
    return PodSpec(uid="p", name="p", requests=BUDGET, limits=BUDGET)


def classic_pod() -> PodSpec:
    return PodSpec(uid="p", name="p")


def holding(budget: bool) -> Engine:
    """Best-effort pods on the node shared pool and pod ``p`` with container ``a``: a budget
    whose ``a`` shares the pool (stopped ``s`` too), or classic with ``a`` holding it."""
    e = Engine(seed_topology(), seed_config("single-numa-node", "pod"))
    for i in range(3):
        pod = PodSpec(uid=f"be-{i}", name=f"be-{i}")
        e.admit_sandbox(pod)
        e.add_container(pod, ContainerSpec("c"))
    if budget:
        e.admit_sandbox(budget_pod())
        e.add_container(budget_pod(), ContainerSpec("a"))
        e.add_container(budget_pod(), ContainerSpec("s"))
        e.stop_container("p", "s")
    else:
        e.admit_sandbox(classic_pod(), BUDGET)
        e.add_container(classic_pod(), ContainerSpec("a", requests=BUDGET, limits=BUDGET))
    return e


def state(e: Engine) -> tuple[dict[str, Any], Any, list[str]]:
    return e.snapshot(), e.assignments(), e.verify()


def test_a_refused_container_after_a_demotion_leaves_the_engine_as_it_was() -> None:
    e = holding(budget=False)
    before = state(e)
    greedy = ContainerSpec("b", requests=BUDGET, limits=BUDGET)  # would empty the pod's pool
    asked: list[str] = []

    def explain(pod: PodSpec, err: Exception, container: ContainerSpec) -> str:
        held = e.assignment("p", "a")
        asked.append(f"{container.name} {held.assignment.value if held else None}")
        return "the pod's pool would be empty"

    with pytest.raises(ReadmitRefused) as refused:
        e.readmit(budget_pod(), None, [ContainerSpec("a")], set(), greedy, explain)
    assert refused.value.placing and refused.value.cause == "the pod's pool would be empty"
    assert asked == ["b pod_shared"]  # explained while the pod was re-admitted
    assert state(e) == before
    assert before[2] == []


def test_a_refused_readmission_leaves_the_engine_as_it_was() -> None:
    e = holding(budget=True)
    before = state(e)
    huge = {"cpu": 1_000_000, "memory": 2 * GI}
    too_big = PodSpec(uid="p", name="p", requests=huge, limits=huge)
    with pytest.raises(ReadmitRefused) as refused:
        e.readmit(too_big, None, [ContainerSpec("a"), ContainerSpec("s")], {"s"})
    assert not refused.value.placing
    assert state(e) == before


def test_a_promotion_ends_where_the_separate_steps_end() -> None:
    e, steps = holding(budget=True), holding(budget=True)
    for engine in (e, steps):
        engine.remove_container("p", "a")
        engine.remove_container("p", "s")
        engine.admit_sandbox(budget_pod())  # the budget reserved again, no container yet
    new = ContainerSpec("b", requests=BUDGET, limits=BUDGET)
    done = e.readmit(classic_pod(), BUDGET, [], set(), new)
    steps.remove_pod("p")
    steps.admit_sandbox(classic_pod(), BUDGET)
    steps.add_container(classic_pod(), new)
    assert e.snapshot() == steps.snapshot()
    assert done.assignment is not None
    assert done.assignment.assignment is AssignmentType.NODE_EXCLUSIVE
    assert done.assignment == steps.assignment("p", "b")


def test_a_demotion_matches_the_separate_steps_and_reports_each_change_once() -> None:
    e, steps = holding(budget=False), holding(budget=False)
    pool_before = e.node_shared_pool()
    done = e.readmit(budget_pod(), None, [ContainerSpec("a")], set(), ContainerSpec("b"))
    steps.remove_pod("p")
    steps.admit_sandbox(budget_pod())
    steps.add_container(budget_pod(), ContainerSpec("a"))
    steps.add_container(budget_pod(), ContainerSpec("b"))
    assert e.snapshot() == steps.snapshot()
    assert done.assignment == steps.assignment("p", "b")
    assert next(iter(done.changes)) == ("p", "a")  # the pod's own first
    assert ("p", "b") not in done.changes
    node_shared = [k for k in done.changes if k[0] != "p"]
    assert (e.node_shared_pool() != pool_before) == bool(node_shared)


def test_stopped_containers_stay_stopped() -> None:
    e = holding(budget=True)
    e.readmit(budget_pod(), None, [ContainerSpec("a"), ContainerSpec("s")], {"s"})
    assert e.is_stopped("p", "s") and not e.is_stopped("p", "a")
    assert e.verify() == []
