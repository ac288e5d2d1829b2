"""DRA claim devices (the third device source): a pod's ResourceClaims' allocated devices and the
NUMA node their drivers publish in the node's ResourceSlices (the standard numaNode attribute, a
driver's own, or the PCI address through sysfs), fetched in the background from the fake API
server; then end to end: a pod whose claimed GPU is on NUMA 1 gets its exclusive CPUs and memory
on NUMA 1, and two claimed GPUs on two nodes are refused under single-numa-node."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from fakekube import FakeKube, free_port, kubeconfig_text, manifest_objects
from plrm_harness import serve

from nri_plrm.base.cpuset import CPUSet
from nri_plrm.checkpoint.store import CheckpointStore
from nri_plrm.config.file import parse_config
from nri_plrm.engine.facade import Engine
from nri_plrm.engine.spec import Device
from nri_plrm.ledger import NodeLedger
from nri_plrm.plugin.handlers import Plugin
from nri_plrm.podsource.client import load_kube_config, new_pod_api
from nri_plrm.podsource.dra import (
    ClaimDevices,
    ClaimRef,
    claim_results,
    pod_claims,
    slice_devices,
    with_claim_devices,
)
from nri_plrm.podsource.kube import Backoff, KubePodCache
from nri_plrm.topology.device_numa import DeviceNUMA
from nri_plrm.topology.machines import MACHINES
from nri_plrm.translate.manifest_to_pod import derived_uid, load_manifests
from nri_plrm.ttrpc.messages import TtrpcError

NODE = "node-a"
DRIVER = "gpu.example.com"
POD_SCOPE = '[topology_manager]\npolicy = "single-numa-node"\nscope = "pod"\n'
TRAINER = """apiVersion: v1
kind: Pod
metadata: {name: trainer, namespace: ml}
spec:
  resourceClaims:
  - name: gpu
    resourceClaimTemplateName: one-gpu
  containers:
  - name: train
    resources:
      requests: {cpu: "2", memory: 1Gi}
      limits: {cpu: "2", memory: 1Gi}
      claims: [{name: gpu}]
  - name: sidecar
    resources:
      requests: {cpu: "1", memory: 256Mi}
      limits: {cpu: "1", memory: 256Mi}
