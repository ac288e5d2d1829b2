"""The devices' part of a rejection's cause (:mod:`nri_plrm.engine.explain`): the devices a pod
or container holds, where they sit, and whether they alone defeat the topology manager policy.

Pure: it reads the topology manager's policy and merge and changes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

from nri_plrm.engine.spec import DeviceMap, HintMap, TopologyHint
from nri_plrm.engine.topology_manager import (
    POLICY_RESTRICTED,
    POLICY_SINGLE_NUMA_NODE,
    TopologyManager,
)


def devices_text(devices: DeviceMap) -> str:
    """``nvidia.com/gpu gpu-0 (NUMA 0), gpu-1 (NUMA 1)``; a device without topology says so."""
    parts = []
    for resource, listed in devices.items():
        named = ", ".join(
            f"{d.id} (NUMA {','.join(map(str, d.numa_nodes))})"
            if d.numa_nodes
            else f"{d.id} (no NUMA node)"
            for d in listed
        )
        parts.append(f"{resource} {named}")
    return "; ".join(parts)


def device_cause(
    tm: TopologyManager,
    who: str,
    devices: DeviceMap,
    hints: HintMap,
    others: Sequence[HintMap | None] = (),
) -> str:
    """Why ``who``'s devices cannot be admitted under the policy: alone, or together with the
    CPU and memory managers' hints ``others`` when those admit alone ("" otherwise, or when it
    holds no device). ``hints`` are the device manager's hints for them."""
    if not devices or not hints:
        return ""
    best, admit = tm.merge([hints])
    held = devices_text(devices)
    nodes = sorted({n for listed in devices.values() for d in listed for n in d.numa_nodes})
    span = ",".join(map(str, nodes)) or "none"
    if admit:
        if not any(others) or not tm.merge(others)[1] or tm.merge([hints, *others])[1]:
            return ""
        return (
            f"{who} holds {held} (NUMA {span}) and its CPUs and memory prefer a narrower NUMA "
            f"node set: no hint is preferred by all; topology manager policy {tm.policy} "
            "admits only a hint every resource prefers"
        )
    if tm.policy == POLICY_SINGLE_NUMA_NODE:
        return (
            f"{who} holds {held}: no single NUMA node has all of them (they span NUMA {span}); "
            "topology manager policy single-numa-node needs one node for all of it"
        )
    if tm.policy == POLICY_RESTRICTED:
        return (
            f"{who} holds {held}: they span NUMA {span}, wider than the narrowest NUMA node set "
            "that could hold as many devices of the node; topology manager policy restricted "
            "admits only that preferred set"
        )
    return f"{who} holds {held}: no NUMA affinity holds them all ({_hint(best)})"


def _hint(hint: TopologyHint) -> str:
    return f"best hint NUMA {','.join(map(str, hint.nodes())) or 'any'}"


def with_devices(cause: str, who: str, devices: DeviceMap) -> str:
    """``cause`` followed by the devices ``who`` holds, when it holds some (an empty cause
    stays empty)."""
    if not devices or not cause:
        return cause
    return f"{cause}; {who} holds {devices_text(devices)}"
