"""Checkpoints that are well-formed JSON with a valid checksum but wrong inside (issue 7, bad
input): a real state file of a populated node, mutated at random places (keys deleted, values
replaced by other JSON values, cpusets made to overlap) and saved through the store so the
checksum matches. Loading must either report the file unusable (and start empty, Synchronize
then adopts what the runtime has) or produce an engine whose invariants hold: a checkpoint
must never smuggle in a CPU owned twice or a pool that does not add up.
"""

from __future__ import annotations

import asyncio
import copy
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nri_plrm.checkpoint.store import CheckpointStore
from nri_plrm.config.file import parse_config
from nri_plrm.engine.facade import Engine
from nri_plrm.engine.spec import ContainerKind, ContainerSpec, PodSpec
from nri_plrm.ledger import NodeLedger
from nri_plrm.plugin.handlers import Plugin
from nri_plrm.topology.machines import MACHINES
from nri_plrm.translate.pod_to_cri import creation_order, nri_container, nri_pod_sandbox

POD_SCOPE = '[topology_manager]\npolicy = "single-numa-node"\nscope = "pod"\n'
MACHINE = MACHINES["default"]
GI = 1 << 30
REPLACEMENTS: list[Any] = [
    None,
    -1,
    0,
    1,
    10**12,
    1.5,
    True,
    "",
    "0",
    "1",
    "0-63",
    "0-1023",
    "5-3",
    "garbage",
    [],
    {},
    [1, 2],
    {"x": 1},
]


def engine_config() -> Any:
    return parse_config(POD_SCOPE).engine_config()


def populated_state() -> dict[str, Any]:
    """The checkpoint data of a node with pod-level, classic and BestEffort pods."""
    plugin = Plugin(NodeLedger(Engine(MACHINE, engine_config())))
    one = {"cpu": 1000, "memory": GI}
    two = {"cpu": 2000, "memory": GI}
    budget = {"cpu": 4000, "memory": 4 * GI}
    pods = [
        PodSpec(
            uid=f"pl-{i}",
            name=f"pl-{i}",
            init_containers=(ContainerSpec("proxy", ContainerKind.SIDECAR),),
            containers=(ContainerSpec("main", requests=two, limits=two), ContainerSpec("logs")),
            requests=budget,
            limits=budget,
        )
        for i in range(3)
    ]
    pods += [
        PodSpec(
            uid=f"cl-{i}",
            name=f"cl-{i}",
            containers=(
                ContainerSpec("a", requests=one, limits=one),
                ContainerSpec("b", requests=one, limits=one),
            ),
        )
        for i in range(3)
    ]
    pods.append(PodSpec(uid="be", name="be", containers=(ContainerSpec("c"),)))

    async def fill() -> None:
        for spec in pods:
            sandbox = nri_pod_sandbox(spec)
            await plugin.run_pod_sandbox(sandbox)
            for ctr in creation_order(spec):
                await plugin.create_container(sandbox, nri_container(spec, ctr))

    asyncio.run(fill())
    assert plugin.ledger.engine.verify() == []
    return plugin.ledger.snapshot(1)


STATE = populated_state()


def paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            out += paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += paths(v, (*prefix, i))
    return out


ALL_PATHS = [p for p in paths(STATE) if p]


def get(value: Any, path: tuple[Any, ...]) -> Any:
    for step in path:
        value = value[step]
    return value


STRING_PATHS = [p for p in ALL_PATHS if isinstance(get(STATE, p), str)]


def mutate(data: Any, path: tuple[Any, ...], op: str, replacement: Any) -> None:
    parent = get(data, path[:-1])
    key = path[-1]
    if op == "delete":
        del parent[key]
    else:
        parent[key] = replacement


def load(tmp: Path, data: dict[str, Any]) -> tuple[Plugin, str | None]:
    state = tmp / "state"
    for leftover in state.glob("*") if state.exists() else ():
        leftover.unlink()
    CheckpointStore(state).save(data)
    plugin = Plugin(NodeLedger(Engine(MACHINE, engine_config()), store=CheckpointStore(state)))
    return plugin, plugin.ledger.load()


def test_the_unmutated_state_loads(tmp_path: Path) -> None:
    plugin, problem = load(tmp_path, copy.deepcopy(STATE))
    assert problem is None
    assert plugin.ledger.engine.verify() == []
    assert len(plugin.ledger.engine.pods()) == 7


@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    edits=st.lists(
        st.tuples(
            st.sampled_from(ALL_PATHS),
            st.sampled_from(["delete", "replace"]),
            st.sampled_from(REPLACEMENTS),
        ),
        min_size=1,
        max_size=3,
    )
)
def test_mutated_checkpoints_are_refused_or_consistent(
    tmp_path: Path, edits: list[tuple[tuple[Any, ...], str, Any]]
) -> None:
    data = copy.deepcopy(STATE)
    for path, op, replacement in edits:
        try:
            mutate(data, path, op, replacement)
        except (KeyError, IndexError, TypeError):
            continue  # an earlier edit removed or replaced this path
    plugin, problem = load(tmp_path, data)
    if problem is None:
        assert plugin.ledger.engine.verify() == [], (
            f"checkpoint accepted with broken invariants: {edits}"
        )
    else:
        assert plugin.ledger.engine.pods() == (), (
            "an unusable checkpoint must leave the plugin empty"
        )


@pytest.mark.parametrize("cpus", ["1", "0-63", "2-3"])
def test_every_cpuset_string_set_to_the_same_cpus(tmp_path: Path, cpus: str) -> None:
    """Every exclusive slice claims the same CPUs: refused or consistent, never accepted as is."""
    data = copy.deepcopy(STATE)
    for path in STRING_PATHS:
        value = get(data, path)
        if value and all(c.isdigit() or c in ",-" for c in value):
            mutate(data, path, "replace", cpus)
    plugin, problem = load(tmp_path, data)
    if problem is None:
        assert plugin.ledger.engine.verify() == []
