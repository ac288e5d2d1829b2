"""The kubelet's device checkpoint as a UID-keyed cache of pods' devices: parsed from the
kubelet's format, answered only when current (every change event read and parsed), so a pod
recreated under the same name never gets its predecessor's devices; then end to end: the pod
aligned with its GPU from the checkpoint, no ``Get`` asked."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest
from fake_kubelet import FakeKubelet
from plrm_harness import serve, stored_plugin

from nri_plrm.base.cpuset import CPUSet
from nri_plrm.config.file import parse_config
from nri_plrm.daemon.service import build_plugin
from nri_plrm.engine.spec import Device
from nri_plrm.observability.metrics import Metrics
from nri_plrm.podresources.device_checkpoint import (
    NOW_BYTES,
    CheckpointFormatError,
    DeviceCheckpoint,
    index_checkpoint,
    pod_devices,
)
from nri_plrm.podresources.devices import KubeletDevices
from nri_plrm.topology.machines import MACHINES
from nri_plrm.translate.manifest_to_pod import load_manifests

GPU = "nvidia.com/gpu"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def entry(uid: str, container: str, by_numa: dict[str, list[str]]) -> dict[str, object]:
    return {
        "PodUID": uid,
        "ContainerName": container,
        "ResourceName": GPU,
        "DeviceIDs": by_numa,
        "AllocResp": "CgA=",
    }


def write(path: Path, *entries: dict[str, object], pad: int = 0) -> None:
    """As the kubelet's checkpoint manager writes: a temporary file renamed over the old
    (``pad`` bytes more in the registered devices)."""
    registered = {"x": ["y" * pad]} if pad else {}
    doc = {"Data": {"PodDeviceEntries": list(entries), "RegisteredDevices": registered}}
    doc["Checksum"] = 1
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc))
    os.rename(tmp, path)


async def current(checkpoint: DeviceCheckpoint, uid: str) -> object:
    """The pod's devices once the checkpoint is current (a few seconds at most)."""
    for _ in range(500):
        found = checkpoint.pod(uid)
        if found is not None:
            return found
        await asyncio.sleep(0.01)
    raise AssertionError("the checkpoint never became current")


def test_parse_gives_each_device_its_numa_nodes_by_pod_uid() -> None:
    data = json.dumps(
        {
            "Data": {
                "PodDeviceEntries": [
                    entry("u1", "train", {"1": ["gpu-1"]}),
                    entry("u1", "train", {"0": ["gpu-x"], "1": ["gpu-x"]}),
                    entry("u2", "side", {"-1": ["gpu-9"]}),
                ],
                "RegisteredDevices": {GPU: ["gpu-1", "gpu-9", "gpu-x"]},
            },
            "Checksum": 1,
        }
    ).encode()
    pods = {uid: pod_devices(entries) for uid, entries in index_checkpoint(data).items()}
    assert pods == {
        "u1": {"train": {GPU: (Device("gpu-1", (1,)), Device("gpu-x", (0, 1)))}},
        "u2": {"side": {GPU: (Device("gpu-9", ()),)}},
    }


@pytest.mark.parametrize(
    ("doc", "named"),
    [
        ({"Data": {"PodDeviceEntries": [entry("u", "c", {})]}} | {"x": 1}, None),
        ({"Data": {"PodDeviceEntries": [{"ContainerName": "c"}]}}, "without a PodUID"),
        (
            {"Data": {"PodDeviceEntries": [dict(entry("u", "c", {}), DeviceIDs=["gpu-1"])]}},
            "DeviceIDs",
        ),
        ({"Data": {"PodDeviceEntries": [entry("u", "c", {"zero": ["g"]})]}}, "zero"),
        ({"Data": {"PodDeviceEntries": [dict(entry("u", "c", {}), ContainerName=3)]}}, "Name"),
        ({"Data": 3}, "PodDeviceEntries"),
    ],
)
def test_parse_refuses_what_is_not_the_numa_aware_format(doc: object, named: str | None) -> None:
    def parse() -> dict[str, object]:
        index = index_checkpoint(json.dumps(doc).encode())
        return {uid: pod_devices(entries) for uid, entries in index.items()}

    if named is None:  # an entry without devices is nothing, not an error
        assert parse() == {"u": {}}
        return
    with pytest.raises(CheckpointFormatError, match=named):
        parse()


@pytest.mark.parametrize("pad", [0, NOW_BYTES], ids=["read-at-lookup", "left-to-background"])
def test_answers_only_when_current_and_never_a_predecessors_devices(
    tmp_path: Path, pad: int
) -> None:
    path = tmp_path / "kubelet_internal_checkpoint"
    write(path, entry("old-uid", "main", {"0": ["gpu-0"]}), pad=pad)

    async def main() -> None:
        checkpoint = DeviceCheckpoint(str(path))
        assert checkpoint.start()
        assert await current(checkpoint, "old-uid") == {"main": {GPU: (Device("gpu-0", (0,)),)}}
        assert checkpoint.pod("other") == {}  # current: the kubelet allocated it nothing
        # The pod is recreated under its name: the kubelet frees the old pod's GPU and writes
        # the new pod's allocation before RunPodSandbox. Right after the rename a small file
        # is read by the lookup itself; a large one answers nothing until the worker parsed it.
        write(path, entry("new-uid", "main", {"1": ["gpu-1"]}), pad=pad)
        new = {"main": {GPU: (Device("gpu-1", (1,)),)}}
        if pad:
            assert checkpoint.pod("new-uid") is None
            assert checkpoint.pod("old-uid") is None
        else:
            assert checkpoint.pod("new-uid") == new
        assert await current(checkpoint, "new-uid") == new
        assert checkpoint.pod("old-uid") == {}
        checkpoint.close()
        assert checkpoint.pod("new-uid") is None

    asyncio.run(main())


