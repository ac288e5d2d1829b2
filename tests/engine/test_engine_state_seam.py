"""The kubelet's seam inside the engine: the CPU and memory states record what the static
policies tell them, adoption steers the CPU policy with ``exclude`` instead of editing its
state, and admission, adoption and a budget resize meet one pod budget check."""

from __future__ import annotations

import re

import pytest
from cpu_pods import container, pod_level

from nri_plrm.base.cpuset import CPUSet
from nri_plrm.config.file import parse_config
from nri_plrm.engine.adoption import AdoptionError
from nri_plrm.engine.cpu_assignment import CPUAllocationError
from nri_plrm.engine.cpu_state import POLICY_STATIC, CPUState, parse_state
from nri_plrm.engine.facade import Engine
from nri_plrm.engine.memory_state import Block, MemoryState
from nri_plrm.engine.pod_budget import cpu_pool_emptied
from nri_plrm.engine.spec import AdmissionError
from nri_plrm.topology.machines import MACHINES

POD_SCOPE = '[topology_manager]\npolicy = "single-numa-node"\nscope = "pod"\n'


def engine(extra: str = "") -> Engine:
    return Engine(MACHINES["default"], parse_config(POD_SCOPE + extra).engine_config())


def test_cpu_state_records_entries_pod_entries_and_slices() -> None:
    state = CPUState(CPUSet.parse("0-7"))
    state.set_default(CPUSet.parse("0-3"))
    state.set_pod("p", CPUSet.parse("4-7"))
    state.set_cpuset("p", "main", CPUSet.parse("4-5"))
    state.mark_pool_consumers("p", ["main"])
    state.set_cpuset("p", "side", CPUSet.parse("6-7"))
    assert state.pod_shared_pool("p") == CPUSet.parse("6-7")
    assert state.get_cpuset_or_default("p", "gone") == CPUSet.parse("0-3")
    saved = parse_state(state.to_dict(POLICY_STATIC), POLICY_STATIC)
    assert saved.pool_consumers == {"p": {"main"}} and saved.pod_entries == state.pod_entries()
    assert state.delete("p", "main") == CPUSet.parse("4-5")
    assert not state.is_pool_consumer("p", "main")
    assert state.pod_shared_pool("p") == CPUSet.parse("4-7")
    assert state.delete("p", "side") == CPUSet.parse("6-7")
    assert state.assignments() == {} and state.pod_cpus("p") == CPUSet.parse("4-7")
    state.remove_pod("p")
    assert state.pod_entries() == {}


def test_memory_state_keeps_a_budget_pods_map_until_the_pod_goes() -> None:
    state = MemoryState({})
    state.set_pod_blocks("p", [Block((0,), "memory", 4)])
    state.set_blocks("p", "side", [Block((0,), "memory", 4)])
    state.mark_shared("p", "side")
    state.set_blocks("c", "app", [Block((0,), "memory", 1)])
    assert state.delete("p", "side") is not None and "side" not in state.shared("p")
    assert dict(state.pod_containers("p")) == {} and "p" in state.to_dict(1, "Static")["entries"]
    state.delete("c", "app")
    assert "c" not in state.to_dict(1, "Static")["entries"]
    entries, budget = state.remove_pod("p")
    assert entries == {} and budget is not None and sorted(state.pods()) == []


def test_allocate_cpus_never_takes_excluded_cpus() -> None:
    cpu = engine().cpu_manager
    free = cpu.available_cpus()
    keep = CPUSet(sorted(free)[: len(free) - 2])
    got = cpu.allocate_cpus(2, None, exclude=keep)
    assert got == free - keep and cpu.default_cpuset == cpu.state.default
    assert not cpu.default_cpuset & got
    before = cpu.default_cpuset
    with pytest.raises(CPUAllocationError):
        cpu.allocate_cpus(1, None, exclude=cpu.available_cpus())
    assert cpu.default_cpuset == before


def test_admission_and_adoption_meet_the_same_pod_budget_check() -> None:
    main, side = container("main", "4", memory="1G"), container("side")
    spec = pod_level("p", "4", apps=(main, side))
    admitted = engine()
    admitted.admit_sandbox(spec)
    admitted.add_container(spec, side)
    with pytest.raises(AdmissionError) as refused:
        admitted.add_container(spec, main)
    assert refused.value.message == cpu_pool_emptied()
    adopted = engine()
    budget = adopted.adopt_sandbox(spec, None, CPUSet())
    adopted.add_container(spec, side)
    before = adopted.snapshot()
    with pytest.raises(AdoptionError, match=re.escape(cpu_pool_emptied())):
        adopted.adopt_container("p", main, budget, CPUSet())
    assert adopted.snapshot() == before
