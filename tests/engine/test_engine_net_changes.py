"""Engine.net_changes: a compound decision reports the node-shared containers once, at its end,
and only when the node shared pool ended elsewhere than it started."""

from __future__ import annotations

import pytest
from seed_pods import GI, seed_config, seed_topology

from nri_plrm.engine.facade import Engine
from nri_plrm.engine.spec import AdmissionError, AssignmentType, ContainerSpec, PodSpec

BUDGET = {"cpu": 2000, "memory": 2 * GI}
ONE = {"cpu": 1000, "memory": GI}


def engine_with_best_effort(n: int = 3) -> Engine:
    e = Engine(seed_topology(), seed_config("single-numa-node", "pod"))
    for i in range(n):
        pod = PodSpec(uid=f"be-{i}", name=f"be-{i}")
        e.admit_sandbox(pod)
        e.add_container(pod, ContainerSpec("c"))
    return e


def budget_pod(uid: str) -> PodSpec:
    return PodSpec(uid=uid, name=uid, requests=BUDGET, limits=BUDGET)


def best_effort_keys(n: int = 3) -> set[tuple[str, str]]:
    return {(f"be-{i}", "c") for i in range(n)}


def test_calls_inside_report_no_node_shared_container_the_end_reports_the_net() -> None:
    e = engine_with_best_effort()
    before = e.node_shared_pool()
    with e.net_changes() as net:
        assert e.admit_sandbox(budget_pod("p")) == {}
        assert net == {}
    assert e.node_shared_pool() != before
    assert set(net) == best_effort_keys()
    for assignment in net.values():
        assert assignment.assignment is AssignmentType.NODE_SHARED
        assert assignment.cpus == e.node_shared_pool()


def test_a_pool_that_moves_away_and_back_changes_no_container() -> None:
    e = engine_with_best_effort()
    with e.net_changes() as net:
        e.admit_sandbox(budget_pod("p"))
        e.remove_pod("p")
    assert net == {}


def test_without_the_block_every_call_reports_the_node_shared_containers() -> None:
    e = engine_with_best_effort()
    assert set(e.admit_sandbox(budget_pod("p"))) == best_effort_keys()
    assert set(e.remove_pod("p")) == best_effort_keys()


def test_nested_blocks_report_at_the_outermost_end_only() -> None:
    e = engine_with_best_effort()
    with e.net_changes() as outer:
        with e.net_changes() as inner:
            e.admit_sandbox(budget_pod("p"))
        assert inner == {}
    assert set(outer) == best_effort_keys()


def test_the_end_is_reported_when_the_block_raises() -> None:
    e = engine_with_best_effort()
    huge = {"cpu": 10_000_000, "memory": GI}
    with pytest.raises(AdmissionError), e.net_changes() as net:
        e.admit_sandbox(budget_pod("p"))
        e.admit_sandbox(PodSpec(uid="q", name="q", requests=huge, limits=huge))
    assert set(net) == best_effort_keys()
    with e.net_changes() as after:
        e.admit_sandbox(budget_pod("r"))
    assert set(after) == best_effort_keys()


def test_own_pod_changes_are_still_reported_inside() -> None:
    e = engine_with_best_effort()
    pod = budget_pod("p")
    with e.net_changes() as net:
        e.admit_sandbox(pod)
        e.add_container(pod, ContainerSpec("side"))
        _, changes = e.add_container(pod, ContainerSpec("main", requests=ONE, limits=ONE))
    assert set(changes) == {("p", "side")}
    assert set(net) == best_effort_keys()


def test_node_shared_assignment_matches_every_container_on_the_pool() -> None:
    e = engine_with_best_effort()
    e.admit_sandbox(budget_pod("p"))
    first = e.assignment("be-0", "c")
    assert first is not None
    assert first == e.assignment("be-1", "c")
    assert first.cpus == e.node_shared_pool()
    assert not first.mems and first.memory == ()