def test_absent_unreadable_or_unwatchable_checkpoint_answers_unknown(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def main() -> None:
        absent = DeviceCheckpoint(str(tmp_path / "kubelet_internal_checkpoint"))
        assert absent.start()
        await asyncio.sleep(0.2)
        assert absent.pod("u") is None  # no file: the socket must be asked
        (tmp_path / "kubelet_internal_checkpoint").write_text("{not json")
        await asyncio.sleep(0.2)
        assert absent.pod("u") is None
        absent.close()
        nowhere = DeviceCheckpoint(str(tmp_path / "missing-dir" / "kubelet_internal_checkpoint"))
        assert not nowhere.start()
        assert nowhere.pod("u") is None

    asyncio.run(main())
    assert "not JSON" in caplog.text
    assert "cannot watch" in caplog.text


def test_pod_aligned_with_its_gpu_from_the_checkpoint_without_asking_the_socket(
    tmp_path: Path,
) -> None:
    (spec,) = load_manifests([EXAMPLES / "ml-workload.yaml"])
    path = tmp_path / "kubelet_internal_checkpoint"
    write(path, entry(spec.uid, "ml-training", {"1": ["gpu-1"]}))
    sock = str(tmp_path / "kubelet.sock")
    inventory = [(GPU, f"gpu-{n}", (n,)) for n in range(4)]
    # The socket answers only the inventory: its Get would report no device at all.
    kubelet = FakeKubelet(sock, {}, inventory)
    metrics = Metrics()
    plugin = stored_plugin(tmp_path / "state", (EXAMPLES / "pod-scope.toml").read_text())
    plugin.devices = KubeletDevices(
        sock,
        5.0,  # the inventory asked once at start must not miss a short deadline on a busy machine
        count=metrics.device_lookup,
        count_source=metrics.device_lookup_source,
        checkpoint=DeviceCheckpoint(str(path)),
    )
    node = MACHINES["default"].cpus_in_numa(1)

    async def main() -> None:
        plugin.devices.start()  # type: ignore[union-attr]
        await current(plugin.devices.checkpoint, spec.uid)  # type: ignore[union-attr]
        while plugin.devices.inventory is None:  # type: ignore[union-attr]
            await asyncio.sleep(0.01)  # asked in the background at start
        async with serve(plugin, str(tmp_path / "nri.sock")) as s:
            pod = await s.runtime.launch(spec)
            training = s.runtime.applied(pod, "ml-training")
            assert training.cpus and CPUSet.parse(training.cpus) <= node
            assert training.mems == "1"
        await plugin.devices.close()  # type: ignore[union-attr]

    try:
        asyncio.run(main())
    finally:
        kubelet.stop()
    assert "Get" not in kubelet.calls
    sources = metrics.device_lookup_sources
    assert sources.labels(source="checkpoint")._value.get() == 1
    assert sources.labels(source="socket")._value.get() == 0


def test_a_pod_whose_entry_is_malformed_is_asked_on_the_socket(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "kubelet_internal_checkpoint"
    write(path, entry("good", "main", {"0": ["gpu-0"]}), dict(entry("bad", "c", {}), DeviceIDs=[]))

    async def main() -> None:
        checkpoint = DeviceCheckpoint(str(path))
        checkpoint.start()
        assert await current(checkpoint, "good") == {"main": {GPU: (Device("gpu-0", (0,)),)}}
        assert checkpoint.pod("bad") is None
        checkpoint.close()

    asyncio.run(main())
    assert "pod bad: DeviceIDs is not a map" in caplog.text


def test_the_daemon_follows_the_configured_checkpoint(tmp_path: Path) -> None:
    sock = str(tmp_path / "kubelet.sock")
    path = str(tmp_path / "kubelet_internal_checkpoint")
    config = parse_config(
        f'[state]\ndir = "{tmp_path / "state"}"\n'
        f'[pod_resources]\nkubelet_socket = "{sock}"\nkubelet_device_checkpoint = "{path}"\n'
    )
    metrics = Metrics()
    plugin = build_plugin(config, MACHINES["default"], metrics)
    assert isinstance(plugin.devices, KubeletDevices)
    assert isinstance(plugin.devices.checkpoint, DeviceCheckpoint)
    assert plugin.devices.checkpoint.path == path
    assert plugin.devices.count_source == metrics.device_lookup_source
    plugin.ledger.close()
    socket_only = parse_config(
        f'[state]\ndir = "{tmp_path / "other"}"\n[pod_resources]\nkubelet_socket = "{sock}"\n'
    )
    plugin = build_plugin(socket_only, MACHINES["default"])
    assert plugin.devices is not None and plugin.devices.checkpoint is None
    plugin.ledger.close()
