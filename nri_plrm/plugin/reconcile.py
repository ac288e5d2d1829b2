"""Synchronize: rebuild the node's state from what runs, then answer with the corrections.

The ``Reconciler`` runs inside :meth:`nri_plrm.plugin.handlers.Plugin.synchronize` (docs/design.md
§5):
it releases what the runtime no longer has, keeps every running container's cpuset that is a
valid allocation (:mod:`nri_plrm.ledger.rebuild`, :mod:`nri_plrm.engine.adoption`), places the
rest through the plugin's ordinary decisions, sends a container that cannot get its allocation
to the node shared pool, and logs and counts every update it answers with.
"""

from __future__ import annotations

import collections
import logging
import time
from collections.abc import Sequence
from typing import Protocol

from nri_plrm.base.cpuset import EMPTY, CPUSet
from nri_plrm.engine.adoption import AdoptionError, exclusive_request, has_budget
from nri_plrm.engine.spec import CPU, ContainerAssignment, ContainerSpec, PodSpec
from nri_plrm.ledger import NodeLedger, rebuild
from nri_plrm.ledger.decision import Decision
from nri_plrm.ledger.tables import PodRecord
from nri_plrm.nri.handlers import NRIError
from nri_plrm.plugin.outcomes import Outcomes, durable
from nri_plrm.proto import nri_api_pb2 as api
from nri_plrm.translate.nri_to_pod import (
    IntentError,
    PodIntent,
    PodMode,
    QOSClass,
    as_classic,
    container_spec,
    is_sole_guaranteed_candidate,
    pod_identity,
    pod_intent,
)
from nri_plrm.translate.pod_to_cri import (
    DEFAULT_CPU_PERIOD,
    assignment_update,
    milli_cpu_to_quota,
)


class SyncMemo:
    """What one Synchronize already worked out per pod, so that no step repeats it: the NRI
    intent of each sandbox (a node's worth of pods is otherwise read twice: to keep it, then to
    admit it). The API lookups are memoized by ``SpecLookups.batch``."""

    def __init__(self) -> None:
        self.intents: dict[str, PodIntent] = {}

    def intent(self, pod: api.PodSandbox) -> PodIntent:
        """:func:`pod_intent` of ``pod``, read once per sandbox id (raises ``IntentError``
        as it does, every time)."""
        known = self.intents.get(pod.id) if pod.id else None
        if known is None:
            known = pod_intent(pod)
            if pod.id:
                self.intents[pod.id] = known
        return known


def intent_of(pod: api.PodSandbox, memo: SyncMemo | None) -> PodIntent:
    """The pod's NRI intent, through ``memo`` inside a Synchronize."""
    return pod_intent(pod) if memo is None else memo.intent(pod)


class ReconcileHost(Protocol):
    """The plugin's ordinary decisions the reconciler makes through (what the runtime reports
    is admitted, placed and released as its events would be)."""

    async def lookup(self, uid: str, namespace: str, name: str) -> PodSpec | None: ...

    async def run_pod_sandbox(self, pod: api.PodSandbox) -> None: ...

    def remove_pod_sandbox(self, pod: api.PodSandbox) -> None: ...

    def remove_container(self, pod: api.PodSandbox, container: api.Container) -> None: ...

    def place_inferred(
        self, record: PodRecord, container: api.Container
    ) -> tuple[Decision, str | None]: ...

    def node_pool_fallback(
        self, record: PodRecord, ctr: api.Container, why: str, *, counted: bool
    ) -> ContainerAssignment: ...


