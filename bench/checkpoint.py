"""Checkpoint and export costs: the plugin's state file, the kubelet-format files,
and a whole ``simulate`` of the bundled examples.

Figures: ``checkpoint_save_p50_ms`` / ``checkpoint_save_p99_ms`` (500-container state, temp
file + rename; the fsyncs run in the store's background flusher, as in the plugin, and are
not in the figure), ``checkpoint_load_ms``, ``checkpoint_bytes``,
``kubelet_cpu_v4_encode_ms_1000ctr``, ``kubelet_memory_v3_encode_ms_1000ctr``,
``simulate_examples_ms``.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import main, percentile
from nri_plrm.base.cpuset import CPUSet
from nri_plrm.checkpoint.kubelet import (
    CPUManagerState,
    MemoryManagerState,
    MemoryTable,
    NUMANodeState,
    encode_cpu_manager_state,
    encode_memory_manager_state,
)
from nri_plrm.checkpoint.store import CheckpointStore
from nri_plrm.engine.spec import MemoryBlock

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _state(containers: int) -> dict[str, Any]:
    pods = {}
    for i in range(containers // 2):
        uid = f"pod-{i:05d}-0000-4000-8000-000000000000"
        pods[uid] = {
            "namespace": "default",
            "name": f"pod-{i}",
            "containers": {
                "main": {"id": f"{i:064x}", "cpus": f"{i % 256}", "mems": "0", "kind": "app"},
                "sidecar": {"id": f"{i + 1:064x}", "cpus": "0-255", "mems": "", "kind": "sidecar"},
            },
            "requests": {"cpu": 2000, "memory": 4 << 30},
        }
    return {"engine": {"pods": pods, "default": "0-255"}, "plugin": {"layout": 1}}


def _timed(fn: Any, repeat: int) -> list[float]:
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1000)
    return samples


def run() -> dict[str, float]:
    """Measure and return the figures (milliseconds unless the name says otherwise)."""
    results: dict[str, float] = {}
    data = _state(500)
    with tempfile.TemporaryDirectory() as tmp:
        store = CheckpointStore(Path(tmp) / "state")
        size = store.save(data)
        saves = _timed(lambda: store.save(data), 100)
        loads = _timed(store.load, 20)
        store.close()
    results["checkpoint_bytes"] = float(size)
    results["checkpoint_save_p50_ms"] = percentile(saves, 50)
    results["checkpoint_save_p99_ms"] = percentile(saves, 99)
    results["checkpoint_load_ms"] = percentile(loads, 50)

    entries = {
        f"pod-{i}": {"main": CPUSet([i % 256]), "sidecar": CPUSet.from_range(0, 255)}
        for i in range(500)
    }
    cpu = CPUManagerState(
        "static", CPUSet.from_range(0, 255), entries, {p: CPUSet([1, 2]) for p in entries}
    )
    results["kubelet_cpu_v4_encode_ms_1000ctr"] = percentile(
        _timed(lambda: encode_cpu_manager_state(cpu), 10), 50
    )
    table = MemoryTable(16 << 30, 1 << 29, (16 << 30) - (1 << 29), 0, (16 << 30) - (1 << 29))
    block = (MemoryBlock((0,), "memory", 1 << 30),)
    memory = MemoryManagerState(
        "Static",
        {n: NUMANodeState(1, {"memory": table}, (n,)) for n in range(4)},
        {p: {"main": block, "sidecar": block} for p in entries},
        {p: block for p in entries},
    )
    results["kubelet_memory_v3_encode_ms_1000ctr"] = percentile(
        _timed(lambda: encode_memory_manager_state(memory), 10), 50
    )

    from nri_plrm.cli.simulate import simulate
    from nri_plrm.topology.synthetic import DEFAULT_SPEC, synthetic_topology

    topology = synthetic_topology(DEFAULT_SPEC)
    paths = sorted(EXAMPLES.glob("*.yaml"))
    results["simulate_examples_ms"] = percentile(_timed(lambda: simulate(paths, topology), 5), 50)
    return results


if __name__ == "__main__":
    main(run)
