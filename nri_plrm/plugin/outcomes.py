"""The one reporter of the plugin's decisions: the decision log line, the metrics, the pod
Events, the final admission refusal, and the error containerd gets.

:class:`Outcomes` is shared by the handlers, Synchronize's reconciliation, the resizes and the
single-container inference, so every decision and every refusal is reported the same way;
:func:`durable` turns a decision the ledger could not make durable into the request's error.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from nri_plrm.engine.explain import rejection_text
from nri_plrm.engine.resize import MEMORY_STATIC_MESSAGE
from nri_plrm.engine.spec import AdmissionError, ContainerAssignment
from nri_plrm.ledger import NotSavedError
from nri_plrm.ledger.tables import PodRecord
from nri_plrm.nri.handlers import NRIError
from nri_plrm.observability.metrics import Metrics
from nri_plrm.podsource.base import PodEventSink, PodRefusalSink

INVALID_RESOURCES = "InvalidResources"
"""Reason given when a container's NRI resources cannot be read."""
UNPLACED_REASON = "UnexpectedAdmissionError"
"""Reason counted and posted when a running container cannot get its allocation (the kubelet's
reason for an allocation that fails after admission)."""


@contextmanager
def durable() -> Iterator[None]:
    """A ledger decision inside that could not be written (``NotSavedError``: it was undone)
    fails the request with the ledger's text."""
    try:
        yield
    except NotSavedError as exc:
        raise NRIError(str(exc)) from exc


class Outcomes:
    """Reports decisions (see the module docstring). ``level`` gives the decision log level
    (INFO, or DEBUG inside Synchronize); ``events``, ``refused`` (API mode) and ``metrics`` are
    optional."""

    def __init__(
        self,
        log: logging.Logger,
        level: Callable[[], int],
        events: PodEventSink | None = None,
        refused: PodRefusalSink | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self.log = log
        self.level = level
        self.events = events
        self.refused = refused
        self.metrics = metrics

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

    def event(self, record: PodRecord, reason: str, message: str) -> None:
        """Post ``reason`` with ``message`` as a Warning Event on the pod (never blocks)."""
        if self.events is not None:
            spec = record.intent.spec
            self.events.record(spec.uid, spec.namespace, spec.name, reason, message)

    def rejected(
        self, record: PodRecord, container: str, err: AdmissionError, cause: str
    ) -> NRIError:
        """An admission refusal (of the pod, ``container`` "", or of a container): logged,
        posted and, when decided from the pod's API spec, reported as final
        (``nri_plrm.podsource.refusals``); the error containerd gets, with the cause."""
        why = rejection_text(err, cause)
        self.decision_log(record, container, None, f"rejected {err.reason}: {why}")
        self.event(record, err.reason, why)
        if self.refused is not None and record.spec is not None:
            spec = record.spec
            self.refused.record(spec.uid, spec.namespace, spec.name, err.reason, why)
        return NRIError(f"{_subject(record, container)}{err.reason}: {why}")

    def not_readmitted(self, record: PodRecord, container: str, err: AdmissionError) -> NRIError:
        """The single-container inference's step was refused (the pod could not be admitted
        again as its other kind): posted; the error containerd gets."""
        self.event(record, err.reason, err.message)
        return NRIError(f"{_subject(record, container)}{err.reason}: {err.message}")

    def invalid(self, record: PodRecord, container: str, problem: Exception) -> NRIError:
        """A container whose NRI resources cannot be read: counted and logged; the error."""
        if self.metrics is not None:
            self.metrics.record_placement_error(INVALID_RESOURCES)
        why = f"{INVALID_RESOURCES}: {problem}"
        self.decision_log(record, container, None, f"rejected {why}")
        return NRIError(f"{_subject(record, container)}{why}")

    def resize_refused(
        self, record: PodRecord, container: str, err: AdmissionError, *, from_pod: bool
    ) -> NRIError:
        """A refused in-place resize (``from_pod``: the pod holds a budget): counted in
        ``resource_manager_allocation_errors_total``, logged and posted; the error."""
        if self.metrics is not None:
            resource = "memory" if err.message == MEMORY_STATIC_MESSAGE else "cpu"
            source = "pod" if from_pod else "node"
            self.metrics.record_allocation(resource, source, ok=False)
        self.decision_log(record, container, None, f"resize refused {err.reason}: {err.message}")
        self.event(record, err.reason, err.message)
        subject = _subject(record, container) or f"pod {record.label()}: "
        return NRIError(f"{subject}{err.reason}: {err.message}")

    def in_node_pool(
        self,
        record: PodRecord,
        container: str,
        why: str,
        assignment: ContainerAssignment,
        *,
        counted: bool,
    ) -> None:
        """A known container that cannot get its allocation runs in the node shared pool:
        logged, counted (unless ``counted`` already) and posted."""
        self.log.warning(
            "pod=%s uid=%s container=%s cannot get its allocation (%s): node shared pool %s",
            record.label(),
            record.uid,
            container,
            why,
            assignment.cpus,
            extra={"plrm": {"event": "fallback", "pod": record.label(), "uid": record.uid}},
        )
        if self.metrics is not None and not counted:
            self.metrics.record_placement_error(UNPLACED_REASON)
        message = f"container {container} runs in the node shared pool: {why}"
        self.event(record, UNPLACED_REASON, message[:1000])

    def reconciled(self, action: str) -> None:
        """A container Synchronize adopted, corrected or released (``action``), counted."""
        if self.metrics is not None:
            self.metrics.record_reconcile(action)


def _subject(record: PodRecord, container: str) -> str:
    """What a container's refusal names first: the pod and the container (nothing for the pod
    itself: containerd names the sandbox)."""
    if container:
        return f"pod {record.label()} container {container}: "
    return ""
