"""Compaction and the kubelet-format export with 500 live containers: how long they hold the
plugin's event loop.

Figures:
- ``compaction_blocking_ms_500live``: a full checkpoint written at once (start-up, the end of
  a Synchronize, shutdown, a broken journal): the event loop is held for all of it.
- ``compaction_fold_longest_step_ms_500live``: the longest event-loop step of a fold, the
  compaction the plugin runs beside the requests when the journal is full or the plugin idle
  (taking the state is one step and the journal's restart another; a worker thread encodes
  the state in short pieces, letting the loop's thread have the GIL between them, and writes
  the file; the loop's waits for the GIL count in its steps). A request arriving during a fold
  waits at most about this long for it.
- ``compaction_fold_ms_500live``: a fold from start to end (the requests go on meanwhile).
- ``kubelet_export_blocking_ms_500live`` and ``kubelet_export_longest_step_ms_500live``: the
  same for the kubelet-format files (``[state] kubelet_state_dir``): written at once, and the
  longest event-loop step of an export beside the requests (timers start those).

The plugin runs in this process on the 256-CPU machine of ``bench.plugin``, with its state
directory in a temporary directory; medians of ``ROUNDS`` (for the step, of each fold's
longest). The garbage collector is held off while a fold or an export is measured: a full
collection can fall in any step of the process (a request's too) and is not their work.
"""

from __future__ import annotations

import asyncio
import gc
import os
import tempfile
import time
from collections.abc import Callable

from inprocess_pods import start as start_pod

from bench.common import main, percentile
from bench.plugin import CONFIG, SPEC_256, best_effort, pod_level
from nri_plrm.checkpoint.store import CheckpointStore
from nri_plrm.config.file import parse_config
from nri_plrm.engine.facade import Engine
from nri_plrm.ledger import NodeLedger
from nri_plrm.plugin.handlers import Plugin
from nri_plrm.topology.synthetic import synthetic_topology

ROUNDS = 20


async def _beside(start: Callable[[], asyncio.Task[None] | None]) -> tuple[float, float]:
    """The task ``start`` returns, run to its end: (its duration, the longest event-loop step
    it took), in seconds."""
    steps: list[float] = []
    gc.collect()
    gc.disable()
    try:
        began = time.perf_counter()
        task = start()
        assert task is not None
        while not task.done():
            before = time.perf_counter()
            await asyncio.sleep(0)
            steps.append(time.perf_counter() - before)
        took = time.perf_counter() - began
    finally:
        gc.enable()
    return took, max(steps)


async def _measure(tmp: str) -> dict[str, float]:
    engine = Engine(synthetic_topology(SPEC_256), parse_config(CONFIG).engine_config())
    store = CheckpointStore(os.path.join(tmp, "state"))
    export = os.path.join(tmp, "export")
    plugin = Plugin(NodeLedger(engine, store=store, kubelet_state_path=export))
    plugin.ledger.open()
    for i in range(80):
        await start_pod(plugin, pod_level(i, 4))
    for i in range(100):
        await start_pod(plugin, best_effort(i))
    assert len(plugin.ledger.tables.ids) == 500
    persistence = plugin.ledger.persistence
    blocking, folds, steps, exports, export_steps = [], [], [], [], []
    for _ in range(ROUNDS):
        start = time.perf_counter()
        plugin.ledger.compact()
        blocking.append(time.perf_counter() - start)
        took, step = await _beside(persistence.start_fold)
        folds.append(took)
        steps.append(step)
        while persistence.export_pending:  # one the decisions above armed
            await asyncio.sleep(0.01)
        start = time.perf_counter()
        plugin.ledger.export_kubelet_state()
        exports.append(time.perf_counter() - start)
        _, step = await _beside(lambda: persistence.start_export(plugin.ledger.engine))
        export_steps.append(step)
    plugin.ledger.close()
    return {
        "compaction_blocking_ms_500live": percentile(blocking, 50) * 1000,
        "compaction_fold_longest_step_ms_500live": percentile(steps, 50) * 1000,
        "compaction_fold_ms_500live": percentile(folds, 50) * 1000,
        "kubelet_export_blocking_ms_500live": percentile(exports, 50) * 1000,
        "kubelet_export_longest_step_ms_500live": percentile(export_steps, 50) * 1000,
    }


def run() -> dict[str, float]:
    """Measure and return the figures (milliseconds)."""
    with tempfile.TemporaryDirectory(prefix="nri-plrm-bench-") as tmp:
        return asyncio.run(_measure(tmp))


if __name__ == "__main__":
    main(run)
