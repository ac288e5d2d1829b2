"""Property tests: exclusivity across pods, release round-trips, checkpoint round-trips, and
fuzzing of the state decoder (``from_dict``) and of ``take_by_topology``."""

from __future__ import annotations

from typing import Any

import pytest
from cpu_pods import container, make_pod, pod_level
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nri_plrm.base.cpuset import CPUSet
from nri_plrm.engine import cpu_takes
from nri_plrm.engine.cpu_assignment import CPUAllocationError, TakeOptions, take_by_topology
from nri_plrm.engine.cpu_manager import CPUManager
from nri_plrm.engine.cpu_options import CPUManagerConfig
from nri_plrm.engine.cpu_state import CPUStateError
from nri_plrm.engine.spec import AdmissionError, ContainerKind, PodSpec, TopologyHint
from nri_plrm.topology.machines import MACHINES

MACHINE = MACHINES["topoDualSocketMultiNumaPerSocketHT"]
CONFIG = CPUManagerConfig(reserved_cpu_count=2)
FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def pods(draw: st.DrawFn, uid: str) -> PodSpec:
    """A classic Guaranteed pod or a pod-level pod with exclusive and shared containers."""
    if draw(st.booleans()):
        cpus = draw(st.lists(st.integers(1, 12), min_size=1, max_size=3))
        init = draw(st.lists(st.integers(1, 8), max_size=1))
        return PodSpec(
            uid=uid,
            init_containers=tuple(
                container(f"i{k}", str(c), str(c), ContainerKind.INIT) for k, c in enumerate(init)
            ),
            containers=tuple(container(f"c{k}", str(c), str(c)) for k, c in enumerate(cpus)),
        )
    exclusive = draw(st.lists(st.integers(1, 6), max_size=3))
    shared = draw(st.integers(0, 2))
    budget = sum(exclusive) + draw(st.integers(0 if shared == 0 else 1, 4))
    apps = [container(f"e{k}", str(c), str(c)) for k, c in enumerate(exclusive)]
    apps += [container(f"s{k}") for k in range(shared)]
    return pod_level(uid, str(max(budget, 1)), apps=apps)


def _check_invariants(manager: CPUManager) -> None:
    entries = manager.entries()
    bubbles = manager.pod_entries()
    held: dict[str, CPUSet] = {}
    for uid, names in entries.items():
        held[uid] = CPUSet().union(*names.values())
        if uid in bubbles:
            assert held[uid] <= bubbles[uid]
    for uid, bubble in bubbles.items():
        held[uid] = held.get(uid, CPUSet()) | bubble
    uids = sorted(held)
    for i, a in enumerate(uids):
        assert held[a].is_disjoint(manager.default_cpuset)
        for b in uids[i + 1 :]:
            assert held[a].is_disjoint(held[b]), (a, b)
    total = manager.default_cpuset.union(*held.values())
    assert total == MACHINE.all_cpus
    assert manager.reserved_cpus <= manager.default_cpuset


def _admit(manager: CPUManager, pod: PodSpec, hint: TopologyHint | None) -> None:
    try:
        if pod.has_pod_level_resources:
            manager.allocate_pod(pod, hint)
        else:
            for c in pod.all_containers():
                manager.allocate(pod, c, hint)
    except AdmissionError:
        manager.remove_pod(pod.uid)


@FAST
@given(st.data())
def test_no_cpu_is_ever_held_by_two_pods_and_release_round_trips(data: st.DataObject) -> None:
    manager = CPUManager(MACHINE, CONFIG)
    initial = manager.default_cpuset
    admitted: list[PodSpec] = []
    for n in range(data.draw(st.integers(1, 8))):
        pod = data.draw(pods(f"pod{n}"))
        mask = data.draw(st.sampled_from([None, 0b0001, 0b0010, 0b0011, 0b1100, 0b1111]))
        hint = None if mask is None else TopologyHint(mask, True)
        _admit(manager, pod, hint)
        _check_invariants(manager)
        admitted.append(pod)
    for pod in data.draw(st.permutations(admitted)):
        for c in pod.all_containers():
            manager.remove_container(pod.uid, c.name)
            _check_invariants(manager)
        manager.remove_pod(pod.uid)
    assert manager.default_cpuset == initial
    assert manager.entries() == {}
    assert manager.pod_entries() == {}