class Reconciler:
    """One Synchronize's reconciliation; ``counts`` says what it did (``kept``, ``placed``,
    ``node_shared``)."""

    def __init__(
        self,
        host: ReconcileHost,
        ledger: NodeLedger,
        outcomes: Outcomes,
        memo: SyncMemo | None = None,
    ) -> None:
        self.host = host
        self.ledger = ledger
        self.outcomes = outcomes
        self.log = outcomes.log
        self.memo = SyncMemo() if memo is None else memo
        self.counts: collections.Counter[str] = collections.Counter()
        self.memory_kept: set[str] = set()
        """Pods admitted with the memory nodes their shared containers run on."""

    def log_summary(self, pods: int, containers: int, updates: int, start: float) -> None:
        """One INFO line for the whole Synchronize (``start``: its ``perf_counter``)."""
        self.log.info(
            "synchronized %d pods and %d containers in %.0f ms: %d kept as they run, %d placed, "
            "%d in the node shared pool, %d updates",
            pods,
            containers,
            (time.perf_counter() - start) * 1000,
            self.counts["kept"],
            self.counts["placed"],
            self.counts["node_shared"],
            updates,
        )

    async def run(
        self, pods: list[api.PodSandbox], containers: list[api.Container]
    ) -> list[api.ContainerUpdate]:
        tables = self.ledger.tables
        reported_pods = {pod_identity(p)[0]: p for p in pods}
        by_sandbox = {p.id: p for p in pods}
        reported_ids = {c.id for c in containers}
        for uid in [u for u in tables.pods if u not in reported_pods]:
            self.host.remove_pod_sandbox(sandbox_of(tables.pods[uid]))
        for cid, (uid, name) in list(tables.ids.items()):
            if cid not in reported_ids:
                self.host.remove_container(reported_pods[uid], api.Container(id=cid, name=name))
                self.outcomes.reconciled("released")
        unknown = rebuild.creation_order(
            c for c in containers if c.id not in tables.ids and c.pod_sandbox_id in by_sandbox
        )
        # Keep what runs where it is valid (docs/design.md §5), then place the rest.
        parsed: dict[str, CPUSet | None] = {}
        now = {c.id: rebuild.running(c, parsed) for c in containers}
        members: dict[str, list[tuple[api.Container, rebuild.Running]]] = {}
        for ctr in unknown:
            members.setdefault(ctr.pod_sandbox_id, []).append((ctr, now[ctr.id]))
        pinned = rebuild.pinned(now[c.id] for c in unknown)
        for uid in rebuild.pods_in_start_order(reported_pods, unknown):
            sandbox = reported_pods[uid]
            if uid not in tables.pods and sandbox.id in members:
                await self._keep_pod(sandbox, members[sandbox.id], pinned)
        for ctr in unknown:
            self._keep_container(by_sandbox[ctr.pod_sandbox_id], ctr, now[ctr.id])
        for uid, sandbox in reported_pods.items():
            if uid not in tables.pods:
                await self._adopt_pod(sandbox)
        uids = {p.id: pod_identity(p)[0] for p in pods}
        for ctr in unknown:
            record = self.ledger.pod(uids[ctr.pod_sandbox_id])
            if record is not None and ctr.id not in tables.ids:
                self._adopt_container(record, ctr)
        updates: list[api.ContainerUpdate] = []
        engine = self.ledger.engine
        for ctr in containers:
            key = tables.ids.get(ctr.id)
            assignment = self.ledger.assignment(key) if key is not None else None
            if key is None or assignment is None:
                continue
            record, running = tables.pods[key[0]], now[ctr.id]
            quota = None
            if running.exclusive and not assignment.exclusive:
                quota = shared_quota(record, engine.container_spec(*key))
            if quota is not None or not _matches(running, assignment):
                update = assignment_update(ctr.id, assignment)
                if quota is not None:
                    update.linux.resources.cpu.quota.value = quota[0]
                    update.linux.resources.cpu.period.value = quota[1]
                updates.append(update)
                self._log_correction(record, key[1], running, assignment)
        return updates

    async def _keep_pod(
        self,
        sandbox: api.PodSandbox,
        running: Sequence[tuple[api.Container, rebuild.Running]],
        pinned: CPUSet,
    ) -> None:
        """Admit a pod the state does not know with the CPUs its ``running`` containers hold,
        when they are consistent (NRI-only pods; a pod whose spec the API gives is admitted
        whole). A budget completed here avoids CPUs ``pinned`` to exclusive containers."""
        uid, namespace, name = pod_identity(sandbox)
        if await self.host.lookup(uid, namespace, name) is not None:
            return
        engine = self.ledger.engine
        try:
            intent = self.memo.intent(sandbox)
            if (
                len(running) == 1
                and running[0][1].exclusive
                and is_sole_guaranteed_candidate(intent, running[0][0])
            ):
                intent = as_classic(intent)  # promoted by the single-container inference
            budget = intent.mode is PodMode.BUDGET and has_budget(
                engine.cpu_manager, intent.spec, pod_scope=engine.pod_scope
            )
            mems = EMPTY
            if not budget and not any(r.exclusive for _, r in running):
                mems = self._memory_nodes(intent, running)
                if not mems:
                    return
            members = [
                (exclusive_request(engine.cpu_manager, intent.spec, container_spec(intent, c)), r)
                for c, r in running
            ]
        except IntentError:
            return
        cpu = engine.cpu_manager
        free = cpu.available_cpus()
        if budget:
            total = cpu.pod_guaranteed_cpus(intent.spec)
            claimed = rebuild.budget_claim(total, members, free, engine.topology.all_cpus)
        else:
            claimed = EMPTY.union(
                *(r.cpus for n, r in members if n > 0 and r.cpus and len(r.cpus) == n)
            )
            claimed = claimed & free
        if not claimed and not mems:
            return
        try:
            with durable():
                record = self.ledger.adopt_pod(uid, sandbox.id, intent, claimed, pinned, mems)
        except AdoptionError as exc:
            self.log.info("pod=%s/%s keeps no cpus it runs on: %s", namespace, name, exc)
            return
        if mems:
            self.memory_kept.add(uid)
        self.log.debug(
            "pod=%s uid=%s adopted with the cpus it runs on: %s, mems %s",
            record.label(),
            uid,
            engine.pod_cpus(uid) or claimed or "-",
            mems or "-",
            extra={"plrm": {"event": "admit", "pod": record.label(), "uid": uid}},
        )

    def _memory_nodes(
        self, intent: PodIntent, running: Sequence[tuple[api.Container, rebuild.Running]]
    ) -> CPUSet:
        """The memory nodes a Guaranteed pod without exclusive containers keeps (its shared
        containers' common mems) when the memory manager pins memory; empty otherwise."""
        engine = self.ledger.engine
        if intent.qos is not QOSClass.GUARANTEED or not engine.memory_manager.static:
            return EMPTY
        return rebuild.shared_mems(r for _, r in running)

    def _keep_container(
        self, sandbox: api.PodSandbox, ctr: api.Container, now: rebuild.Running
    ) -> None:
        """Record a running exclusive container with the cpuset it runs on, when valid; place a
        shared container of a pod that kept its memory nodes now, before other pods' containers
        can take that memory."""
        uid = pod_identity(sandbox)[0]
        if uid in self.memory_kept and not now.exclusive:
            record = self.ledger.pod(uid)
            if record is not None and ctr.id not in self.ledger.tables.ids:
                self._adopt_container(record, ctr)
            return
        if now.cpus is None or not now.exclusive:
            return
        record = self.ledger.pod(uid)
        if record is None or not record.managed or record.spec is not None:
            return
        try:
            cspec = container_spec(record.intent, ctr)
            with durable():
                assignment = self.ledger.adopt(
                    record.uid, ctr.name, ctr.id, cspec, now.cpus, now.mems
                )
        except (AdoptionError, IntentError) as exc:
            self.log.debug("container %s not kept as it runs: %s", ctr.id, exc)
            return
        self.counts["kept"] += 1
        self.outcomes.reconciled("adopted")
        self.outcomes.decision_log(record, ctr.name, assignment, "kept the cpuset it runs on")

    def _log_correction(
        self, record: PodRecord, name: str, now: rebuild.Running, assignment: ContainerAssignment
    ) -> None:
        """Log and count one Synchronize update (the container's old and new cpuset)."""
        old = str(now.cpus) if now.cpus is not None else "all"
        level = logging.WARNING if now.exclusive and now.cpus != assignment.cpus else logging.INFO
        self.log.log(
            level,
            "reconcile pod=%s container=%s cpus %s -> %s mems %s -> %s",
            record.label(),
            name,
            old,
            assignment.cpus,
            now.mems or "-",
            assignment.mems or "-",
            extra={
                "plrm": {
                    "event": "correction",
                    "pod": record.label(),
                    "uid": record.uid,
                    "container": name,
                    "old_cpus": old,
                    "cpus": str(assignment.cpus),
                }
            },
        )
        self.outcomes.reconciled("corrected")

    async def _adopt_pod(self, pod: api.PodSandbox) -> None:
        try:
            await self.host.run_pod_sandbox(pod)
        except NRIError as exc:
            uid = pod_identity(pod)[0]
            self.ledger.leave_unmanaged(uid, pod.id, self.memo.intent(pod))
            self.log.warning(
                "pod=%s/%s uid=%s exists but cannot be placed, its containers run in the node "
                "shared pool: %s",
                pod.namespace,
                pod.name,
                uid,
                exc,
            )

    def _adopt_container(self, record: PodRecord, ctr: api.Container) -> None:
        if not record.managed:
            self.host.node_pool_fallback(record, ctr, "the pod could not be placed", counted=False)
            return
        try:
            self.host.place_inferred(record, ctr)
        except NRIError as exc:
            self.host.node_pool_fallback(record, ctr, str(exc), counted=True)
            return
        self.counts["placed"] += 1
        self.outcomes.reconciled("adopted")


