"""Topology hints in an engine snapshot: NUMA node ids become a bitmask through the one
``bitmask.mask_of``, so repeated ids count once and absurd ids are refused, not allocated."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from seed_pods import pod_scope_mixed, seed_config, seed_topology

from nri_plrm.engine.bitmask import MAX_NUMA_NODES, mask_of
from nri_plrm.engine.facade import Engine, EngineStateError


def _snapshot() -> dict[str, Any]:
    e = Engine(seed_topology(), seed_config("restricted", "pod"))
    e.admit_pod(pod_scope_mixed("whole"))
    data: dict[str, Any] = json.loads(json.dumps(e.snapshot()))
    assert data["affinity"]["whole"]["main-app"]["numaAffinity"] == [0]
    return data


def _restore(data: dict[str, Any]) -> Engine:
    return Engine.restore(seed_topology(), seed_config("restricted", "pod"), data)


def test_repeated_node_ids_count_once() -> None:
    data = copy.deepcopy(_snapshot())
    data["affinity"]["whole"]["main-app"]["numaAffinity"] = [0, 0]
    hint = _restore(data).topology_manager.get_affinity("whole", "main-app")
    assert hint.numa_affinity == 0b1


@pytest.mark.parametrize("node", [MAX_NUMA_NODES, 10**12, -1])
def test_out_of_range_node_id_is_refused(node: int) -> None:
    data = copy.deepcopy(_snapshot())
    data["affinity"]["whole"]["main-app"]["numaAffinity"] = [node]
    with pytest.raises(EngineStateError, match=f"numa node id {node}: must be >= 0 and below"):
        _restore(data)


def test_mask_of_bounds() -> None:
    assert mask_of([0, 3, 3]) == 0b1001
    assert mask_of([MAX_NUMA_NODES - 1]) == 1 << (MAX_NUMA_NODES - 1)
    with pytest.raises(ValueError, match=f"below {MAX_NUMA_NODES}"):
        mask_of([MAX_NUMA_NODES])
