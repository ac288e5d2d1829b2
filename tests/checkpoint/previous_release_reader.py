"""Read a state directory with the ``nri_plrm`` of a previous release, as its daemon does at
start (``NodeLedger.load``: checkpoint, then the journal after it). Run by
``test_rollback.py`` with only that release's tree on ``PYTHONPATH``.

Usage: python previous_release_reader.py STATE_DIR TREE

- exit 0: the decisions it restored, as JSON on stdout (``{"ns/pod": {"container":
  {"assignment", "cpus", "mems"} or null}}``);
- exit 1: it refused the directory; its message on stderr;
- exit 3: it found the state unusable (its daemon would set it aside and rebuild from the
  runtime, the decisions lost); the problem on stderr;
- exit 4: the ``nri_plrm`` imported is not the one under TREE.

The imports are the previous release's module paths (21e5c6f): leave them as they are when
this tree's modules move, or point them at the release the test reads with.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(state: str, tree: str) -> int:
    import nri_plrm

    if not Path(nri_plrm.__file__).resolve().is_relative_to(Path(tree).resolve()):
        print(f"imported {nri_plrm.__file__}, not the release under {tree}", file=sys.stderr)
        return 4
    from nri_plrm.checkpoint.store import CheckpointStore
    from nri_plrm.config import Config
    from nri_plrm.engine.facade import Engine
    from nri_plrm.ledger import NodeLedger
    from nri_plrm.topology.machines import load_topology
    from nri_plrm.topology.synthetic import DEFAULT_SPEC

    ledger = NodeLedger(
        Engine(load_topology(DEFAULT_SPEC), Config().engine_config()),
        store=CheckpointStore(Path(state)),
    )
    try:
        problem = ledger.load()
    except Exception as exc:  # a refusal, whatever class that release gives it
        print(f"{type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    if problem is not None:
        print(problem, file=sys.stderr)
        return 3
    restored = {
        f"{pod.namespace}/{pod.name}": {
            c.name: None
            if c.assignment is None
            else {
                "assignment": c.assignment.assignment.value,
                "cpus": str(c.assignment.cpus),
                "mems": str(c.assignment.mems),
            }
            for c in pod.containers
        }
        for pod in ledger.pods()
    }
    print(json.dumps(restored, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