def sandbox_of(record: PodRecord) -> api.PodSandbox:
    """The ``PodSandbox`` a tracked pod was admitted from (identity and sandbox id)."""
    spec = record.intent.spec
    return api.PodSandbox(
        id=record.sandbox_id, uid=spec.uid, namespace=spec.namespace, name=spec.name
    )


def shared_quota(record: PodRecord, spec: ContainerSpec | None) -> tuple[int, int] | None:
    """The CFS quota and period the kubelet gives a container of ``record`` that runs on a
    shared pool: from its own CPU limit, else, in a pod with a budget, the budget's (the kubelet
    copies the pod's limit into a container that sets none); None when it has no limit."""
    limit = spec.limits.get(CPU, 0) if spec is not None else 0
    if limit:
        return milli_cpu_to_quota(limit), DEFAULT_CPU_PERIOD
    budget = record.intent.budget
    if record.intent.mode is PodMode.BUDGET and budget.cpu_quota > 0 and budget.cpu_period > 0:
        return budget.cpu_quota, budget.cpu_period
    return None


def _matches(now: rebuild.Running, assignment: ContainerAssignment) -> bool:
    """True when the container already runs with the decided cpus (and mems, when pinned); a
    shared container that still has quota -1 is :func:`shared_quota`'s to judge."""
    if now.cpus != assignment.cpus:
        return False
    if assignment.mems and now.mems != assignment.mems:
        return False
    return now.exclusive or not assignment.exclusive
