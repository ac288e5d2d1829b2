"""A cold Synchronize answers and checkpoints exactly as before the fast paths of issue 28
(finding 8): the reply and the state file written, byte for byte, on mixed nodes under each
Topology Manager policy and scope (digests recorded from the code before those changes)."""

from __future__ import annotations

import asyncio
import hashlib
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from plrm_runtime import FakeRuntime

from bench.plugin import SPEC_256, pod_level
from bench.synchronize import _Direct
from nri_plrm.checkpoint.store import CheckpointStore
from nri_plrm.config.file import parse_config
from nri_plrm.engine.facade import Engine
from nri_plrm.engine.spec import ContainerKind, ContainerSpec, PodSpec
from nri_plrm.ledger import NodeLedger
from nri_plrm.plugin.handlers import Plugin
from nri_plrm.proto import nri_api_pb2 as api
from nri_plrm.topology.synthetic import synthetic_topology

GI = 1 << 30


def _pods() -> list[PodSpec]:
    """BestEffort, Burstable and Guaranteed classic pods, a BestEffort container beside a
    Guaranteed one, init containers and pod-level pods."""
    two = {"cpu": 2000, "memory": GI}
    half = {"cpu": 500, "memory": GI}
    pods: list[PodSpec] = []
    for i in range(12):
        kind = i % 6
        uid = f"golden-{i}"
        if kind == 0:
            ctrs: tuple[ContainerSpec, ...] = (ContainerSpec("a"), ContainerSpec("b"))
        elif kind == 1:
            ctrs = (ContainerSpec("a", requests={"cpu": 250}), ContainerSpec("b"))
        elif kind == 2:
            ctrs = (ContainerSpec("a", requests=two, limits=two),)
        elif kind == 3:
            ctrs = (ContainerSpec("a", requests=half, limits=half),)
        elif kind == 4:
            ctrs = (ContainerSpec("a", requests=two, limits=two), ContainerSpec("b"))
        else:
            ctrs = (ContainerSpec("a", requests={"memory": GI}, limits={"memory": 2 * GI}),)
        init = (ContainerSpec("init", ContainerKind.INIT),) if i % 4 == 3 else ()
        pods.append(PodSpec(uid=uid, name=uid, init_containers=init, containers=ctrs))
    return pods


async def _node(config: str) -> tuple[list[Any], list[Any]]:
    engine = Engine(synthetic_topology(SPEC_256), parse_config(config).engine_config())
    rt = FakeRuntime(_Direct(Plugin(NodeLedger(engine))))
    for i in range(3):
        await rt.launch(pod_level(i, 2))
    for spec in _pods():
        pod = await rt.run_pod(spec)
        for ctr in spec.containers:
            await rt.create(pod, replace(spec, containers=(ctr,)), ctr)
    for rc in rt.containers.values():
        rc.msg.state = api.CONTAINER_RUNNING
    return rt.sync_lists()


def _cold_digest(config: str, state: Path) -> str:
    pods, ctrs = asyncio.run(_node(config))
    engine = Engine(synthetic_topology(SPEC_256), parse_config(config).engine_config())
    plugin = Plugin(NodeLedger(engine, store=CheckpointStore(state)))
    plugin.ledger.open()
    reply = asyncio.run(plugin.synchronize(pods, ctrs))
    digest = hashlib.sha256()
    for update in reply:
        digest.update(update.SerializeToString(deterministic=True))
    digest.update(b"|")
    digest.update((state / "state.json").read_bytes())
    return digest.hexdigest()


CONFIGS = {
    "single-numa-node-pod": '[topology_manager]\npolicy = "single-numa-node"\nscope = "pod"\n',
    "restricted-container": '[topology_manager]\npolicy = "restricted"\nscope = "container"\n',
    "none": '[topology_manager]\npolicy = "none"\n',
}
DIGESTS = {
    "none": "f15ccb0e8a6cff89497fd093c10ad71afe855796606aa4b791de110576ed90f2",
    "restricted-container": "a9a51322fe68c7b9e483cf846d06353e39a449a0633113f1a25b8554c85e93dd",
    "single-numa-node-pod": "3a6ca3da10257bd2058b93d5d72dfe91f04ff96509a7c4574616327a7124b3bf",
}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_cold_synchronize_reply_and_checkpoint_are_unchanged(name: str, tmp_path: Path) -> None:
    assert _cold_digest(CONFIGS[name], tmp_path / "state") == DIGESTS[name]
