"""Adopting allocations that already run (``Engine.adopt_sandbox``, ``adopt_container``,
``place_in_node_pool``): what is valid is recorded exactly, what is not is refused without
changing anything."""

from __future__ import annotations

import pytest
from cpu_pods import container, pod_level

from nri_plrm.base.cpuset import CPUSet
from nri_plrm.config.file import parse_config
from nri_plrm.engine.adoption import AdoptionError
from nri_plrm.engine.facade import Engine
from nri_plrm.engine.spec import AssignmentType, PodSpec
from nri_plrm.topology.machines import MACHINES

POD_SCOPE = '[topology_manager]\npolicy = "single-numa-node"\nscope = "pod"\n'


def engine(extra: str = "") -> Engine:
    return Engine(MACHINES["default"], parse_config(POD_SCOPE + extra).engine_config())


def bare(uid: str) -> PodSpec:
    return PodSpec(uid=uid, name=uid)


def test_exclusive_container_keeps_its_cpus_and_mems() -> None:
    e = engine()
    e.adopt_sandbox(bare("a"), None, CPUSet.parse("9,41"))
    got = e.adopt_container("a", container("app", "2"), CPUSet.parse("9,41"), CPUSet([1]))
    assert got.assignment is AssignmentType.NODE_EXCLUSIVE
    assert got.cpus == CPUSet.parse("9,41") and got.mems == CPUSet([1])
    assert not e.node_shared_pool() & got.cpus
    assert e.verify() == []
    restored = Engine.restore(e.topology, e.config, e.snapshot())
    assert restored.assignments() == e.assignments()


@pytest.mark.parametrize(
    ("cpus", "why"),
    [
        ("9", "requests 2"),  # wrong size
        ("0,32", "not free"),  # CPU 0 is reserved
        ("", "requests 2"),  # never pinned: every CPU
    ],
)
def test_invalid_running_cpuset_is_refused_and_nothing_changes(cpus: str, why: str) -> None:
    e = engine()
    e.adopt_sandbox(bare("a"), None, CPUSet())
    before = e.snapshot()
    with pytest.raises(AdoptionError, match=why):
        e.adopt_container("a", container("app", "2"), CPUSet.parse(cpus), CPUSet())
    assert e.snapshot() == before


def test_cpus_held_by_another_container_are_refused() -> None:
    e = engine()
    e.adopt_sandbox(bare("a"), None, CPUSet.parse("9,41"))
    e.adopt_container("a", container("app", "2"), CPUSet.parse("9,41"), CPUSet([1]))
    e.adopt_sandbox(bare("b"), None, CPUSet())
    with pytest.raises(AdoptionError, match="not free"):
        e.adopt_container("b", container("app", "2"), CPUSet.parse("9,10"), CPUSet([1]))
    assert e.assignment("b", "app") is None


def test_full_pcpus_only_needs_whole_cores() -> None:
    e = engine('[cpu_manager]\noptions = { "full-pcpus-only" = "true" }\n')
    e.adopt_sandbox(bare("a"), None, CPUSet())
    with pytest.raises(AdoptionError, match="whole cores"):
        e.adopt_container("a", container("app", "2"), CPUSet.parse("9,10"), CPUSet([1]))
    got = e.adopt_container("a", container("app", "2"), CPUSet.parse("9,41"), CPUSet([1]))
    assert got.cpus == CPUSet.parse("9,41")


def test_pod_budget_keeps_the_slices_and_completes_on_their_numa_node() -> None:
    e = engine()
    spec = pod_level("p", "4", apps=(container("main", "2", memory="1G"), container("side")))
    budget = e.adopt_sandbox(spec, None, CPUSet.parse("20,52"), avoid=CPUSet.parse("21,53"))
    assert len(budget) == 4 and CPUSet.parse("20,52") <= budget
    assert not budget & CPUSet.parse("21,53"), "completed away from other pods' slices"
    assert budget <= e.topology.cpus_in_numa(2)
    main = e.adopt_container(
        "p", container("main", "2", memory="1G"), CPUSet.parse("20,52"), CPUSet()
    )
    assert main.assignment is AssignmentType.POD_EXCLUSIVE and main.cpus == CPUSet.parse("20,52")
    side, _ = e.add_container(spec, container("side"))
    assert side.cpus == budget - main.cpus
    assert e.verify() == []


def test_a_slice_outside_the_pod_budget_is_refused() -> None:
    e = engine()
    spec = pod_level("p", "4", apps=(container("main", "2", memory="1G"),))
    e.adopt_sandbox(spec, None, CPUSet.parse("20,52"))
    with pytest.raises(AdoptionError):
        e.adopt_container("p", container("main", "2", memory="1G"), CPUSet.parse("24,56"), CPUSet())
    assert e.verify() == []


def test_node_pool_fallback_follows_the_node_shared_pool() -> None:
    e = engine()
    got = e.place_in_node_pool(bare("x"), "app")
    assert got.assignment is AssignmentType.NODE_SHARED and got.cpus == e.node_shared_pool()
    e.adopt_sandbox(bare("a"), None, CPUSet.parse("9,41"))
    e.adopt_container("a", container("app", "2"), CPUSet.parse("9,41"), CPUSet([1]))
    after = e.assignment("x", "app")
    assert after is not None and after.cpus == e.node_shared_pool()
    assert not after.cpus & CPUSet.parse("9,41")
    assert e.verify() == []
