"""Shared steps of the in-place resize tests over the runtime simulator: a plugin served on a
unix socket, the kubelet's resize messages, and "refused, nothing changed" checks."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from plrm_harness import Session, serve
from plrm_runtime import FakeRuntime

from nri_plrm.checkpoint.store import CheckpointStore
from nri_plrm.config.file import parse_config
from nri_plrm.engine.facade import Engine
from nri_plrm.engine.spec import ContainerSpec, PodSpec
from nri_plrm.ledger import NodeLedger
from nri_plrm.observability.metrics import Metrics
from nri_plrm.plugin.handlers import Plugin
from nri_plrm.podsource.base import StaticPodSpecSource
from nri_plrm.proto import nri_api_pb2 as api
from nri_plrm.topology.machines import MACHINES
from nri_plrm.translate.pod_to_cri import nri_container
from nri_plrm.ttrpc.messages import TtrpcError

GI = 1 << 30
SCOPES = ("pod", "container")
MODES = ("api", "nri")


def config_text(
    scope: str,
    *,
    cpus: bool = False,
    pod_level: bool = True,
    budget_cpus: bool = False,
    policy: str = "single-numa-node",
) -> str:
    """A config with the topology manager's scope and policy and the ``[resize]`` keys."""
    return (
        f'[topology_manager]\npolicy = "{policy}"\nscope = "{scope}"\n'
        f"[resize]\nexclusive_cpus = {str(cpus).lower()}\n"
        f"pod_level_resources = {str(pod_level).lower()}\n"
        f"pod_budget_cpus = {str(budget_cpus).lower()}\n"
    )


def guaranteed(name: str, millis: int, memory: int = GI) -> ContainerSpec:
    """A container whose requests equal its limits."""
    res = {"cpu": millis, "memory": memory}
    return ContainerSpec(name, requests=res, limits=res)


def classic_pod() -> PodSpec:
    """Exclusive ``app`` (2 CPUs) and a 500m ``helper``: 2.5 CPUs, classic in both modes."""
    return PodSpec(
        uid="uid-classic",
        name="classic",
        containers=(guaranteed("app", 2000), guaranteed("helper", 500, GI // 4)),
    )


def budget_pod(cpus: int = 4, memory: int = 4 * GI) -> PodSpec:
    """A pod budget with an exclusive ``main`` (2 CPUs) and a ``sidecar`` without resources."""
    res = {"cpu": cpus * 1000, "memory": memory}
    return PodSpec(
        uid="uid-budget",
        name="budget",
        requests=res,
        limits=res,
        containers=(guaranteed("main", 2000), ContainerSpec("sidecar")),
    )


Body = Callable[[FakeRuntime, Session, Plugin], Awaitable[None]]


class Events:
    """The Events the plugin posts (reason, message), as the API-mode recorder receives them."""

    def __init__(self) -> None:
        self.posted: list[tuple[str, str]] = []

    def record(self, pod_uid: str, namespace: str, name: str, reason: str, message: str) -> None:
        self.posted.append((reason, message))


def run(
    tmp_path: Path, text: str, mode: str, pod: PodSpec, body: Body, events: Events | None = None
) -> Plugin:
    """Serve a plugin (API mode knows ``pod``; NRI-only infers it) and run ``body`` against the
    runtime simulator; the engine's invariants hold afterwards."""
    metrics = Metrics()
    plugin = Plugin(
        NodeLedger(
            Engine(MACHINES["default"], parse_config(text).engine_config()),
            store=CheckpointStore(tmp_path / "state"),
            observer=metrics,
        ),
        pod_specs=StaticPodSpecSource((pod,)) if mode == "api" else None,
        metrics=metrics,
        events=events,
    )
    plugin.ledger.open()

    async def main() -> None:
        async with serve(plugin, str(tmp_path / "nri.sock")) as session:
            await body(session.runtime, session, plugin)
        assert plugin.ledger.engine.verify() == []

    asyncio.run(main())
    return plugin


def resources_of(pod: PodSpec, name: str) -> api.LinuxResources:
    """The resources the kubelet sends in UpdateContainerResources for the resized spec."""
    spec = pod.container(name)
    assert spec is not None
    return nri_container(pod, spec).linux.resources


def snapshot(plugin: Plugin) -> str:
    """The ledger's whole state, for "nothing changed" comparisons."""
    return json.dumps(plugin.ledger.snapshot(0), sort_keys=True, default=str)


async def refused(
    rt: FakeRuntime, plugin: Plugin, call: Awaitable[object], message: str
) -> TtrpcError:
    """The request fails with ``message`` and nothing changes."""
    state = snapshot(plugin)
    applied = {cid: (rc.applied.cpus, rc.applied.quota) for cid, rc in rt.containers.items()}
    with pytest.raises(TtrpcError) as info:
        await call
    assert message in str(info.value)
    assert snapshot(plugin) == state
    await rt.settle()
    assert {cid: (rc.applied.cpus, rc.applied.quota) for cid, rc in rt.containers.items()} == (
        applied
    )
    return info.value


def errors(plugin: Plugin, resource: str = "cpu") -> float:
    """``resource_manager_allocation_errors_total`` for ``resource``, both sources."""
    assert plugin.metrics is not None
    total = 0.0
    for source in ("pod", "node"):
        value = plugin.metrics.registry.get_sample_value(
            "resource_manager_allocation_errors_total",
            {"resource_name": resource, "source": source},
        )
        total += value or 0.0
    return total


def reopen(tmp_path: Path, text: str) -> Plugin:
    """A new plugin on the same state directory (a restart)."""
    again = Plugin(
        NodeLedger(
            Engine(MACHINES["default"], parse_config(text).engine_config()),
            store=CheckpointStore(tmp_path / "state"),
        )
    )
    again.ledger.open()
    return again
