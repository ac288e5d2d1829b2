"""Acceptance: the running daemon's PodResources endpoint, read by a client that shares no code
with ours (raw gRPC, replies decoded by the kubelet's field numbers), after the seed pods ran
through NRI; the scope tables of the seed reference must hold."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import grpc
import pytest
from plrm_daemon import running_daemon
from podres_raw import RawPodResourcesClient

from nri_plrm.translate.manifest_to_pod import load_manifests

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
GI = 1024**3
MI = 1024**2


def seed(*names: str) -> list[Any]:
    return load_manifests([EXAMPLES / f"{n}.yaml" for n in names])


async def launch_all(runtime: Any, pods: list[Any]) -> dict[str, bool]:
    admitted = {}
    for pod in pods:
        try:
            await runtime.launch(pod)
            admitted[pod.name] = True
        except Exception:  # the simulator raises the plugin's NRI error for a rejected pod
            admitted[pod.name] = False
    return admitted


def by_name(pods: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {p["name"]: p for p in pods}


def containers(pod: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in pod["containers"]}


def numa_of(cpus: list[int]) -> set[int]:
    # DEFAULT_SPEC: 4 NUMA nodes of 8 cores; cpu c and c+32 are siblings
    return {(c % 32) // 8 for c in cpus}


@pytest.mark.timeout(120)
def test_pod_scope_tables(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running_daemon(tmp_path) as d:
            admitted = await launch_all(
                d.runtime,
                seed("pod-scope-mixed", "tightly-coupled-database", "empty-shared-pool"),
            )
            assert admitted == {
                "pod-scope-mixed": True,
                "tightly-coupled-database": True,
                "empty-shared-pool": False,
            }
            client = RawPodResourcesClient(d.podresources_socket)
            try:
                listed = await asyncio.to_thread(client.list)
                got = await asyncio.to_thread(client.get, "plrm-tutorial", "pod-scope-mixed")
                alloc = await asyncio.to_thread(client.allocatable)
                with pytest.raises(grpc.RpcError) as missing:
                    await asyncio.to_thread(client.get, "plrm-tutorial", "no-such-pod")
            finally:
                client.close()

        pods = by_name(listed)
        assert missing.value.code() == grpc.StatusCode.UNKNOWN
        assert missing.value.details() == "pod no-such-pod in namespace plrm-tutorial not found"
        # Without the API pod cache the rejection happens at CreateContainer: the sandbox
        # exists, the container whose slice would empty the shared pool does not.
        rejected = pods.get("empty-shared-pool")
        if rejected is not None:
            assert "main-app" not in containers(rejected)

        mixed = pods["pod-scope-mixed"]
        assert got == mixed
        assert mixed["namespace"] == "plrm-tutorial"
        assert len(mixed["cpu_ids"]) == 4 and len(numa_of(mixed["cpu_ids"])) == 1
        (node,) = numa_of(mixed["cpu_ids"])
        assert mixed["memory"] == [("memory", 4 * GI, [node])]
        cs = containers(mixed)
        assert set(cs) == {"metrics-sidecar", "logging-sidecar", "main-app"}
        main = cs["main-app"]
        assert len(main["cpu_ids"]) == 2 and set(main["cpu_ids"]) < set(mixed["cpu_ids"])
        assert main["memory"] == [("memory", 2 * GI, [node])]
        for sidecar in ("metrics-sidecar", "logging-sidecar"):
            assert cs[sidecar]["cpu_ids"] == [] and cs[sidecar]["memory"] == []
        shared_pool = set(mixed["cpu_ids"]) - {c for x in cs.values() for c in x["cpu_ids"]}
        assert len(shared_pool) == 2

        db = pods["tightly-coupled-database"]
        assert len(db["cpu_ids"]) == 8 and len(numa_of(db["cpu_ids"])) == 1
        (db_node,) = numa_of(db["cpu_ids"])
        assert db["memory"] == [("memory", 16 * GI, [db_node])]
        dcs = containers(db)
        assert len(dcs["database"]["cpu_ids"]) == 6
        assert dcs["database"]["memory"] == [("memory", 12 * GI, [db_node])]
        for sidecar in ("metrics-exporter", "backup-agent"):
            assert dcs[sidecar]["cpu_ids"] == [] and dcs[sidecar]["memory"] == []
        assert not set(db["cpu_ids"]) & set(mixed["cpu_ids"])

        assert alloc["cpu_ids"] == list(range(1, 64))
        assert sorted(alloc["memory"]) == [
            ("memory", 16 * GI - 512 * MI, [0]),
            ("memory", 16 * GI, [1]),
            ("memory", 16 * GI, [2]),
            ("memory", 16 * GI, [3]),
        ]

    asyncio.run(scenario())


@pytest.mark.timeout(120)
def test_container_scope_tables(tmp_path: Path) -> None:
    policy = '[topology_manager]\npolicy = "single-numa-node"\nscope = "container"\n'

    async def scenario() -> None:
        async with running_daemon(tmp_path, policy) as d:
            admitted = await launch_all(d.runtime, seed("container-scope-mixed", "ml-workload"))
            assert admitted == {"container-scope-mixed": True, "ml-workload": True}
            client = RawPodResourcesClient(d.podresources_socket)
            try:
                listed = await asyncio.to_thread(client.list)
                ml = await asyncio.to_thread(client.get, "default", "ml-workload")
            finally:
                client.close()

        pods = by_name(listed)
        mixed = pods["container-scope-mixed"]
        assert mixed["cpu_ids"] == [] and mixed["memory"] == []
        cs = containers(mixed)
        assert len(cs["infrastructure-sidecar"]["cpu_ids"]) == 2
        for worker in ("worker-1", "worker-2"):
            assert cs[worker]["cpu_ids"] == [] and cs[worker]["memory"] == []

        assert ml == pods["ml-workload"]
        assert ml["cpu_ids"] == [] and ml["memory"] == []
        mcs = containers(ml)
        training = mcs["ml-training"]
        assert len(training["cpu_ids"]) == 3 and len(numa_of(training["cpu_ids"])) == 1
        (node,) = numa_of(training["cpu_ids"])
        assert training["memory"] == [("memory", 6 * GI, [node])]
        assert mcs["service-mesh-sidecar"]["cpu_ids"] == []
        assert mcs["service-mesh-sidecar"]["memory"] == []
        assert not set(training["cpu_ids"]) & set(cs["infrastructure-sidecar"]["cpu_ids"])

    asyncio.run(scenario())
