"""NRI-only single-container inference (docs/design.md section 2).

A pod budget whose first container asks for exactly the budget is taken as the classic
Guaranteed pod it most likely is ("promote": exclusive CPUs, quota -1, ``node_exclusive``); a
second container of the pod shows it was a pod budget after all ("demote": the first container
goes back to the pod's pool with the budget's CFS quota). API mode knows the spec and skips this.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from nri_plrm.engine.facade import Changes
from nri_plrm.engine.spec import AdmissionError, ContainerAssignment
from nri_plrm.ledger import NodeLedger, NotSavedError
from nri_plrm.ledger.tables import PodRecord
from nri_plrm.nri.handlers import NRIError
from nri_plrm.proto import nri_api_pb2 as api
from nri_plrm.translate.nri_to_pod import is_promoted, is_sole_guaranteed_candidate

PROMOTE = "promote"
DEMOTE = "demote"


class SingleContainerInference:
    """Promotes and demotes NRI-only pods through the ledger (see the module docstring)."""

    def __init__(
        self,
        ledger: NodeLedger,
        log: logging.Logger,
        event: Callable[[PodRecord, AdmissionError, str], None],
    ) -> None:
        self.ledger = ledger
        self.log = log
        self.event = event

    @staticmethod
    def step(record: PodRecord, container: api.Container) -> str | None:
        """The step placing ``container`` calls for: ``PROMOTE``, ``DEMOTE`` or None."""
        if record.spec is not None or container.name in record.containers:
            return None
        if is_promoted(record.intent) and record.containers:
            return DEMOTE
        if not record.containers and is_sole_guaranteed_candidate(record.intent, container):
            return PROMOTE
        return None

    def before_place(
        self, record: PodRecord, container: api.Container
    ) -> tuple[str | None, Changes]:
        """Promote or demote the pod before ``container`` is placed; the step taken and the
        other containers it changed. Raises ``NRIError`` (nothing changed) when refused."""
        kind = self.step(record, container)
        if kind is None:
            return None, {}
        try:
            changes = self.ledger.reclass(record.uid, kind)
        except AdmissionError as err:
            self.event(record, err, err.message)
            raise NRIError(
                f"pod {record.label()} container {container.name}: {err.reason}: {err}"
            ) from err
        except NotSavedError as exc:
            raise NRIError(str(exc)) from exc
        self.log.info(
            "pod=%s uid=%s %sd (single-container inference)", record.label(), record.uid, kind
        )
        return kind, {k: a for k, a in changes.items() if k != (record.uid, container.name)}

    def place(
        self,
        record: PodRecord,
        container: api.Container,
        place: Callable[[PodRecord, api.Container], tuple[ContainerAssignment, Changes]],
        send_later: Callable[[Changes], None],
    ) -> tuple[ContainerAssignment, Changes, str | None]:
        """``place`` the container after the inference, as one compound decision (the other
        pods' containers are reported once, when the node shared pool ended elsewhere); the
        step taken. A refused container raises ``NRIError``: the step is taken back and what
        moved is sent later. Without a step it is an ordinary decision (the most frequent:
        a cold Synchronize places thousands), made without the compound bookkeeping."""
        if self.step(record, container) is None:
            assignment, placed = place(record, container)
            return assignment, placed, None
        undone: Changes = {}
        try:
            with self.ledger.net_changes() as net:
                kind, changes = self.before_place(record, container)
                try:
                    assignment, placed = place(record, container)
                except NRIError:
                    if kind is not None:
                        undone = self.undo(record.uid, kind)
                    raise
        except NRIError:
            send_later({**undone, **net})
            raise
        return assignment, {**changes, **placed, **net}, kind

    def undo(self, uid: str, kind: str) -> Changes:
        """Take back ``kind`` after the container it was for was refused; what changed."""
        undo = DEMOTE if kind == PROMOTE else PROMOTE
        try:
            return self.ledger.reclass(uid, undo)
        except (AdmissionError, NotSavedError) as exc:
            self.log.error("pod uid=%s: could not %s again: %s", uid, undo, exc)
            return {}

    def with_budget_quota(
        self, record: PodRecord, updates: list[api.ContainerUpdate]
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
