"""Absurd pod and container values through the NRI path (issue 7, bad input): 0 CPUs, 10,000
CPUs, negative or overflowing quota, period 0, memory larger than the machine, absurd
hugepages. Every case ends in a decision or a clear ``NRIError`` naming the pod, and the
plugin's state stays intact: a refused request leaves the engine exactly as it was, the
engine's invariants hold, and the durable state equals the live one.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nri_plrm.checkpoint.store import CheckpointStore
from nri_plrm.config.file import parse_config
from nri_plrm.engine.facade import Engine
from nri_plrm.ledger import NodeLedger
from nri_plrm.nri.handlers import NRIError
from nri_plrm.plugin.handlers import Plugin
from nri_plrm.proto import nri_api_pb2 as api
from nri_plrm.topology.machines import MACHINES

POD_SCOPE = '[topology_manager]\npolicy = "single-numa-node"\nscope = "pod"\n'
MACHINE = MACHINES["default"]  # 64 CPUs, 4 NUMA nodes
INT64_MAX = (1 << 63) - 1
UINT64_MAX = (1 << 64) - 1


def plugin(store: Path | None = None) -> Plugin:
    engine = Engine(MACHINE, parse_config(POD_SCOPE).engine_config())
    p = Plugin(NodeLedger(engine, store=None if store is None else CheckpointStore(store)))
    if store is not None:
        p.ledger.open()
    return p


def resources(
    shares: int | None,
    quota: int | None,
    period: int | None,
    memory: int | None,
    hugepages: tuple[tuple[str, int], ...] = (),
) -> api.LinuxResources:
    res = api.LinuxResources()
    if shares is not None:
        res.cpu.shares.value = shares
    if quota is not None:
        res.cpu.quota.value = quota
    if period is not None:
        res.cpu.period.value = period
    if memory is not None:
        res.memory.limit.value = memory
    for size, limit in hugepages:
        res.hugepage_limits.append(api.HugepageLimit(page_size=size, limit=limit))
    return res


def sandbox(uid: str, res: api.LinuxResources | None) -> api.PodSandbox:
    pod = api.PodSandbox(id=f"sb-{uid}", uid=uid, name=uid, namespace="badinput")
    if res is not None:
        pod.linux.pod_resources.CopyFrom(res)
    return pod


def container(pod: api.PodSandbox, name: str, res: api.LinuxResources | None) -> api.Container:
    ctr = api.Container(id=f"{pod.uid}-{name}", pod_sandbox_id=pod.id, name=name)
    ctr.labels["io.kubernetes.pod.uid"] = pod.uid
    if res is not None:
        ctr.linux.resources.CopyFrom(res)
    return ctr


def state(p: Plugin) -> dict[str, object]:
    """The engine's snapshot."""
    return p.ledger.engine.snapshot()


def outcome(p: Plugin, pod: api.PodSandbox, ctrs: list[api.Container]) -> list[str]:
    """Run the pod and create its containers; returns the error texts of refused requests.

    A refused request must leave the engine's state unchanged; nothing but NRIError may
    escape (the stub turns it into the runtime's error
    status)."""

    async def go() -> list[str]:
        errors = []
        before = state(p)
        try:
            await p.run_pod_sandbox(pod)
        except NRIError as exc:
            assert state(p) == before, f"refused sandbox changed the engine: {exc}"
            return [str(exc)]
        for ctr in ctrs:
            before = state(p)
            try:
                await p.create_container(pod, ctr)
            except NRIError as exc:
                assert state(p) == before, f"refused container changed state: {exc}"
                errors.append(str(exc))
        return errors

    errors = asyncio.run(go())
    assert p.ledger.engine.verify() == []
    return errors


