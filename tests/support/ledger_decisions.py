"""What a ledger decided, as plain data: per pod, each container's assignment, CPUs and memory
nodes (the shape the state fixtures' ``expected.json`` and the rollback reader print)."""

from __future__ import annotations

from typing import Any

from nri_plrm.ledger import NodeLedger


def decisions(ledger: NodeLedger) -> dict[str, Any]:
    """``{"namespace/name": {container: {"assignment", "cpus", "mems"} or None}}``."""
    return {
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
