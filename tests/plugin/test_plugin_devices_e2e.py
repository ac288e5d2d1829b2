"""Devices from the kubelet's PodResources socket at RunPodSandbox, over the runtime simulator:
a fake kubelet (real gRPC) reports the pod's GPUs with their NUMA nodes; the plugin aligns the
pod's exclusive CPUs and memory with them, refuses GPUs split over two nodes under
single-numa-node as the kubelet does, and decides without device hints, warned and counted,
when the kubelet does not answer within ``[pod_resources] device_timeout``."""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

import pytest
from fake_kubelet import FakeKubelet
from plrm_harness import serve, stored_plugin
from plrm_runtime import FakeRuntime

from nri_plrm.base.cpuset import CPUSet
from nri_plrm.config.file import parse_config
from nri_plrm.daemon.service import build_plugin
from nri_plrm.engine.spec import Device
from nri_plrm.observability.metrics import Metrics
from nri_plrm.plugin.handlers import Plugin
from nri_plrm.podresources.devices import KubeletDevices
from nri_plrm.topology.machines import MACHINES
from nri_plrm.translate.manifest_to_pod import load_manifests

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
GPU = "nvidia.com/gpu"
CONTAINER_SCOPE = (EXAMPLES / "container-scope.toml").read_text()
POD_SCOPE = (EXAMPLES / "pod-scope.toml").read_text()
DEADLINE = 0.1
INVENTORY = [(GPU, f"gpu-{n}", (n,)) for n in range(4)]


def plugin_with_kubelet(
    tmp_path: Path, config: str, kubelet_sock: str, metrics: Metrics | None = None
) -> Plugin:
    assert parse_config(config).pod_resources.device_timeout == DEADLINE  # the default
    plugin = stored_plugin(tmp_path / "state", config)
    plugin.devices = KubeletDevices(
        kubelet_sock,
        DEADLINE,
        count=metrics.device_lookup if metrics is not None else None,
    )
    return plugin


def ml_workload() -> object:
    (spec,) = load_manifests([EXAMPLES / "ml-workload.yaml"])
    return spec


@pytest.mark.parametrize("config", [CONTAINER_SCOPE, POD_SCOPE], ids=["container", "pod"])
@pytest.mark.parametrize("numa", [1, None], ids=["gpu-on-numa-1", "no-gpu"])
def test_gpu_on_numa_1_brings_the_pods_cpus_and_memory_there(
    tmp_path: Path, config: str, numa: int | None
) -> None:
    spec = ml_workload()
    rows = {"ml-training": [(GPU, "gpu-1", (1,))]} if numa is not None else {}
    sock = str(tmp_path / "kubelet.sock")
    kubelet = FakeKubelet(sock, {("default", "ml-workload"): rows}, INVENTORY)
    plugin = plugin_with_kubelet(tmp_path, config, sock)
    expected = 1 if numa is not None else 0
    node = MACHINES["default"].cpus_in_numa(expected)

    async def main() -> None:
        async with serve(plugin, str(tmp_path / "nri.sock")) as s:
            pod = await s.runtime.launch(spec)  # type: ignore[arg-type]
            training = s.runtime.applied(pod, "ml-training")
            assert training.cpus and CPUSet.parse(training.cpus) <= node
            assert training.mems == str(expected)
            reserved = plugin.ledger.engine.pod_cpus(spec.uid)  # type: ignore[attr-defined]
            if reserved is not None:  # scope pod: the pod's budget sits there too
                assert reserved <= node
        assert plugin.ledger.engine.verify() == []

    try:
        asyncio.run(main())
    finally:
        kubelet.stop()
    assert "Get" in kubelet.calls


@pytest.mark.parametrize("config", [CONTAINER_SCOPE, POD_SCOPE], ids=["container", "pod"])
def test_gpus_on_two_nodes_are_refused_under_single_numa_node(tmp_path: Path, config: str) -> None:
    spec = ml_workload()
    rows = {"ml-training": [(GPU, "gpu-0", (0,)), (GPU, "gpu-1", (1,))]}
    sock = str(tmp_path / "kubelet.sock")
    kubelet = FakeKubelet(sock, {("default", "ml-workload"): rows}, INVENTORY)
    plugin = plugin_with_kubelet(tmp_path, config, sock)

    async def main() -> None:
        async with serve(plugin, str(tmp_path / "nri.sock")) as s:
            with pytest.raises(Exception) as err:
                await s.runtime.launch(spec)  # type: ignore[arg-type]
            text = str(err.value)
            assert "TopologyAffinityError" in text
            assert "gpu-0 (NUMA 0), gpu-1 (NUMA 1)" in text
            assert "single-numa-node" in text
            held = plugin.ledger.engine.assignments()
            assert (spec.uid, "ml-training") not in held  # type: ignore[attr-defined]

    try:
        asyncio.run(main())
    finally:
        kubelet.stop()