"""


def no_pci(bus_id: str) -> tuple[int, ...]:
    return ()


def claim(name: str, *devices: str, request: str = "gpu") -> dict[str, Any]:
    results = [{"request": request, "driver": DRIVER, "pool": NODE, "device": d} for d in devices]
    return {
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {"devices": {"requests": [{"name": "gpu"}]}},
        "status": {"allocation": {"devices": {"results": results}}},
    }


def resource_slice(node: str, devices: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return {
        "metadata": {"name": f"{node}-{DRIVER}"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": n, "attributes": a} for n, a in devices.items()],
        },
    }


def trainer_object(claim_name: str = "trainer-gpu-x7k2p") -> dict[str, Any]:
    (obj,) = manifest_objects(TRAINER, NODE, derived_uid)
    obj["status"] = {"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": claim_name}]}
    return obj


def test_pod_claims_name_each_containers_claim_objects() -> None:
    obj = trainer_object()
    assert pod_claims(obj) == {"train": (ClaimRef("trainer-gpu-x7k2p"),)}
    del obj["status"]  # the claim controller has not named the template's claim yet
    assert pod_claims(obj) is None
    obj["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "shared"}]
    obj["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpu", "request": "big"}]
    assert pod_claims(obj) == {"train": (ClaimRef("shared", "big"),)}
    assert ClaimRef("shared", "big").covers("big/a100") and not ClaimRef("s", "big").covers("b")
    obj["spec"]["containers"][0]["resources"]["claims"] = []
    assert pod_claims(obj) == {}


def test_claim_results_are_the_allocated_devices() -> None:
    assert claim_results(claim("c", "gpu-1", "gpu-2")) == (
        ("gpu", (DRIVER, NODE, "gpu-1")),
        ("gpu", (DRIVER, NODE, "gpu-2")),
    )
    assert claim_results({"status": {}}) is None  # not allocated


def test_a_slice_gives_each_device_the_numa_node_its_driver_publishes(tmp_path: Path) -> None:
    pci = tmp_path / "devices" / "pci0000:80" / "0000:81:00.0"
    pci.mkdir(parents=True)
    (pci / "numa_node").write_text("1\n")
    (tmp_path / "devices" / "pci0000:80" / "numa_node").write_text("1\n")
    bus = tmp_path / "bus" / "pci" / "devices"
    bus.mkdir(parents=True)
    os.symlink(pci, bus / "0000:81:00.0")
    found = slice_devices(
        resource_slice(
            NODE,
            {
                "standard": {"resource.kubernetes.io/numaNode": {"int": 2}},
                "list": {"resource.kubernetes.io/numaNode": {"ints": [3, 2]}},
                "own": {f"{DRIVER}/numaNode": {"int": 0}},
                "bare": {"numaNode": {"int": 1}},
                "pci": {"resource.kubernetes.io/pciBusID": {"string": "0000:81:00.0"}},
                "bad-pci": {"resource.kubernetes.io/pciBusID": {"string": "../../etc"}},
                "none": {"productName": {"string": "A100"}},
                "minus": {"resource.kubernetes.io/numaNode": {"int": -1}},
            },
        ),
        DeviceNUMA(str(tmp_path)).pci,
    )
    assert {k[2]: v for k, v in found.items()} == {
        "standard": (2,),
        "list": (3,),
        "own": (0,),
        "bare": (1,),
        "pci": (1,),
        "bad-pci": (),
        "none": (),
        "minus": (),
    }


def fetcher(
    fk: FakeKube, tmp_path: Path, count: Callable[[str], None] | None = None
) -> ClaimDevices:
    path = tmp_path / "kubeconfig"
    path.write_text(kubeconfig_text(fk.url))
    http = new_pod_api(load_kube_config(str(path))).http
    return ClaimDevices(http, NODE, no_pci, count=count)


def test_claims_are_fetched_in_the_background_and_keyed_by_pod_uid(tmp_path: Path) -> None:
    async def main() -> None:
        fk = await FakeKube(free_port()).start()
        fk.claims[("ml", "trainer-gpu-x7k2p")] = claim("trainer-gpu-x7k2p", "gpu-1")
        gpu = {"resource.kubernetes.io/numaNode": {"int": 1}}
        fk.slices = [resource_slice(NODE, {"gpu-1": gpu}), resource_slice("other", {"gpu-1": {}})]
        claims = fetcher(fk, tmp_path)
        claims.start()
        obj = trainer_object()
        uid = obj["metadata"]["uid"]
        try:
            claims.pod_seen(uid, obj)
            claims.pod_seen(uid, obj)  # the pod's next update: fetched once
            found = await claims.devices(uid, 5.0)
            assert found == {"train": {DRIVER: (Device(f"{NODE}/gpu-1", (1,)),)}}
            slices = [r for r in fk.dra_requests() if r.path.endswith("/resourceslices")]
            assert [r.query["fieldSelector"] for r in slices] == [f"spec.nodeName={NODE}"]
            assert len(fk.dra_requests()) == 2
            # The kubelet's devices are kept; the claim's are added for other resources.
            kubelet = {"train": {"nvidia.com/gpu": (Device("gpu-0", (0,)),)}}
            merged = await with_claim_devices(claims, uid, kubelet, 0.0)
            assert merged == {"train": {**kubelet["train"], **found["train"]}}
            assert await claims.devices("another-pod", 1.0) is None  # no wait: no claims
            claims.pod_gone(uid)
            assert await claims.devices(uid, 1.0) is None
        finally:
            await claims.stop()
            await claims.http.aclose()
            await fk.stop()

    asyncio.run(main())


def test_an_unallocated_claim_is_asked_again_at_the_pods_next_update(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    results: list[str] = []

    async def main() -> None:
        fk = await FakeKube(free_port()).start()
        fk.claims[("ml", "trainer-gpu-x7k2p")] = {"metadata": {"name": "c"}, "status": {}}
        claims = fetcher(fk, tmp_path, results.append)
        claims.start()
        obj = trainer_object()
        uid = obj["metadata"]["uid"]
        try:
            claims.pod_seen(uid, obj)
            await claims.drain()
            assert await claims.devices(uid, 0.05) is None  # bounded wait, nothing yet
            fk.claims[("ml", "trainer-gpu-x7k2p")] = claim("trainer-gpu-x7k2p", "gpu-3")
            claims.pod_seen(uid, obj)
            found = await claims.devices(uid, 5.0)
            assert found == {"train": {DRIVER: (Device(f"{NODE}/gpu-3", ()),)}}
            assert await claims.devices("no-claims", 1.0) is None  # not counted
        finally:
            await claims.stop()
            await claims.http.aclose()
            await fk.stop()

    with caplog.at_level(logging.WARNING, "nri_plrm.podsource.dra"):
        asyncio.run(main())
    assert results == ["unknown", "found"]
    assert "DRA claims are not known (claims unallocated) within 50 ms" in caplog.text


@pytest.mark.parametrize("status", [404, 403], ids=["no-dra-api", "no-rbac"])
def test_an_api_without_dra_or_rbac_is_warned_once_and_waits_for_nothing(
    tmp_path: Path, status: int, caplog: pytest.LogCaptureFixture
) -> None:
    async def main() -> None:
        fk = await FakeKube(free_port()).start()
        fk.dra_status = status
        claims = fetcher(fk, tmp_path)
        claims.start()
        try:
            for n in range(3):
                obj = trainer_object(f"claim-{n}")
                obj["metadata"]["uid"] = f"uid-{n}"
                claims.pod_seen(f"uid-{n}", obj)
            await claims.drain()
            loop = asyncio.get_running_loop()
            started = loop.time()
            assert await claims.devices("uid-0", 5.0) is None
            assert loop.time() - started < 1.0
        finally:
            await claims.stop()
            await claims.http.aclose()
            await fk.stop()

    with caplog.at_level(logging.WARNING, "nri_plrm.podsource.dra"):
        asyncio.run(main())
    messages = [r.getMessage() for r in caplog.records if r.name == "nri_plrm.podsource.dra"]
    (refused,) = [m for m in messages if m.startswith("DRA claim devices")]
    assert f"HTTP {status}" in refused
    assert "pod uid-0: the devices of its DRA claims are not known (fetch failed)" in messages[-1]


def run_plugin(
    tmp_path: Path, fk: FakeKube, body: Callable[[Plugin, Any], Awaitable[None]]
) -> None:
    async def main() -> None:
        await fk.start()
        path = tmp_path / "kubeconfig"
        path.write_text(kubeconfig_text(fk.url))
        api = new_pod_api(load_kube_config(str(path)))
        cache = KubePodCache(api, NODE, server=fk.url, backoff=Backoff(0.01, 0.05))
        claims = ClaimDevices(api.http, NODE, no_pci)
        cache.on_object, cache.on_gone = claims.pod_seen, claims.pod_gone
        engine = Engine(MACHINES["default"], parse_config(POD_SCOPE).engine_config())
        plugin = Plugin(
            NodeLedger(engine, store=CheckpointStore(tmp_path / "state")),
            pod_specs=cache,
            lookup_timeout=1.0,
            claims=claims,
        )
        claims.start()
        cache.start()
        assert await cache.wait_synced(5)
        try:
            async with serve(plugin, str(tmp_path / "nri.sock")) as session:
                await body(plugin, session.runtime)
        finally:
            await claims.stop()
            await cache.stop()
            await fk.stop()

    asyncio.run(main())


def test_a_pod_whose_claimed_gpu_is_on_numa_1_gets_its_cpus_and_memory_there(
    tmp_path: Path,
) -> None:
    fk = FakeKube(free_port())
    fk.add(trainer_object())
    fk.claims[("ml", "trainer-gpu-x7k2p")] = claim("trainer-gpu-x7k2p", "gpu-1")
    gpus = {f"gpu-{n}": {"resource.kubernetes.io/numaNode": {"int": n}} for n in range(4)}
    fk.slices = [resource_slice(NODE, gpus)]
    (spec,) = _trainer_spec(tmp_path)
    node = MACHINES["default"].cpus_in_numa(1)

    async def body(plugin: Plugin, runtime: Any) -> None:
        pod = await runtime.launch(spec)
        train = runtime.applied(pod, "train")
        assert train.cpus and CPUSet.parse(train.cpus) <= node
        assert train.mems == "1"
        sidecar = runtime.applied(pod, "sidecar")  # exclusive too, aligned with the pod
        assert sidecar.cpus and CPUSet.parse(sidecar.cpus) <= node

    run_plugin(tmp_path, fk, body)


def test_claimed_gpus_on_two_nodes_are_refused_under_single_numa_node(tmp_path: Path) -> None:
    fk = FakeKube(free_port())
    fk.add(trainer_object())
    fk.claims[("ml", "trainer-gpu-x7k2p")] = claim("trainer-gpu-x7k2p", "gpu-0", "gpu-1")
    gpus = {f"gpu-{n}": {"resource.kubernetes.io/numaNode": {"int": n}} for n in range(4)}
    fk.slices = [resource_slice(NODE, gpus)]
    (spec,) = _trainer_spec(tmp_path)

    async def body(plugin: Plugin, runtime: Any) -> None:
        with pytest.raises(TtrpcError) as err:
            await runtime.run_pod(spec)
        assert "TopologyAffinityError" in str(err.value)
        assert f"{DRIVER} {NODE}/gpu-0 (NUMA 0), {NODE}/gpu-1 (NUMA 1)" in str(err.value)

    run_plugin(tmp_path, fk, body)


def _trainer_spec(tmp_path: Path) -> list[Any]:
    path = tmp_path / "trainer.yaml"
    path.write_text(TRAINER)
    return load_manifests([path])


def test_a_claim_that_does_not_exist_is_not_the_api_missing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def main() -> None:
        fk = await FakeKube(free_port()).start()
        claims = fetcher(fk, tmp_path)
        claims.start()
        obj = trainer_object()
        try:
            claims.pod_seen(obj["metadata"]["uid"], obj)
            await claims.drain()
            assert await claims.devices(obj["metadata"]["uid"], 0.05) is None
        finally:
            await claims.stop()
            await claims.http.aclose()
            await fk.stop()

    with caplog.at_level(logging.WARNING, "nri_plrm.podsource.dra"):
        asyncio.run(main())
    assert "DRA claim devices:" not in caplog.text  # the API is there
    assert "not known (claims unallocated)" in caplog.text