@FAST
@given(st.data())
def test_to_dict_from_dict_round_trips(data: st.DataObject) -> None:
    manager = CPUManager(MACHINE, CONFIG)
    for n in range(data.draw(st.integers(0, 6))):
        _admit(manager, data.draw(pods(f"pod{n}")), None)
    state = manager.snapshot()
    restored = CPUManager.restore(MACHINE, CONFIG, state)
    assert restored.snapshot() == state
    assert restored.entries() == manager.entries()
    assert restored.pod_entries() == manager.pod_entries()
    assert restored.default_cpuset == manager.default_cpuset


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=10,
)


@settings(max_examples=200, deadline=None)
@given(
    st.fixed_dictionaries(
        {},
        optional={
            "policyName": st.sampled_from(["static", "none"]) | JSON,
            "defaultCpuSet": st.sampled_from(["", "0-79", "2-79", "0-1,4-79", "x"]) | JSON,
            "entries": st.dictionaries(
                st.text(max_size=4),
                st.dictionaries(st.text(max_size=4), st.sampled_from(["2-3", "0", "a"]) | JSON),
                max_size=2,
            )
            | JSON,
            "podEntries": st.dictionaries(st.text(max_size=4), st.sampled_from(["2-3"]) | JSON)
            | JSON,
            "podPoolConsumers": JSON,
            "podInitSlices": JSON,
        },
    )
    | JSON
)
def test_from_dict_rejects_bad_state_with_state_errors_only(data: Any) -> None:
    try:
        restored = CPUManager.restore(MACHINE, CONFIG, data)
    except CPUStateError:
        return
    assert restored.default_cpuset <= MACHINE.all_cpus


@settings(max_examples=200, deadline=None)
@given(
    available=st.sets(st.integers(0, 79)),
    n=st.integers(0, 80),
    numa=st.booleans(),
    cores=st.booleans(),
    full=st.booleans(),
)
def test_take_by_topology_returns_n_available_cpus_or_an_error(
    available: set[int], n: int, numa: bool, cores: bool, full: bool
) -> None:
    options = TakeOptions(
        distribute_cpus_across_numa=numa,
        distribute_cpus_across_cores=cores and not numa,
        full_pcpus_only=full,
    )
    pool = CPUSet(available)
    try:
        got = take_by_topology(MACHINE, pool, n, options=options)
    except CPUAllocationError:
        assert n > len(pool)
        return
    assert len(got) == n
    assert got <= pool


@FAST
@given(st.integers(1, 60))
def test_allocate_then_remove_restores_the_default_set(cpus: int) -> None:
    manager = CPUManager(MACHINE, CONFIG)
    pod = make_pod("p", "c", str(cpus), str(cpus))
    manager.allocate(pod, pod.containers[0], None)
    assert len(manager.assignment("p", "c") or CPUSet()) == cpus
    manager.remove_container("p", "c")
    assert manager.default_cpuset == MACHINE.all_cpus


@settings(max_examples=60, deadline=None)
@given(
    questions=st.lists(
        st.tuples(st.sets(st.integers(0, 79), min_size=1, max_size=20), st.integers(1, 6)),
        min_size=1,
        max_size=10,
    ),
    distribute=st.booleans(),
)
def test_kept_takes_equal_take_by_topology(
    questions: list[tuple[set[int], int]], distribute: bool
) -> None:
    """The manager keeps its last ``takeByTopology`` answers: asked in turn (repeats, more than
    it keeps), each equals the function's answer for the same free CPUs."""
    options = {"distribute-cpus-across-numa": distribute}
    manager = CPUManager(MACHINE, CPUManagerConfig(reserved_cpu_count=0, options=options))
    take = TakeOptions(distribute_cpus_across_numa=distribute)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(cpu_takes, "RECENT_TAKES", 3)
        for cpus, n in questions * 2:
            available = CPUSet(cpus)
            try:
                want = take_by_topology(MACHINE, available, n, options=take)
            except CPUAllocationError as err:
                with pytest.raises(CPUAllocationError, match=str(err).split(":")[0]):
                    manager._take_by_topology(available, n)
                continue
            assert manager._take_by_topology(available, n) == want
