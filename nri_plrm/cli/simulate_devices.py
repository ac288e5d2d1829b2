"""``nri-plrm simulate --devices``: a node with device plugin resources (GPUs, NICs) per NUMA
node, handed out by a simulated kubelet at each pod's admission.

``--devices RESOURCE=NODE:COUNT[,NODE:COUNT]`` (repeatable) names the node's devices; a
container asks for them with an extended resource limit (``nvidia.com/gpu: 1``). Before each
pod's ``RunPodSandbox`` the kubelet's Device Manager picks its devices under the kubelet's own
Topology Manager policy (``[topology_manager] kubelet_policy``, which ``--kubelet-topology-policy``
overrides; default ``none``: the kubelet runs its
CPU and Memory Managers at ``none`` beside the plugin, and with its Topology Manager at ``none``
too the devices land anywhere); :mod:`nri_plrm.engine.device_allocation` has the rules. The
plugin then learns them, as from the kubelet's PodResources socket on a node, and aligns the
pod's CPUs and memory with them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from nri_plrm.cli.inputs import UsageError
from nri_plrm.config.settings import Config
from nri_plrm.engine.device_allocation import KubeletDeviceAllocator
from nri_plrm.engine.facade import Engine
from nri_plrm.engine.spec import Device
from nri_plrm.engine.topology_manager import POLICIES, POLICY_NONE
from nri_plrm.translate.manifest_to_pod import is_extended_resource

MAX_DEVICES_PER_NODE = 4096
KUBELET_POLICY_KEY = "topology_manager.kubelet_policy"
"""The config key naming the kubelet's policy (the flag overrides it)."""


@dataclass(frozen=True)
class DeviceChoice:
    """The node's devices per resource and the kubelet's Topology Manager policy."""

    inventory: dict[str, tuple[Device, ...]]
    kubelet_policy: str = POLICY_NONE
    policy_from: str = KUBELET_POLICY_KEY
    """Where ``kubelet_policy`` was given (the flag or the config key), for messages."""

    @classmethod
    def parse(
        cls, values: Sequence[str], kubelet_policy: str, policy_from: str = KUBELET_POLICY_KEY
    ) -> DeviceChoice | None:
        """From ``--devices`` values (None without any); devices are named after the
        resource's last part and numbered in NUMA order (``gpu0``, ``gpu1``...). Raises
        ``UsageError`` naming the value and the rule."""
        if kubelet_policy not in POLICIES:
            raise UsageError(f"{policy_from} {kubelet_policy!r}: one of {', '.join(POLICIES)}")
        if not values:
            return None
        rule = "expected RESOURCE=NODE:COUNT[,NODE:COUNT], e.g. nvidia.com/gpu=0:2,1:2"
        inventory: dict[str, tuple[Device, ...]] = {}
        for text in values:
            resource, sep, spec = text.partition("=")
            if not sep or not spec or not is_extended_resource(resource):
                raise UsageError(
                    f"--devices {text!r}: {rule}; the resource is a device plugin's "
                    "(vendor.com/name)"
                )
            if resource in inventory:
                raise UsageError(f"--devices {text!r}: {resource} is named twice")
            stem = resource.rsplit("/", 1)[-1]
            devices: list[Device] = []
            for part in spec.split(","):
                node, colon, count = part.partition(":")
                if not colon or not node.isdigit() or not count.isdigit():
                    raise UsageError(f"--devices {text!r}: {part!r}: {rule}")
                if int(count) > MAX_DEVICES_PER_NODE:
                    raise UsageError(
                        f"--devices {text!r}: {part!r}: at most {MAX_DEVICES_PER_NODE} devices "
                        "per NUMA node"
                    )
                devices += [
                    Device(f"{stem}{len(devices) + i}", (int(node),)) for i in range(int(count))
                ]
            inventory[resource] = tuple(devices)
        return cls(inventory, kubelet_policy, policy_from)

    def check(self, numa_ids: Sequence[int]) -> None:
        """Refuse a device on a NUMA node the machine does not have."""
        for resource, devices in self.inventory.items():
            for device in devices:
                for node in device.numa_nodes:
                    if node not in numa_ids:
                        raise UsageError(
                            f"--devices {resource}: NUMA node {node}: the machine has nodes "
                            f"{', '.join(map(str, numa_ids))}"
                        )

    def allocator(self, engine: Engine, config: Config) -> KubeletDeviceAllocator:
        """The simulated kubelet; the engine learns the node's device inventory, as from the
        kubelet's ``GetAllocatableResources``."""
        engine.device_manager.set_node_devices(
            {r: tuple(d.numa_nodes for d in devices) for r, devices in self.inventory.items()}
        )
        scope = config.topology_manager.scope
        return KubeletDeviceAllocator(engine.topology, self.inventory, self.kubelet_policy, scope)


def devices_cause(choice: DeviceChoice | None) -> str:
    """The cause of a pod the simulated kubelet refused at its own admission."""
    policy = choice.kubelet_policy if choice is not None else POLICY_NONE
    given = choice.policy_from if choice is not None else KUBELET_POLICY_KEY
    return (
        f"the kubelet's Device Manager could not give the pod its devices under its Topology "
        f"Manager policy {policy} ({given}); the plugin never saw the pod"
    )