GI = 1 << 30
TOO_MUCH_MEMORY = 1 << 50  # 1 PiB
ANY_REJECTION = ("TopologyAffinityError", "UnexpectedAdmissionError")
CASES: dict[
    str, tuple[api.LinuxResources | None, api.LinuxResources | None, tuple[str, ...] | None]
] = {
    # name: (pod resources, container resources, one of the expected error fragments, or None
    # when the values must be accepted)
    "zero cpus everywhere": (
        resources(0, 0, 0, 0),
        resources(0, 0, 0, 0),
        None,
    ),
    "10000-cpu pod budget": (
        resources(10_000 * 1024, 10_000 * 100_000, 100_000, 4 * GI),
        resources(10_000 * 1024, 10_000 * 100_000, 100_000, 4 * GI),
        ("TopologyAffinityError",),
    ),
    "10000-cpu exclusive container in a classic pod": (
        None,
        resources(10_000 * 1024, 10_000 * 100_000, 100_000, 4 * GI),
        ("badinput/absurd",),
    ),
    "negative quota": (
        resources(2048, -5, 100_000, GI),
        resources(2048, -5, 100_000, GI),
        None,
    ),
    "quota at int64 max": (
        resources(2048, INT64_MAX, 100_000, GI),
        resources(2048, INT64_MAX, 100_000, GI),
        None,
    ),
    "shares at uint64 max": (
        resources(UINT64_MAX, 200_000, 100_000, GI),
        resources(UINT64_MAX, 200_000, 100_000, GI),
        None,
    ),
    "period zero": (
        resources(2048, 200_000, 0, GI),
        resources(2048, 200_000, 0, GI),
        None,
    ),
    "memory larger than the machine": (
        resources(2048, 200_000, 100_000, TOO_MUCH_MEMORY),
        resources(2048, 200_000, 100_000, TOO_MUCH_MEMORY),
        ANY_REJECTION,
    ),
    "exclusive container with memory larger than the machine": (
        None,
        resources(2048, 200_000, 100_000, TOO_MUCH_MEMORY),
        ("badinput/absurd",),
    ),
    "negative memory limit": (
        resources(2048, 200_000, 100_000, -1),
        resources(2048, 200_000, 100_000, -1),
        None,
    ),
    "malformed hugepage size": (
        None,
        resources(1024, 100_000, 100_000, GI, (("2XB", 1 << 21),)),
        ("badinput/absurd",),
    ),
    "hugepages larger than the machine": (
        None,
        resources(1024, 100_000, 100_000, GI, (("2MB", 1 << 50),)),
        ("badinput/absurd",),
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_absurd_values_end_in_a_decision_or_a_clear_error(name: str, tmp_path: Path) -> None:
    pod_res, ctr_res, expected = CASES[name]
    p = plugin(tmp_path / "state")
    pod = sandbox("absurd", pod_res)
    errors = outcome(p, pod, [container(pod, "main", ctr_res)])
    if expected is None:
        assert errors == [], errors
    else:
        assert len(errors) == 1 and any(e in errors[0] for e in expected), errors
    # the durable state is the live state
    again = plugin(tmp_path / "state")
    assert state(again) == state(p)
    # and the node still works: a normal exclusive pod is placed
    good = sandbox("good", resources(2048, 200_000, 100_000, GI))
    main = container(good, "main", resources(1024, 100_000, 100_000, GI))
    assert outcome(again, good, [main]) == []
    assert again.ledger.engine.assignment("good", "main") is not None


def test_a_rejected_10000_cpu_pod_gets_the_kubelet_reason_and_message_and_the_cause() -> None:
    p = plugin()
    pod = sandbox("huge", resources(10_000 * 1024, 10_000 * 100_000, 100_000, 4 * GI))
    (error,) = outcome(p, pod, [])
    assert error.startswith(
        "TopologyAffinityError: Pod Scope pod with pod-level resources failed admission under "
        "pod-scope topology manager; cause: pod budget asks 10000 exclusive CPUs, no NUMA node of "
        "this machine has 10000 CPUs"
    )


optional_u64 = st.one_of(
    st.none(),
    st.sampled_from([0, 1, 2, 1023, 1024, 1025, 2048, 10_000 * 1024, UINT64_MAX]),
    st.integers(min_value=0, max_value=UINT64_MAX),
)
optional_i64 = st.one_of(
    st.none(),
    st.sampled_from([-1, -5, 0, 1000, 100_000, 200_000, 10_000 * 100_000, INT64_MAX]),
    st.integers(min_value=-(1 << 63), max_value=INT64_MAX),
)
page_sizes = st.sampled_from(["2MB", "1GB", "64KB", "2XB", "", "0MB", "99999999999GB"])
linux_resources = st.builds(
    resources,
    optional_u64,
    optional_i64,
    optional_u64,
    optional_i64,
    st.lists(st.tuples(page_sizes, st.integers(min_value=0, max_value=UINT64_MAX)), max_size=2).map(
        tuple
    ),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    pods=st.lists(
        st.tuples(
            st.one_of(st.none(), linux_resources),
            st.lists(st.one_of(st.none(), linux_resources), min_size=1, max_size=3),
        ),
        min_size=1,
        max_size=4,
    )
)
def test_fuzz_resources_only_raise_nri_errors_and_keep_state_intact(
    pods: list[tuple[api.LinuxResources | None, list[api.LinuxResources | None]]],
) -> None:
    p = plugin()
    for i, (pod_res, ctrs) in enumerate(pods):
        pod = sandbox(f"fz-{i}", pod_res)
        outcome(p, pod, [container(pod, f"c{k}", r) for k, r in enumerate(ctrs)])
    # what stayed is releasable: removing every pod gives back the whole node
    for i in range(len(pods)):
        p.remove_pod_sandbox(sandbox(f"fz-{i}", None))
    assert p.ledger.engine.verify() == []
    assert p.ledger.engine.pods() == ()
    fresh = Engine(MACHINE, p.ledger.engine.config)
    assert p.ledger.engine.node_shared_pool() == fresh.node_shared_pool()