def test_silent_kubelet_decides_within_the_deadline_warned_and_counted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    spec = ml_workload()
    rows = {"ml-training": [(GPU, "gpu-1", (1,))]}
    sock = str(tmp_path / "kubelet.sock")
    kubelet = FakeKubelet(sock, {("default", "ml-workload"): rows}, INVENTORY, silent=True)
    metrics = Metrics()
    plugin = plugin_with_kubelet(tmp_path, POD_SCOPE, sock, metrics)
    node0 = MACHINES["default"].cpus_in_numa(0)
    took: list[float] = []

    async def main() -> None:
        async with serve(plugin, str(tmp_path / "nri.sock")) as s:
            started = time.perf_counter()
            pod = await s.runtime.run_pod(spec)  # type: ignore[arg-type]
            took.append(time.perf_counter() - started)
            await s.runtime.create(pod, spec, spec.containers[0])  # type: ignore[attr-defined]
            training = s.runtime.applied(pod, "ml-training")
            assert CPUSet.parse(training.cpus) <= node0  # no device hint: NUMA 0 as before

    caplog.set_level(logging.WARNING)
    try:
        asyncio.run(main())
    finally:
        kubelet.stop()
    assert took[0] < DEADLINE + 0.4, took  # the deadline plus the simulator's round trip
    warned = [r for r in caplog.records if "without device hints" in r.getMessage()]
    assert warned and "did not answer within 100 ms" in warned[0].getMessage()
    count = metrics.registry.get_sample_value(
        "nri_plrm_device_lookups_total", {"result": "timeout"}
    )
    assert count == 1


def test_the_daemon_asks_the_kubelet_socket_with_the_configured_deadline(tmp_path: Path) -> None:
    sock = str(tmp_path / "kubelet.sock")
    config = parse_config(
        f'[state]\ndir = "{tmp_path / "state"}"\n'
        f'[pod_resources]\nkubelet_socket = "{sock}"\ndevice_timeout = 0.05\n'
    )
    metrics = Metrics()
    plugin = build_plugin(config, MACHINES["default"], metrics)
    assert isinstance(plugin.devices, KubeletDevices)
    assert (plugin.devices.socket_path, plugin.devices.deadline) == (sock, 0.05)
    assert plugin.devices.count == metrics.device_lookup
    plugin.ledger.close()
    bare = build_plugin(
        parse_config(f'[state]\ndir = "{tmp_path / "bare"}"\n'), MACHINES["default"]
    )
    assert bare.devices is None
    bare.ledger.close()


@pytest.mark.parametrize("clean_stop", [True, False], ids=["checkpoint", "journal"])
def test_a_restarted_plugin_keeps_the_devices_and_their_alignment(
    tmp_path: Path, clean_stop: bool
) -> None:
    """The devices are in the journaled intent and the checkpoint: a restarted plugin (from
    a clean stop or a crash) holds the same decisions, and places a container created after
    the restart on the GPU's node without asking the kubelet again."""
    spec = ml_workload()
    rows = {"ml-training": [(GPU, "gpu-1", (1,))]}
    sock = str(tmp_path / "kubelet.sock")
    kubelet = FakeKubelet(sock, {("default", "ml-workload"): rows}, INVENTORY)
    plugin = plugin_with_kubelet(tmp_path, CONTAINER_SCOPE, sock)
    node1 = MACHINES["default"].cpus_in_numa(1)

    async def first() -> tuple[object, FakeRuntime]:
        async with serve(plugin, str(tmp_path / "nri.sock"), clean_stop=clean_stop) as s:
            pod = await s.runtime.run_pod(spec)  # type: ignore[arg-type]
            await s.runtime.create(pod, spec, spec.init_containers[0])  # type: ignore[attr-defined]
            return pod, s.runtime

    try:
        pod, runtime = asyncio.run(first())
    finally:
        kubelet.stop()  # the restarted plugin cannot ask it again
    before = plugin.ledger.engine.assignments()
    again = stored_plugin(tmp_path / "state", CONTAINER_SCOPE)
    assert again.ledger.engine.assignments() == before
    training = spec.containers[0]  # type: ignore[attr-defined]
    record = again.ledger.pod(spec.uid)  # type: ignore[attr-defined]
    assert record is not None and record.intent.spec.devices == {
        "ml-training": {GPU: (Device("gpu-1", (1,)),)}
    }
    pods, containers = runtime.sync_lists()

    async def second() -> None:
        async with serve(
            again, str(tmp_path / "nri2.sock"), pods=pods, containers=containers, runtime=runtime
        ) as s:
            await s.runtime.create(pod, spec, training)  # type: ignore[arg-type]
            got = s.runtime.applied(pod, "ml-training")  # type: ignore[arg-type]
            assert CPUSet.parse(got.cpus) <= node1 and got.mems == "1"

    asyncio.run(second())
