"""In-place resizes as ledger decisions (docs/design.md section 10).

:class:`Resizes` runs a resize the plugin read from ``UpdateContainer``/``UpdatePodSandbox`` or
from the API watch through the :class:`~nri_plrm.ledger.NodeLedger`, and turns a refusal (the
kubelet's reason and message) into a failed request that is counted in
``resource_manager_allocation_errors_total``, logged and posted as an Event; nothing changes then.
"""

from __future__ import annotations

from dataclasses import replace

from nri_plrm.engine.spec import AdmissionError, ContainerSpec, PodSpec
from nri_plrm.ledger import NodeLedger
from nri_plrm.ledger.decision import Decision
from nri_plrm.ledger.tables import ContainerKey, PodRecord
from nri_plrm.nri.handlers import NRIError
from nri_plrm.plugin.outcomes import Outcomes, durable
from nri_plrm.translate.nri_to_pod import PodIntent, budget_intent


class Resizes:
    """Performs or refuses in-place resizes through the ledger and reports them through the
    plugin's reporter (see the module docstring)."""

    def __init__(self, ledger: NodeLedger, outcomes: Outcomes) -> None:
        self.ledger = ledger
        self.outcomes = outcomes

    def container(self, record: PodRecord, name: str, new: ContainerSpec) -> Decision:
        """Resize a container; raises ``NRIError`` with the kubelet's message when refused."""
        try:
            with durable():
                resized = self.ledger.resize((record.uid, name), new)
        except AdmissionError as err:
            raise self.refused(record, name, err) from err
        value = resized.placed.assignment.value
        self.outcomes.decision_log(record, name, resized.placed, f"resized, {value}")
        return resized

    def pod(self, record: PodRecord, intent: PodIntent) -> Decision:
        """Resize a pod budget; raises ``NRIError`` with the kubelet's message when refused."""
        try:
            with durable():
                resized = self.ledger.resize_pod(record.uid, intent)
        except AdmissionError as err:
            raise self.refused(record, "", err) from err
        cpus = self.ledger.engine.pod_cpus(record.uid)
        self.outcomes.decision_log(record, "", None, f"pod resized, pod cpus {cpus or '-'}")
        return resized

    def follow(self, spec: PodSpec) -> list[ContainerKey]:
        """API mode: the pod cache saw this pod's resources change. Run the resize now, as its
        ``UpdatePodSandbox``/``UpdateContainer`` would (they then find it done); the containers
        to update. A refusal is counted and posted and stops the rest of the resize (the
        kubelet's request then fails the same way)."""
        record = self.ledger.pod(spec.uid)
        known = self.ledger.engine.pod_so_far(spec.uid)
        if record is None or record.spec is None or not record.managed or known is None:
            return []
        changed: dict[ContainerKey, None] = {}
        try:
            if spec.has_pod_level_resources and (spec.requests, spec.limits) != (
                known.requests,
                known.limits,
            ):
                resized = self.pod(record, budget_intent(record.intent, spec))
                changed.update(dict.fromkeys(resized.changes))
            for ctr in spec.all_containers():
                old = known.container(ctr.name)
                if old is None or ctr.name not in record.containers:
                    continue
                if (old.requests, old.limits) != (ctr.requests, ctr.limits):
                    new = replace(ctr, kind=old.kind)
                    changed.update(dict.fromkeys(self.container(record, ctr.name, new).changes))
                    changed[(spec.uid, ctr.name)] = None
        except NRIError as exc:
            self.outcomes.log.warning(
                "pod=%s uid=%s resize not applied: %s", record.label(), spec.uid, exc
            )
        return list(changed)

    def refused(self, record: PodRecord, name: str, err: AdmissionError) -> NRIError:
        """A refused resize (nothing changed), reported; the error containerd gets."""
        from_pod = self.ledger.engine.pod_cpus(record.uid) is not None
        return self.outcomes.resize_refused(record, name, err, from_pod=from_pod)
