"""The in-place resize table of docs/design.md section 10, row by row, end to end over the runtime
simulator: for each row, kubelet 1.37's default gates and the opt-in, in both topology manager
scopes. After the step the test reads what the runtime applied (cpuset, mems, CFS quota) or
checks that the request failed with the row's text and nothing changed."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from plrm_harness import Session
from plrm_runtime import FakeRuntime
from resize_session import (
    GI,
    SCOPES,
    Events,
    budget_pod,
    classic_pod,
    config_text,
    errors,
    guaranteed,
    refused,
    resources_of,
    run,
    snapshot,
)

from nri_plrm.engine.resize import (
    CPU_STATIC_MESSAGE,
    INCONSISTENT_CPU_ALLOCATION_ERROR,
    MEMORY_STATIC_MESSAGE,
    POD_LEVEL_GATE_MESSAGE,
    POD_LEVEL_SLICE_MESSAGE,
    init_container_message,
)
from nri_plrm.engine.spec import ContainerKind, ContainerSpec, PodSpec
from nri_plrm.engine.topology_manager import TOPOLOGY_AFFINITY_MESSAGE
from nri_plrm.plugin.handlers import Plugin
from nri_plrm.translate.pod_to_cri import nri_pod_sandbox

NODE_CPU = "Node didn't have enough capacity: cpu, requested: 64000, capacity: 63000"


def burstable() -> PodSpec:
    res = ContainerSpec("b", requests={"cpu": 500, "memory": GI // 4}, limits={"cpu": 1000})
    return PodSpec(uid="uid-burst", name="burst", containers=(res,))


def with_init() -> PodSpec:
    init = replace(guaranteed("init", 2000), kind=ContainerKind.INIT)
    return replace(classic_pod(), init_containers=(init,))


def swap(pod: PodSpec, new: ContainerSpec) -> PodSpec:
    def one(items: tuple[ContainerSpec, ...]) -> tuple[ContainerSpec, ...]:
        return tuple(replace(new, kind=c.kind) if c.name == new.name else c for c in items)

    return replace(pod, init_containers=one(pod.init_containers), containers=one(pod.containers))


Seen = dict[str, tuple[str, str, int | None]]
"""Per container: the cpuset, mems and quota the runtime applied."""
Check = Callable[[Seen, Seen, str], None]
"""Before, after, scope: asserts what the step did."""


@dataclass(frozen=True)
class Row:
    """One row of the table and one column: a pod, a config, a step and its outcome."""

    row: str
    column: str
    pod: Callable[[], PodSpec]
    step: Callable[[PodSpec], PodSpec]
    """The pod as the resize asks for it."""
    config: dict[str, bool | str]
    refusal: str | None = None
    check: Check | None = None
    target: str = ""
    """The container resized; "" for the pod-level resources."""
    follow: bool = False
    """Reach the plugin through the API pod cache (a plain init container gets no request)."""


def unchanged(before: Seen, after: Seen, scope: str) -> None:
    assert after == before


def grew_to(name: str, n: int) -> Check:
    def check(before: Seen, after: Seen, scope: str) -> None:
        cpus, mems, quota = after[name]
        assert set(parse(before[name][0])) <= set(parse(cpus)) and len(parse(cpus)) == n
        assert quota == -1 and mems == before[name][1]
        others = {k: v for k, v in after.items() if k != name}
        assert all(not set(parse(v[0])) & set(parse(cpus)) for v in others.values())

    return check


def quota_is(name: str, quota: int) -> Check:
    def check(before: Seen, after: Seen, scope: str) -> None:
        assert after[name][:2] == before[name][:2] and after[name][2] == quota

    return check


def budget_grew(before: Seen, after: Seen, scope: str) -> None:
    assert after["main"] == before["main"]
    pool, main = parse(after["sidecar"][0]), parse(after["main"][0])
    if scope == "pod":
        assert len(pool) == 4 and not set(pool) & set(main)
        assert set(parse(before["sidecar"][0])) <= set(pool)
    else:
        assert after == before


def parse(cpus: str) -> list[int]:
    out: list[int] = []
    for part in filter(None, cpus.split(",")):
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


ON = {"cpus": True}
ROWS = [
    Row("R1", "default", burstable, lambda p: swap(p, ContainerSpec(
        "b", requests={"cpu": 1500, "memory": GI // 4}, limits={"cpu": 2000})), {},
        check=quota_is("b", 200000), target="b"),
    Row("R1", "opt-in", burstable, lambda p: swap(p, ContainerSpec(
        "b", requests={"cpu": 1500, "memory": GI // 4}, limits={"cpu": 2000})), ON,
        check=quota_is("b", 200000), target="b"),
    Row("R2", "default", classic_pod, lambda p: swap(p, guaranteed("app", 4000)), {},
        refusal=CPU_STATIC_MESSAGE, target="app"),
    Row("R2", "opt-in", classic_pod, lambda p: swap(p, guaranteed("app", 4000)), ON,
        check=grew_to("app", 4), target="app"),
    Row("R3", "default", classic_pod, lambda p: swap(p, guaranteed("helper", 800, GI // 4)), {},
        refusal=CPU_STATIC_MESSAGE, target="helper"),
    Row("R3", "opt-in", classic_pod, lambda p: swap(p, guaranteed("helper", 800, GI // 4)), ON,
        check=quota_is("helper", 80000), target="helper"),
    Row("R3", "opt-in integral", classic_pod,
        lambda p: swap(p, guaranteed("helper", 1000, GI // 4)), ON,
        refusal=INCONSISTENT_CPU_ALLOCATION_ERROR, target="helper"),
    Row("R4", "default", classic_pod, lambda p: swap(p, guaranteed("app", 2000, 2 * GI)), {},
        refusal=MEMORY_STATIC_MESSAGE, target="app"),
    Row("R4", "opt-in", classic_pod, lambda p: swap(p, guaranteed("app", 2000, 2 * GI)), ON,
        refusal=MEMORY_STATIC_MESSAGE, target="app"),
    Row("R5", "default", with_init, lambda p: swap(p, guaranteed("init", 3000)), {},
        refusal=init_container_message("init"), target="init", follow=True),
    Row("R5", "opt-in", with_init, lambda p: swap(p, guaranteed("init", 3000)), ON,
        refusal=init_container_message("init"), target="init", follow=True),
    Row("R6", "default", burstable, lambda p: swap(p, ContainerSpec(
        "b", requests={"cpu": 64000}, limits={"cpu": 64000})), {},
        refusal=NODE_CPU, target="b"),
    Row("R6", "opt-in", classic_pod, lambda p: swap(p, guaranteed("app", 63500)), ON,
        refusal=NODE_CPU, target="app"),
    Row("R7", "default", budget_pod, lambda p: swap(p, guaranteed("main", 3000)), {},
        refusal=CPU_STATIC_MESSAGE, target="main"),
    Row("R7", "opt-in", budget_pod, lambda p: swap(p, guaranteed("main", 3000)), ON,
        refusal=POD_LEVEL_SLICE_MESSAGE, target="main"),
    Row("R8", "default", budget_pod, lambda p: swap(p, ContainerSpec(
        "sidecar", requests={"cpu": 1500}, limits={"cpu": 1500})), {},
        refusal=CPU_STATIC_MESSAGE, target="sidecar"),
    Row("R8", "opt-in", budget_pod, lambda p: swap(p, ContainerSpec(
        "sidecar", requests={"cpu": 1500}, limits={"cpu": 1500})), ON,
        check=quota_is("sidecar", 150000), target="sidecar"),
    Row("R9", "default", budget_pod, lambda p: budget_pod(6), {}, check=unchanged),
    Row("R9", "gate off", budget_pod, lambda p: budget_pod(6), {"pod_level": False},
        refusal=POD_LEVEL_GATE_MESSAGE),
    Row("R9", "opt-in", budget_pod, lambda p: budget_pod(6), {"budget_cpus": True},
        check=budget_grew),
    Row("R10", "default", budget_pod, lambda p: budget_pod(4, 5 * GI), {}, check=unchanged),
    Row("R10", "opt-in", budget_pod, lambda p: budget_pod(4, 5 * GI), {"budget_cpus": True},
        check=unchanged),
    Row("R11", "opt-in", classic_pod, lambda p: swap(p, guaranteed("app", 16000)), ON,
        refusal=TOPOLOGY_AFFINITY_MESSAGE, target="app"),
]  # fmt: skip


def seen(rt: FakeRuntime, sandbox: object) -> Seen:
    out: Seen = {}
    for rc in rt.containers.values():
        if rc.msg.pod_sandbox_id == sandbox.id:  # type: ignore[attr-defined]
            out[rc.msg.name] = (rc.applied.cpus, rc.applied.mems, rc.applied.quota)
    return out


@pytest.mark.parametrize("scope", SCOPES)
@pytest.mark.parametrize("case", ROWS, ids=lambda r: f"{r.row}-{r.column}")
def test_resize_table_row(tmp_path: Path, case: Row, scope: str) -> None:
    pod = case.pod()
    resized = case.step(pod)
    text = config_text(scope, **case.config)  # type: ignore[arg-type]

    async def body(rt: FakeRuntime, s: Session, plugin: Plugin) -> None:
        sandbox = await rt.launch(pod)
        before = seen(rt, sandbox)
        if case.follow:
            state, count = snapshot(plugin), errors(plugin)
            plugin.follow_pod(resized)
            await rt.settle()
            assert snapshot(plugin) == state and errors(plugin) == count + 1
            assert [m for _, m in events.posted] == [case.refusal]
            return
        if case.target:
            cid = rt.id_of(sandbox, case.target)
            message = resources_of(resized, case.target)
            if case.refusal is not None:
                call = s.sim.update_container(sandbox, rt.containers[cid].msg, message)
                await refused(rt, plugin, call, case.refusal)
                return
            await rt.update(cid, message)
        else:
            call = s.sim.update_pod_sandbox(
                sandbox, None, nri_pod_sandbox(resized).linux.pod_resources
            )
            if case.refusal is not None:
                await refused(rt, plugin, call, case.refusal)
                return
            await call
            await rt.settle()
        assert case.check is not None
        case.check(before, seen(rt, sandbox), scope)

    events = Events()
    run(tmp_path, text, "api", pod, body, events)
