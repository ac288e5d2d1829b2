"""A container's own devices in its NRI CreateContainer request (``linux.devices``), located
through sysfs, align its exclusive CPUs and memory in container scope on nodes without the
kubelet socket; over the runtime simulator, on a sysfs tree laid out like the kernel's."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from plrm_harness import serve, stored_plugin

from nri_plrm.base.cpuset import CPUSet
from nri_plrm.engine.spec import ContainerSpec, PodSpec
from nri_plrm.topology.device_numa import DeviceNUMA
from nri_plrm.topology.machines import MACHINES
from nri_plrm.translate.pod_to_cri import nri_container, nri_pod_sandbox

GI = 1 << 30
CONTAINER_SCOPE = '[topology_manager]\npolicy = "single-numa-node"\nscope = "container"\n'
GPU_FN = "devices/pci0000:00/0000:00:01.0/0000:3b:00.0"
OTHER_FN = "devices/pci0000:80/0000:80:01.0/0000:86:00.0"


def gpu_tree(root: Path) -> Path:
    """``/dev/dri/renderD128`` (226:128) on NUMA 1, ``renderD129`` (226:129) on NUMA 0."""
    for function, minor, node in ((GPU_FN, 128, 1), (OTHER_FN, 129, 0)):
        (root / function).mkdir(parents=True)
        (root / function / "numa_node").write_text(f"{node}\n")
        target = root / function / "drm" / f"renderD{minor}"
        target.mkdir(parents=True)
        (root / "dev" / "char").mkdir(parents=True, exist_ok=True)
        (root / "dev" / "char" / f"226:{minor}").symlink_to(
            Path("../..") / function / "drm" / f"renderD{minor}"
        )
    return root


def trainer() -> PodSpec:
    two = {"cpu": 2000, "memory": GI}
    return PodSpec(
        uid="trainer-uid",
        name="trainer",
        containers=(ContainerSpec("train", requests=two, limits=two),),
    )


@pytest.mark.parametrize(
    ("minors", "node"), [((128,), 1), ((), 0), ((128, 129), None)], ids=["numa1", "none", "both"]
)
def test_container_devices_align_its_cpus(
    tmp_path: Path, minors: tuple[int, ...], node: int | None
) -> None:
    plugin = stored_plugin(tmp_path / "state", CONTAINER_SCOPE)
    plugin.device_nodes = DeviceNUMA(str(gpu_tree(tmp_path / "sys")))
    spec = trainer()

    async def main() -> None:
        async with serve(plugin, str(tmp_path / "nri.sock")) as s:
            pod = nri_pod_sandbox(spec)
            await s.sim.run_pod_sandbox(pod)
            msg = nri_container(spec, spec.containers[0])
            for minor in minors:
                msg.linux.devices.add(
                    path=f"/dev/dri/renderD{minor}", type="c", major=226, minor=minor
                )
            msg.linux.devices.add(path="/dev/null", type="c", major=1, minor=3)
            if node is None:
                with pytest.raises(Exception) as err:
                    await s.sim.create_container(pod, msg)
                assert "TopologyAffinityError" in str(err.value)
                assert "linux/drm /dev/dri/renderD128 (NUMA 1)" in str(err.value)
                return
            reply = await s.sim.create_container(pod, msg)
            cpus = CPUSet.parse(reply.adjust.linux.resources.cpu.cpus)
            assert len(cpus) == 2 and cpus <= MACHINES["default"].cpus_in_numa(node)
            assert reply.adjust.linux.resources.cpu.mems == str(node)

    asyncio.run(main())
