"""The replayable transitions: every change of the engine and the tables goes through one.

Each transition applies a decision and returns the journal record (``Op``) that replays it;
:meth:`Transitions.replay` applies a record read back from the journal through the same code,
so a restarted plugin reaches the same state (the engine is deterministic).
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from typing import Any, cast

from nri_plrm.base.cpuset import EMPTY, CPUSet
from nri_plrm.engine.facade import Changes, Engine
from nri_plrm.engine.readmit import Explain, Readmitted
from nri_plrm.engine.resize import resize_container, resize_pod
from nri_plrm.engine.spec import (
    AdmissionError,
    AssignmentType,
    ContainerAssignment,
    ContainerSpec,
    PodSpec,
)
from nri_plrm.engine.spec_json import (
    container_from_dict,
    container_to_dict,
    spec_from_dict,
    spec_to_dict,
)
from nri_plrm.ledger.tables import ContainerKey, PodRecord, Tables
from nri_plrm.translate.nri_to_pod import (
    DEMOTE,
    PROMOTE,
    PodIntent,
    budget_container,
    intent_from_dict,
    intent_to_dict,
    readmit_kind,
    readmitted_intent,
)

Op = dict[str, Any]
"""One journal record: a decision's inputs, replayable through the engine."""


class Transitions:
    """The engine and the tables, changed only by the methods below.

    ``changed_pods`` collects the uids whose containers' assignments may have changed since the
    owner last emptied it (the read model rebuilds those pods), ``followed_pool`` the containers
    that only moved with the node shared pool (see :mod:`.read_model`).
    """

    def __init__(self, engine: Engine, tables: Tables | None = None) -> None:
        self.engine = engine
        self.tables = tables or Tables()
        self.changed_pods: set[str] = set()
        self.followed_pool: set[ContainerKey] = set()

    def note(self, changes: Changes) -> None:
        """Note the pods of these changed containers for the read model."""
        for key, assignment in changes.items():
            if assignment.assignment is AssignmentType.NODE_SHARED:
                self.followed_pool.add(key)
            else:
                self.changed_pods.add(key[0])

    def forget_changes(self) -> None:
        """Empty ``changed_pods`` and ``followed_pool`` (the read model has them)."""
        self.changed_pods.clear()
        self.followed_pool.clear()

    def _intent_form(self, intent: PodIntent) -> dict[str, Any]:
        """The intent's JSON-able form for an op, shared with the next snapshot (both only
        read it): a Synchronize admitting a node's worth of pods converts each intent once."""
        return cast(dict[str, Any], self.tables.intent_forms.form(intent, intent_to_dict))

    def _changed(self, uid: str, changes: Changes) -> Changes:
        self.changed_pods.add(uid)
        self.note(changes)
        return changes

    def admit(
        self, uid: str, sandbox_id: str, intent: PodIntent, spec: PodSpec | None
    ) -> tuple[PodRecord, Changes, Op]:
        """Admit a pod: whole when ``spec`` is known, else by its NRI intent (budget only).
        Raises ``AdmissionError``; nothing changes then."""
        if spec is not None:
            changes = self.engine.admit_pod(spec)
        else:
            changes = self.engine.admit_sandbox(intent.spec, intent.aggregate)
        whole = None if spec is None else partial(self.engine.pod_spec, uid)
        record = PodRecord(intent=intent, sandbox_id=sandbox_id, whole=whole)
        self.tables.pods[uid] = record
        op: Op = {
            "op": "admit",
            "uid": uid,
            "sandbox": sandbox_id,
            "intent": self._intent_form(intent),
        }
        op["spec"] = None if spec is None else spec_to_dict(spec)
        return record, self._changed(uid, changes), op

    def move_sandbox(self, uid: str, sandbox_id: str) -> Op:
        """The pod lives on in a new sandbox (the kubelet recreated a dead one)."""
        self.tables.pods[uid].sandbox_id = sandbox_id
        return {"op": "sandbox", "uid": uid, "sandbox": sandbox_id}

    def leave_unmanaged(self, uid: str, sandbox_id: str, intent: PodIntent) -> Op:
        """Track an existing pod that could not be placed, without resources."""
        self.tables.pods[uid] = PodRecord(intent=intent, sandbox_id=sandbox_id, managed=False)
        self.changed_pods.add(uid)
        return {
            "op": "unmanaged",
            "uid": uid,
            "sandbox": sandbox_id,
            "intent": self._intent_form(intent),
        }

    def place(
        self, uid: str, name: str, cid: str, cspec: ContainerSpec
    ) -> tuple[ContainerAssignment, Changes, Op]:
        """Place a container of an admitted pod. Raises ``AdmissionError``; nothing changes
        then (a container id it replaced is restored)."""
        tables = self.tables
        record = tables.pods[uid]
        previous = record.containers.get(name)
        record.containers[name] = cid
        if previous is not None and previous != cid:
            tables.ids.pop(previous, None)
        tables.ids[cid] = (uid, name)
        try:
            assignment, changes = self.engine.add_container(record.pod_spec, cspec)
        except AdmissionError:
            tables.ids.pop(cid, None)
            del record.containers[name]
            if previous is not None and previous != cid:
                record.containers[name] = previous
                tables.ids[previous] = (uid, name)
            raise
        op: Op = {
            "op": "place",
            "uid": uid,
            "name": name,
            "cid": cid,
            "container": self.engine.forms.form(cspec, container_to_dict),
        }
        return assignment, self._changed(uid, changes), op

    # Issue 12, rebuild from what runs: allocations adopted as they run, node shared fallback.

    def adopt_pod(
        self,
        uid: str,
        sandbox_id: str,
        intent: PodIntent,
        claimed: CPUSet,
        avoid: CPUSet = EMPTY,
        mems: CPUSet = EMPTY,
    ) -> tuple[PodRecord, Op]:
        """Admit a running pod keeping the CPUs its containers hold, or the memory nodes its
        shared containers run on (``engine.adoption``). Raises ``AdoptionError``; nothing
        changes then."""
        self.engine.adopt_sandbox(intent.spec, intent.aggregate, claimed, avoid, mems)
        record = PodRecord(intent=intent, sandbox_id=sandbox_id)
        self.tables.pods[uid] = record
        self.changed_pods.add(uid)
        cpus = self.engine.pod_cpus(uid) or claimed
        op: Op = {
            "op": "adopt_pod",
            "uid": uid,
            "sandbox": sandbox_id,
            "intent": self._intent_form(intent),
            "cpus": str(cpus),
        }
        if mems:
            op["mems"] = str(mems)
        return record, op

    def adopt(
        self, uid: str, name: str, cid: str, cspec: ContainerSpec, cpus: CPUSet, mems: CPUSet
    ) -> tuple[ContainerAssignment, Op]:
        """Record a running container with the exclusive cpus it runs on. Raises
        ``AdoptionError``; nothing changes then."""
        assignment = self.engine.adopt_container(uid, cspec, cpus, mems)
        self.tables.pods[uid].containers[name] = cid
        self.tables.ids[cid] = (uid, name)
        self.changed_pods.add(uid)
        op: Op = {
            "op": "adopt",
            "uid": uid,
            "name": name,
            "cid": cid,
            "container": container_to_dict(cspec),
            "cpus": str(cpus),
            "mems": str(mems),
        }
        return assignment, op

    def node_shared(self, uid: str, name: str, cid: str) -> tuple[ContainerAssignment, Op]:
        """Record a running container that cannot get its allocation in the node shared
        pool."""
        record = self.tables.pods[uid]
        assignment = self.engine.place_in_node_pool(record.pod_spec, name)
        record.containers[name] = cid
        self.tables.ids[cid] = (uid, name)
        self.changed_pods.add(uid)
        return assignment, {"op": "node_shared", "uid": uid, "name": name, "cid": cid}

    def stop(self, uid: str, name: str) -> tuple[Changes, Op]:
        """The container exited: what it held exclusively becomes reusable."""
        changes = self.engine.stop_container(uid, name)
        return self._changed(uid, changes), {"op": "stop", "uid": uid, "name": name}

    def remove_container(self, cid: str) -> tuple[Changes, Op]:
        """Forget a container and release what it holds."""
        op: Op = {"op": "remove", "cid": cid}
        key = self.tables.ids.pop(cid, None)
        if key is None:
            return {}, op
        uid, name = key
        record = self.tables.pods.get(uid)
        if record is not None and record.containers.get(name) == cid:
            del record.containers[name]
        return self._changed(uid, self.engine.remove_container(uid, name)), op

    def remove_pod(self, uid: str) -> tuple[PodRecord | None, Changes, Op]:
        """Forget a pod and release everything it holds."""
        op: Op = {"op": "remove_pod", "uid": uid}
        record = self.tables.pods.pop(uid, None)
        if record is None:
            return None, {}, op
        for cid in record.containers.values():
            self.tables.ids.pop(cid, None)
        return record, self._changed(uid, self.engine.remove_pod(uid)), op

    def resize(
        self, uid: str, name: str, new: ContainerSpec
    ) -> tuple[ContainerAssignment, Changes, Op]:
        """Resize a container in place (engine/resize.py). Raises ``AdmissionError`` with the
        kubelet's reason and message; nothing changes then."""
        if uid not in self.tables.pods:
            raise KeyError(uid)
        assignment, changes = resize_container(self.engine, uid, new)
        op: Op = {"op": "resize", "uid": uid, "name": name, "container": container_to_dict(new)}
        return assignment, self._changed(uid, changes), op

    def resize_pod(self, uid: str, intent: PodIntent) -> tuple[Changes, Op]:
        """Resize a pod budget in place to ``intent``'s pod-level resources. Raises
        ``AdmissionError``; nothing changes then."""
        record = self.tables.pods[uid]
        requests, limits = intent.spec.requests or {}, intent.spec.limits or {}
        changes = resize_pod(self.engine, uid, requests, limits)
        record.intent = intent
        op: Op = {"op": "resize_pod", "uid": uid, "intent": intent_to_dict(intent)}
        return self._changed(uid, changes), op

    def readmit(
        self,
        uid: str,
        kind: str,
        placing: tuple[str, str, ContainerSpec] | None = None,
        explain: Explain | None = None,
    ) -> tuple[Readmitted, Op]:
        """NRI-only single-container inference: re-admit a pod as classic (``PROMOTE``, its
        first container holding the budget) or as its budget (``DEMOTE``) with its containers
        so far (stopped ones stopped), then place the container ``placing`` names (name, id,
        spec), as one engine operation (``Engine.readmit``). Raises ``ReadmitRefused``
        (``explain`` gives a refused container's cause); nothing changes then."""
        record = self.tables.pods[uid]
        intent = readmitted_intent(record.intent, kind)
        engine = self.engine
        names = list(record.containers)
        containers = [
            budget_container(intent, n) if kind == PROMOTE else ContainerSpec(n) for n in names
        ]
        stopped = {n for n in names if engine.is_stopped(uid, n)}
        new = None if placing is None else placing[2]
        done = engine.readmit(intent.spec, intent.aggregate, containers, stopped, new, explain)
        record.intent = intent
        op: Op = {"op": kind, "uid": uid}
        if placing is not None:
            name, cid, cspec = placing
            record.containers[name] = cid
            self.tables.ids[cid] = (uid, name)
            op = {
                "op": "readmit",
                "uid": uid,
                "kind": kind,
                "name": name,
                "cid": cid,
                "container": engine.forms.form(cspec, container_to_dict),
            }
        self._changed(uid, done.changes)
        return done, op

    def replay(self, op: Mapping[str, Any]) -> None:
        """Apply a journal record; raises ``AdmissionError``, KeyError, TypeError or
        ValueError when it does not apply."""
        kind = op.get("op")
        if kind == "admit":
            spec = op.get("spec")
            self.admit(
                str(op["uid"]),
                str(op["sandbox"]),
                intent_from_dict(op["intent"]),
                None if spec is None else spec_from_dict(spec),
            )
        elif kind == "sandbox":
            self.move_sandbox(str(op["uid"]), str(op["sandbox"]))
        elif kind == "unmanaged":
            self.leave_unmanaged(str(op["uid"]), str(op["sandbox"]), intent_from_dict(op["intent"]))
        elif kind == "place":
            self.place(
                str(op["uid"]),
                str(op["name"]),
                str(op["cid"]),
                container_from_dict(op["container"]),
            )
        elif kind == "adopt_pod":
            self.adopt_pod(
                str(op["uid"]),
                str(op["sandbox"]),
                intent_from_dict(op["intent"]),
                CPUSet.parse(str(op["cpus"])),
                mems=CPUSet.parse(str(op.get("mems", ""))),
            )
        elif kind == "adopt":
            self.adopt(
                str(op["uid"]),
                str(op["name"]),
                str(op["cid"]),
                container_from_dict(op["container"]),
                CPUSet.parse(str(op["cpus"])),
                CPUSet.parse(str(op["mems"])),
            )
        elif kind == "node_shared":
            self.node_shared(str(op["uid"]), str(op["name"]), str(op["cid"]))
        elif kind == "stop":
            self.stop(str(op["uid"]), str(op["name"]))
        elif kind == "remove":
            self.remove_container(str(op["cid"]))
        elif kind == "remove_pod":
            self.remove_pod(str(op["uid"]))
        elif kind == "resize":
            self.resize(str(op["uid"]), str(op["name"]), container_from_dict(op["container"]))
        elif kind == "resize_pod":
            self.resize_pod(str(op["uid"]), intent_from_dict(op["intent"]))
        elif kind == "readmit":
            placing = (str(op["name"]), str(op["cid"]), container_from_dict(op["container"]))
            self.readmit(str(op["uid"]), readmit_kind(op["kind"]), placing)
        elif kind in (PROMOTE, DEMOTE):  # journal format 1: the container was a "place" after it
            self.readmit(str(op["uid"]), str(kind))
        else:
            raise ValueError(f"unknown operation {kind!r}")
