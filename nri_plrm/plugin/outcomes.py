"""What the plugin reports about its decisions: the decision log line, the kubelet's rejection
as a pod Event, and a final admission refusal for the pod to end as the kubelet ends it.

:class:`Outcomes` is shared by the handlers, the resizes and the single-container inference,
so every refusal is reported the same way.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from nri_plrm.engine.explain import rejection_text
from nri_plrm.engine.spec import AdmissionError, ContainerAssignment
from nri_plrm.ledger.tables import PodRecord
from nri_plrm.podsource.base import PodEventSink, PodRefusalSink


class Outcomes:
    """Reports decisions (see the module docstring). ``level`` gives the decision log level
    (INFO, or DEBUG inside Synchronize); ``events`` and ``refused`` are optional (API mode)."""

    def __init__(
        self,
        log: logging.Logger,
        level: Callable[[], int],
        events: PodEventSink | None = None,
        refused: PodRefusalSink | None = None,
    ) -> None:
        self.log = log
        self.level = level
        self.events = events
        self.refused = refused

    def decision_log(
        self, record: PodRecord, container: str, assignment: ContainerAssignment | None, reason: str
    ) -> None:
        """One ``decision`` line (a refusal, ``assignment`` None, always at INFO)."""
        level = logging.INFO if assignment is None else self.level()
        if not self.log.isEnabledFor(level):
            return
        cpus = str(assignment.cpus) if assignment is not None else "-"
        mems = str(assignment.mems) if assignment is not None and assignment.mems else "-"
        self.log.log(
            level,
            "decision pod=%s container=%s cpus=%s mems=%s reason=%s",
            record.label(),
            container or "-",
            cpus,
            mems,
            reason,
            extra={
                "plrm": {
                    "event": "decision",
                    "pod": record.label(),
                    "uid": record.uid,
                    "container": container,
                    "cpus": cpus,
                    "mems": mems,
                    "reason": reason,
                }
            },
        )

    def event(self, record: PodRecord, err: AdmissionError, message: str) -> None:
        """Post the kubelet's reason with ``message`` as a Warning Event (never blocks)."""
        if self.events is not None:
            spec = record.intent.spec
            self.events.record(spec.uid, spec.namespace, spec.name, err.reason, message)

    def rejected(self, record: PodRecord, container: str, err: AdmissionError, cause: str) -> str:
        """An admission refusal: logged, posted and, when decided from the pod's API spec,
        reported as final (``nri_plrm.podsource.refusals``); the message with its cause."""
        why = rejection_text(err, cause)
        self.decision_log(record, container, None, f"rejected {err.reason}: {why}")
        self.event(record, err, why)
        if self.refused is not None and record.spec is not None:
            spec = record.spec
            self.refused.record(spec.uid, spec.namespace, spec.name, err.reason, why)
        return why
