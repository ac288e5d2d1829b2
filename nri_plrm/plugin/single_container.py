"""NRI-only single-container inference (docs/design.md section 2): a pure choice of kind.

A pod budget whose first container asks for exactly the budget is taken as the classic
Guaranteed pod it most likely is (``PROMOTE``: exclusive CPUs, quota -1, ``node_exclusive``); a
second container of the pod shows it was a pod budget after all (``DEMOTE``: the first container
goes back to the pod's pool with the budget's CFS quota). The step and the container it is for
are one ledger decision (``NodeLedger.readmit``). API mode knows the spec and skips this.
"""

from __future__ import annotations

from nri_plrm.ledger.tables import PodRecord
from nri_plrm.proto import nri_api_pb2 as api
from nri_plrm.translate.nri_to_pod import (
    DEMOTE,
    PROMOTE,
    is_promoted,
    is_sole_guaranteed_candidate,
)

__all__ = ["DEMOTE", "PROMOTE", "step", "with_budget_quota"]


def step(record: PodRecord, container: api.Container) -> str | None:
    """The step placing ``container`` calls for: ``PROMOTE``, ``DEMOTE`` or None."""
    if record.spec is not None or container.name in record.containers:
        return None
    if is_promoted(record.intent) and record.containers:
        return DEMOTE
    if not record.containers and is_sole_guaranteed_candidate(record.intent, container):
        return PROMOTE
    return None


def with_budget_quota(
    record: PodRecord, updates: list[api.ContainerUpdate]
) -> list[api.ContainerUpdate]:
    """After a demotion, the pod's earlier containers get the budget's CFS quota back."""
    budget = record.intent.budget
    if budget.cpu_quota <= 0 or budget.cpu_period <= 0:
        return updates
    ids = set(record.containers.values())
    for update in updates:
        if update.container_id in ids:
            update.linux.resources.cpu.quota.value = budget.cpu_quota
            update.linux.resources.cpu.period.value = budget.cpu_period
    return updates
