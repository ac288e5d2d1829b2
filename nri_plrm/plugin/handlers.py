"""The NRI handlers: pods and containers in, pinned cpusets out.

``Plugin`` implements the wire layer's ``Handlers`` contract (``nri_plrm.nri.stub``): it turns
NRI events into :class:`~nri_plrm.ledger.NodeLedger` decisions (whole-pod mode when a
``PodSpecSource`` knows the pod, NRI-only inference otherwise), answers with adjustments and
the updates of the event's own pod, and hands other pods' changed containers to the flusher of
:mod:`nri_plrm.plugin.pool_updates`, which sends them outside the events once the node settled
(never
from inside a handler).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from collections.abc import Callable, Iterable

from nri_plrm.base.cpuset import CPUSet
from nri_plrm.engine.explain import explain_rejection
from nri_plrm.engine.facade import Engine
from nri_plrm.engine.readmit import ReadmitRefused
from nri_plrm.engine.spec import (
    AdmissionError,
    AssignmentType,
    ContainerAssignment,
    ContainerSpec,
    PodSpec,
)
from nri_plrm.ledger import NodeLedger, NotSavedError
from nri_plrm.ledger.decision import Decision
from nri_plrm.ledger.tables import ContainerKey, PodRecord, kept_spec
from nri_plrm.nri.handlers import NRIError
from nri_plrm.observability.metrics import Metrics
from nri_plrm.plugin.cri_updates import CRIUpdater
from nri_plrm.plugin.outcomes import Outcomes, durable
from nri_plrm.plugin.pool_updates import (
    SentUpdates,
    UpdateFlusher,
    UpdateSender,
    reply_updates,
    targets_for,
)
from nri_plrm.plugin.reconcile import Reconciler, SyncMemo, intent_of
from nri_plrm.plugin.resizes import Resizes
from nri_plrm.plugin.single_container import DEMOTE, step, with_budget_quota
from nri_plrm.podresources.devices import (
    KubeletDevices,
    known_devices,
    sandbox_devices,
    with_devices,
)
from nri_plrm.podsource.base import PodEventSink, PodRefusalSink, PodSpecSource
from nri_plrm.podsource.dra import ClaimDevices, with_claim_devices
from nri_plrm.podsource.lookups import SpecLookups
from nri_plrm.proto import nri_api_pb2 as api
from nri_plrm.topology.device_numa import DeviceNUMA
from nri_plrm.translate.nri_devices import with_nri_devices
from nri_plrm.translate.nri_to_pod import (
    IntentError,
    container_spec,
    pod_identity,
    readmitted_intent,
    resized_budget,
    resized_container,
)
from nri_plrm.translate.pod_to_cri import (
    assignment_update,
    fill_assignment,
)


class Plugin:
    """NRI handlers deciding CPU and memory placement through the node ledger.

    ``ledger`` holds and persists the decisions; ``pod_specs`` (optional) gives full pod specs
    for the kubelet-exact whole-pod mode; ``metrics`` (optional) counts reconciliation;
    ``events`` (optional) receives the kubelet's rejection reason and message as pod Events;
    ``refused`` (optional) the final admission refusals of pods known from the API;
    ``devices`` (optional) the kubelet's device allocations, ``claims`` (optional) the pods'
    DRA claim devices, ``device_nodes`` the NUMA nodes of containers' own devices.
    """

    def __init__(
        self,
        ledger: NodeLedger,
        *,
        pod_specs: PodSpecSource | None = None,
        metrics: Metrics | None = None,
        logger: logging.Logger | None = None,
        lookup_timeout: float = 0.5,
        events: PodEventSink | None = None,
        refused: PodRefusalSink | None = None,
        devices: KubeletDevices | None = None,
        device_nodes: DeviceNUMA | None = None,
        claims: ClaimDevices | None = None,
    ) -> None:
        self.ledger = ledger
        self.devices = devices
        self.claims = claims
        self.device_nodes = device_nodes
        self.pod_specs = pod_specs
        self.metrics = metrics
        self.log = logger or logging.getLogger("nri_plrm.plugin")
        self.events = events
        self.outcomes = Outcomes(
            self.log, lambda: self._decision_level, events, refused, metrics=metrics
        )
        self.lookups = SpecLookups(lookup_timeout, metrics)
        """Each NRI request waits ``lookup_timeout`` seconds at most for pod specs."""
        self._memo: SyncMemo | None = None
        """What the current Synchronize already worked out per pod (lookups, intents)."""
        self.runtime = ("", "")
        self.sent = SentUpdates()
        """What the runtime was sent lately: updates that would repeat it are left out."""
        self.flusher = UpdateFlusher(
            ledger,
            self.log,
            self.sent,
            metrics.observe_pool_update_lag if metrics is not None else None,
        )
        self.resizes = Resizes(ledger, self.outcomes)

    def attach(
        self,
        sender: UpdateSender | None,
        *,
        cri: CRIUpdater | None = None,
        nri_version: Callable[[], str] = str,
    ) -> None:
        """Set how other containers' updates reach the runtime: ``sender`` sends an NRI
        ``UpdateContainers`` (the stub's ``update_containers``), ``cri`` a CRI
        ``UpdateContainerResources`` per container; ``nri_version`` tells the connected
        runtime's NRI version. The choice is made at each Configure (:meth:`configure`)."""
        self.flusher.routes(sender, cri, nri_version)

    async def drain(self) -> None:
        """Wait until queued pool updates have been sent (tests, shutdown)."""
        await self.flusher.drain()

    async def reassert(self, cpus: Callable[[ContainerAssignment], CPUSet]) -> tuple[int, int]:
        """Every container's assignment with the cpuset ``cpus`` gives, sent outside any NRI
        event (CPU hotplug repair): :meth:`UpdateFlusher.reassert`."""
        return await self.flusher.reassert(cpus)

    # ----------------------------------------------------------------- NRI handlers

    def configure(self, config: str, runtime_name: str, runtime_version: str) -> None:
        """Remember the runtime and choose how other containers' updates reach it; the plugin
        takes its settings from its own file, not NRI."""
        self.runtime = (runtime_name, runtime_version)
        self.log.info("configured by %s %s", runtime_name, runtime_version)
        self.flusher.choose_route()

    async def run_pod_sandbox(self, pod: api.PodSandbox) -> None:
        """Admit the pod: reserve its budget (scope pod) or fail the sandbox like the kubelet."""
        uid, namespace, name = pod_identity(pod)
        if self._known_sandbox(uid, pod.id):
            return
        started = self.lookups.now()
        found = known_devices(self.devices, self.ledger.engine, pod)
        if self.devices is None or found is not None:  # no task per pod (Synchronize)
            spec = await self.lookup(uid, namespace, name)
        else:
            spec, found = await asyncio.gather(
                self.lookup(uid, namespace, name),
                sandbox_devices(self.devices, self.ledger.engine, pod),
            )
        if self.claims is not None:
            found = await with_claim_devices(self.claims, uid, found, self.lookups.left(started))
        if self._known_sandbox(uid, pod.id):
            return
        try:
            intent = intent_of(pod, self._memo)
        except IntentError as exc:
            raise NRIError(f"pod {namespace}/{name}: {exc}") from exc
        spec, intent = with_devices(found, spec, intent)
        try:
            with durable():
                admitted = self.ledger.admit(uid, pod.id, intent, spec)
        except AdmissionError as err:
            whole = None if spec is None else kept_spec(spec)
            record = PodRecord(intent=intent, sandbox_id=pod.id, whole=whole)
            cause = explain_rejection(
                self.ledger.engine,
                spec or intent.spec,
                err,
                aggregate=None if spec else intent.aggregate,
            )
            raise self.outcomes.rejected(record, "", err, cause) from err
        record = admitted.record
        self._send_later(admitted.changes)
        if self.log.isEnabledFor(self._decision_level):
            mode = "spec" if spec is not None else intent.mode.value
            _log_admitted(self.log, self._decision_level, record, mode, self.ledger.engine)

    def _known_sandbox(self, uid: str, sandbox_id: str) -> bool:
        """True for a pod already admitted; a new sandbox of it (the kubelet recreates a dead
        one) keeps the pod's resources and becomes the pod's sandbox."""
        record = self.ledger.pod(uid)
        if record is None:
            return False
        if sandbox_id and record.sandbox_id != sandbox_id:
            with durable():
                self.ledger.move_sandbox(uid, sandbox_id)
            self.log.info("pod=%s uid=%s moved to sandbox %s", record.label(), uid, sandbox_id)
        return True

    async def create_container(
        self, pod: api.PodSandbox, container: api.Container
    ) -> tuple[api.ContainerAdjustment | None, list[api.ContainerUpdate]]:
        """Decide the container's cpuset and adjust it; the reply also updates the pod's own
        containers whose pool moved, the flusher the other pods' ones once it started."""
        uid = pod_identity(pod)[0]
        record = self.ledger.pod(uid)
        if record is None:
            await self.run_pod_sandbox(pod)
            record = self.ledger.pod(uid)
            assert record is not None
        if not record.managed:
            assignment = self.node_pool_fallback(
                record, container, "the pod could not be placed", counted=False
            )
            self.sent.record([(container.id, assignment)])
            return _adjustment(assignment), []
        decision, kind = self.place_inferred(record, container)
        assignment = decision.placed
        adjust = _adjustment(assignment)
        self.sent.record([(container.id, assignment)])
        self.flusher.starting(container.id)
        updates = self.flusher.reply_updates(uid, decision.changes, container.id)
        if kind == DEMOTE:
            updates = with_budget_quota(record, updates)
            self.sent.forget(record.containers.values())  # their updates carried the quota too
        return adjust, updates

    def place_inferred(
        self, record: PodRecord, container: api.Container
    ) -> tuple[Decision, str | None]:
        """:meth:`place` the container, or, when the NRI-only single-container inference calls
        for a step (promote or demote), take it and place the container as one decision; the
        step taken. A refusal raises ``NRIError``; nothing changed then."""
        kind = step(record, container)
        return self.place(record, container, kind), kind

    def update_container(
        self, pod: api.PodSandbox, container: api.Container, resources: api.LinuxResources
    ) -> list[api.ContainerUpdate]:
        """An in-place resize when the kubelet changed the container's CPU or memory (performed
        or refused as the kubelet does, docs/design.md section 10); otherwise re-assert the
        container's pinning over what the kubelet asked for."""
        key = self.ledger.container(container.id)
        record = self.ledger.pod(key[0]) if key is not None else None
        if key is None or record is None:
            return []
        old = self.ledger.engine.container_spec(*key)
        new = resized_container(record.intent, old, resources) if old is not None else None
        if new is None:  # the kubelet's values replaced the pinning: assert it again
            current = targets_for(self.ledger, self.ledger.assignments([key]))
            return reply_updates(self.sent, current, again=True)
        resized = self.resizes.container(record, key[1], new)
        assignment = resized.placed
        self.sent.record([(container.id, assignment)])
        own = self.flusher.reply_updates(key[0], resized.changes, container.id)
        return [assignment_update(container.id, assignment), *own]

    def update_pod_sandbox(
        self,
        pod: api.PodSandbox,
        overhead: api.LinuxResources | None,
        resources: api.LinuxResources | None,
    ) -> None:
        """An in-place resize of the pod budget (pod-level resources): performed or refused as
        the kubelet does; the containers whose pool changed are updated right after the reply."""
        record = self.ledger.pod(pod_identity(pod)[0])
        if record is None or not record.managed:
            return
        if record.spec is not None and not record.spec.has_pod_level_resources:
            return
        intent = resized_budget(record.intent, resources)
        if intent is not None:
            self._send_later(self.resizes.pod(record, intent).changes)

    def follow_pod(self, spec: PodSpec) -> None:
        """API mode: the pod cache saw this pod's resources change (an in-place resize)."""
        self._send_later(self.resizes.follow(spec))

    def stop_container(
        self, pod: api.PodSandbox, container: api.Container
    ) -> list[api.ContainerUpdate]:
        """The container exited (maybe reported twice): its exclusive slice becomes reusable."""
        self.flusher.started(container.id)
        key = self.ledger.container(container.id)
        if key is None:
            return []
        return self.flusher.reply_updates(key[0], self.ledger.stop(key), container.id)

    def post_start_container(self, pod: api.PodSandbox, container: api.Container) -> None:
        """The container started: the pool updates its creation queued may go now."""
        self.flusher.started(container.id)

    def remove_container(self, pod: api.PodSandbox, container: api.Container) -> None:
        """Release the container per the kubelet's rules; grown pools are sent asynchronously."""
        self.flusher.started(container.id)
        if self.ledger.container(container.id) is None:
            return
        self._send_later(self.ledger.remove_container(container.id), grown=True)
        self.sent.forget([container.id])

    def remove_pod_sandbox(self, pod: api.PodSandbox) -> None:
        """Release everything the pod holds; grown pools are sent asynchronously. Removing a
        sandbox the pod has been moved away from releases nothing."""
        uid = pod_identity(pod)[0]
        record = self.ledger.pod(uid)
        if record is None or (pod.id and record.sandbox_id and pod.id != record.sandbox_id):
            return
        released, changes = self.ledger.remove_pod(uid)
        if released is not None:
            self.sent.forget(released.containers.values())
        if released is not None:
            self.log.info(
                "pod=%s uid=%s released",
                released.label(),
                uid,
                extra={"plrm": {"event": "release", "pod": released.label(), "uid": uid}},
            )
        self._send_later(changes, grown=True)

    async def synchronize(
        self, pods: list[api.PodSandbox], containers: list[api.Container]
    ) -> list[api.ContainerUpdate]:
        """Reconcile the restored state with what the runtime reports (docs/design.md §5).

        Every change is written at once with one full checkpoint at the end; when that fails,
        the reconciliation is undone and the request fails (the runtime retries on reconnect).
        """
        start = time.perf_counter()
        collecting = gc.isenabled()
        gc.disable()  # it builds the node's state: collecting half-way is wasted work
        self._memo = memo = SyncMemo()
        try:
            with self.lookups.batch(), self.ledger.batch():
                reconciler = Reconciler(self, self.ledger, self.outcomes, memo)
                updates = await reconciler.run(pods, containers)
        except NotSavedError as exc:
            raise NRIError(f"reconciliation not applied: {exc}") from exc
        finally:
            self._memo = None
            if collecting:
                gc.freeze()  # what it built lives as long as the plugin: no collection walks it
                gc.enable()
        self.flusher.clear()
        self.sent.clear()
        reconciler.log_summary(len(pods), len(containers), len(updates), start)
        return updates

    @property
    def _decision_level(self) -> int:
        """Decisions are logged at INFO, except inside Synchronize (one summary line there;
        every change it makes is logged on its own)."""
        return logging.DEBUG if self.ledger.in_batch else logging.INFO

    def on_disconnect(self) -> None:
        """Connection lost: pending pool updates are dropped (the next Synchronize redoes them)
        and nothing sent before is trusted."""
        self.flusher.cancel()
        self.sent.clear()

    # ----------------------------------------------------------------- internals

    async def lookup(self, uid: str, namespace: str, name: str) -> PodSpec | None:
        """The pod's spec from ``pod_specs`` within this request's lookup budget."""
        return await self.lookups.find(self.pod_specs, uid, namespace, name)

    def place(
        self, record: PodRecord, container: api.Container, readmit: str | None = None
    ) -> Decision:
        """Place ``container`` (after re-admitting its pod as ``readmit`` says, as one
        decision: ``NodeLedger.readmit``); a refusal raises ``NRIError``."""
        name = container.name
        cspec: ContainerSpec | None = None
        try:
            if record.spec is not None:
                cspec = record.spec.container(name) or ContainerSpec(name)
            else:
                intent = record.intent
                if readmit is not None:
                    intent = readmitted_intent(intent, readmit)
                cspec = container_spec(intent, container)
                cspec = with_nri_devices(cspec, container, self.device_nodes)
            with durable():
                if readmit is not None:
                    uid, cid = record.uid, container.id
                    decision = self.ledger.readmit(uid, readmit, name, cid, cspec)
                    self.log.info(
                        "pod=%s uid=%s %sd (single-container inference)",
                        record.label(),
                        uid,
                        readmit,
                    )
                else:
                    decision = self.ledger.place(record.uid, name, container.id, cspec)
        except ReadmitRefused as err:
            if not err.placing:
                raise self.outcomes.not_readmitted(record, name, err) from err
            raise self.outcomes.rejected(record, name, err, err.cause) from err
        except AdmissionError as err:
            cause = explain_rejection(self.ledger.engine, record.pod_spec, err, cspec)
            raise self.outcomes.rejected(record, name, err, cause) from err
        except IntentError as err:
            raise self.outcomes.invalid(record, name, err) from err
        self.outcomes.decision_log(record, name, decision.placed, _reason(decision.placed))
        return decision

    def node_pool_fallback(
        self, record: PodRecord, ctr: api.Container, why: str, *, counted: bool
    ) -> ContainerAssignment:
        """A known container that cannot get its allocation runs in the node shared pool, never
        on every CPU: recorded, logged, counted (unless ``counted`` already) and posted."""
        with durable():
            assignment = self.ledger.node_shared(record.uid, ctr.name, ctr.id)
        self.outcomes.in_node_pool(record, ctr.name, why, assignment, counted=counted)
        return assignment

    def _send_later(self, changes: Iterable[ContainerKey], *, grown: bool = False) -> None:
        """Queue pool changes for the flusher, sent once the node settled (Synchronize answers
        for everything itself)."""
        if not self.ledger.in_batch:
            self.flusher.queue(changes, grown=grown)


_REASONS = {
    AssignmentType.NODE_EXCLUSIVE: "exclusive slice from the node",
    AssignmentType.POD_EXCLUSIVE: "exclusive slice from the pod budget",
    AssignmentType.POD_SHARED: "pod shared pool",
    AssignmentType.NODE_SHARED: "node shared pool",
}


def _reason(assignment: ContainerAssignment) -> str:
    return _REASONS[assignment.assignment]


def _log_admitted(
    log: logging.Logger, level: int, record: PodRecord, mode: str, engine: Engine
) -> None:
    """The decision line of an admitted pod: its mode, budget CPUs and reserved CPUs."""
    uid = record.uid
    cpus = engine.pod_cpus(uid)
    log.log(
        level,
        "pod=%s uid=%s admitted mode=%s budget_cpus=%d pod_cpus=%s",
        record.label(),
        uid,
        mode,
        record.intent.budget_cpus,
        cpus if cpus else "-",
        extra={"plrm": {"event": "admit", "pod": record.label(), "uid": uid}},
    )


def _adjustment(assignment: ContainerAssignment) -> api.ContainerAdjustment:
    adjust = api.ContainerAdjustment()
    fill_assignment(adjust.linux.resources, assignment)
    return adjust
