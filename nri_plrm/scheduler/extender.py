"""The kube-scheduler extender protocol (``k8s.io/kube-scheduler/extender/v1``), sans I/O.

The upstream Go types carry no JSON tags, so the wire names are the Go field names:
``ExtenderArgs`` ``{"Pod", "Nodes", "NodeNames"}`` (``NodeNames`` when the extender is
``nodeCacheCapable``, else ``Nodes``, a NodeList), ``ExtenderFilterResult`` ``{"Nodes",
"NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"}``, ``HostPriorityList``
``[{"Host", "Score"}]`` with scores 0..10 (``MaxExtenderPriority``), ``ExtenderBindingArgs``
``{"PodName", "PodNamespace", "PodUID", "Node"}`` and ``ExtenderBindingResult`` ``{"Error"}``.
Go decodes JSON keys case-insensitively, so requests are read the same way.

:class:`Extender` holds the nodes' published states (:meth:`Extender.update_node`) and the
assume cache, and answers each verb with :class:`~nri_plrm.scheduler.decide.NodeModel`'s
verdicts: a node whose engine admits the pod passes; one that refuses it goes to
``FailedNodes`` with the kubelet's reason, message and cause, or to
``FailedAndUnresolvableNodes`` when the node refuses it even with nothing allocated (no
preemption can help). Nodes with equal states share one model, and a verdict is kept per
(state, pod shape) while no assumed pod is pending there.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from nri_plrm.engine.spec import PodSpec
from nri_plrm.podsource.convert import PodObjectError, pod_spec_from_api
from nri_plrm.podsource.nrt_exact_state import PublishedNode, PublishedStateError, read_published
from nri_plrm.scheduler.assume import AssumeCache
from nri_plrm.scheduler.decide import NodeModel, NodeType, Verdict
from nri_plrm.scheduler.settings import MOST_ALLOCATED, UNKNOWN_PASS, ExtenderSettings

MAX_EXTENDER_PRIORITY = 10
"""``MaxExtenderPriority``: the highest score an extender gives."""
MAX_MODELS = 4096
"""Node models kept (one per distinct published state)."""
MAX_VERDICTS = 65536
"""Verdicts kept per (state, pod shape)."""
MAX_PODS = 4096
"""Pods remembered between filter and bind."""
UNKNOWN_NODE = "NodeResourceTopologyUnknown"

log = logging.getLogger("nri_plrm.scheduler")


class ExtenderRequestError(ValueError):
    """A request the extender cannot read: which field, the value and the rule."""


def field(doc: Mapping[str, Any], name: str) -> Any:
    """``doc[name]`` matched as Go's JSON decoder does: the exact key, else case-insensitively."""
    if name in doc:
        return doc[name]
    lower = name.lower()
    for key, value in doc.items():
        if isinstance(key, str) and key.lower() == lower:
            return value
    return None


@dataclass
class _Node:
    published: PublishedNode | None
    error: str
    resource_version: str


class Extender:
    """Filter, prioritize and bind decisions over the nodes' published states."""

    def __init__(
        self,
        settings: ExtenderSettings,
        clock: Callable[[], float],
        on_verdict: Callable[[str], None] | None = None,
    ) -> None:
        self.settings = settings
        self.clock = clock
        self.on_verdict = on_verdict or (lambda _v: None)
        self.assumed = AssumeCache(settings.assume_ttl)
        self._nodes: dict[str, _Node] = {}
        self._models: dict[str, NodeModel] = {}
        self._holders: dict[str, int] = {}
        """Nodes holding each published state: a model no node holds any more is dropped."""
        self._types: dict[str, NodeType] = {}
        self._verdicts: dict[tuple[str, str, bool], Verdict] = {}
        self._pods: dict[str, PodSpec] = {}

    # -- nodes ---------------------------------------------------------------------------------

    def update_node(self, obj: Mapping[str, Any]) -> None:
        """Take a node's NodeResourceTopology object (unchanged ``resourceVersion``: kept)."""
        meta = obj.get("metadata") if isinstance(obj, Mapping) else None
        if not isinstance(meta, Mapping):
            return
        name = str(meta.get("name", ""))
        rv = str(meta.get("resourceVersion", ""))
        known = self._nodes.get(name)
        if not name or (known is not None and rv and known.resource_version == rv):
            return
        self._forget(name)
        try:
            published = read_published(obj)
        except PublishedStateError as exc:
            self._nodes[name] = _Node(None, str(exc), rv)
            return
        self._nodes[name] = _Node(published, "", rv)
        key = published.state_key
        self._holders[key] = self._holders.get(key, 0) + 1

    def remove_node(self, name: str) -> None:
        """The node's object is gone."""
        self._forget(name)

    def _forget(self, name: str) -> None:
        node = self._nodes.pop(name, None)
        if node is None or node.published is None:
            return
        key = node.published.state_key
        left = self._holders.get(key, 0) - 1
        if left > 0:
            self._holders[key] = left
        else:
            self._holders.pop(key, None)
            self._models.pop(key, None)

    def node_names(self) -> list[str]:
        """Nodes with an object, usable or not."""
        return list(self._nodes)

    def models(self) -> int:
        """Published states with a model (at most one per node)."""
        return len(self._models)

    def node_error(self, name: str) -> str:
        """Why a node's object cannot be used ("" when it can, or when there is none)."""
        node = self._nodes.get(name)
        return node.error if node is not None else ""

    def _model(self, published: PublishedNode) -> NodeModel:
        model = self._models.get(published.state_key)
        if model is None:
            if len(self._models) >= MAX_MODELS:
                self._models.clear()
                self._verdicts.clear()
                self._types.clear()
            node_type = self._types.get(published.type_key)
            if node_type is None:
                node_type = self._types[published.type_key] = NodeType(published)
            model = NodeModel(published, node_type)
            self._models[published.state_key] = model
        return model

    def verdict(self, name: str, pod: PodSpec, shape: str, *, score: bool = False) -> Verdict:
        """One node's verdict for ``pod`` (``shape``: the pod without its identity)."""
        node = self._nodes.get(name)
        if node is None or node.published is None:
            why = node.error if node is not None else f"no NodeResourceTopology object for {name}"
            if self.settings.unknown_nodes == UNKNOWN_PASS:
                return Verdict(True, free_after=0.0 if score else None)
            return Verdict(False, UNKNOWN_NODE, why, "nri-plrm does not publish this node")
        published = node.published
        pending = self.assumed.pending(published, self.clock())
        if pending:
            return self._model(published).decide(pod, pending, score=score, shape=shape)
        key = (published.state_key, shape, score)
        verdict = self._verdicts.get(key)
        if verdict is None:
            verdict = self._model(published).decide(pod, score=score, shape=shape)
            if len(self._verdicts) >= MAX_VERDICTS:
                self._verdicts.clear()
            self._verdicts[key] = verdict
        return verdict

    # -- verbs ---------------------------------------------------------------------------------

    def _pod(self, args: Mapping[str, Any]) -> tuple[PodSpec, str] | None:
        """The pod and its shape; None for a pod the conversion refuses (the node's pod cache
        refuses it too and the node decides it from NRI data: every node passes). Raises
        :class:`ExtenderRequestError` for arguments without a pod object."""
        if not isinstance(args, Mapping):
            raise ExtenderRequestError(f"ExtenderArgs: {type(args).__name__}: must be an object")
        obj = field(args, "Pod")
        if not isinstance(obj, Mapping):
            raise ExtenderRequestError(f"ExtenderArgs.Pod: {obj!r}: must be a Pod object")
        try:
            pod = pod_spec_from_api(obj)
        except PodObjectError as exc:
            log.warning("%s; every node passes (the node decides it from NRI data)", exc)
            return None
        if len(self._pods) >= MAX_PODS:
            del self._pods[next(iter(self._pods))]
        self._pods[pod.uid] = pod
        anonymous = dataclasses.replace(pod, uid="", name="", namespace="")
        return pod, repr(anonymous)

    @staticmethod
    def _candidates(args: Mapping[str, Any]) -> tuple[list[str], list[Any] | None]:
        """The candidate node names, and the NodeList items when the request carried them."""
        names = field(args, "NodeNames")
        if names is not None:
            if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
                raise ExtenderRequestError("ExtenderArgs.NodeNames: must be a list of names")
            return names, None
        nodes = field(args, "Nodes")
        if nodes is None:
            return [], None
        items = field(nodes, "items") if isinstance(nodes, Mapping) else None
        if not isinstance(items, list):
            raise ExtenderRequestError("ExtenderArgs.Nodes: must be a NodeList with items")
        out = []
        for item in items:
            meta = field(item, "metadata") if isinstance(item, Mapping) else None
            name = field(meta, "name") if isinstance(meta, Mapping) else None
            if not isinstance(name, str):
                raise ExtenderRequestError("ExtenderArgs.Nodes.items: a node without a name")
            out.append(name)
        return out, items

    def filter(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """``ExtenderArgs`` -> ``ExtenderFilterResult``."""
        try:
            read = self._pod(args)
            names, items = self._candidates(args)
        except ExtenderRequestError as exc:
            return {
                "Nodes": None,
                "NodeNames": None,
                "FailedNodes": {},
                "FailedAndUnresolvableNodes": {},
                "Error": str(exc),
            }
        passing: list[str] = []
        failed: dict[str, str] = {}
        unresolvable: dict[str, str] = {}
        if read is None:
            self.on_verdict("unreadable")
            passing = list(names)
            names = []
        for name in names:
            assert read is not None
            verdict = self.verdict(name, *read)
            if verdict.admit:
                passing.append(name)
                self.on_verdict("admit")
            elif verdict.unresolvable:
                unresolvable[name] = verdict.text()
                self.on_verdict("unresolvable")
            else:
                failed[name] = verdict.text()
                self.on_verdict("refuse")
        result: dict[str, Any] = {
            "Nodes": None,
            "NodeNames": None,
            "FailedNodes": failed,
            "FailedAndUnresolvableNodes": unresolvable,
            "Error": "",
        }
        if items is None:
            result["NodeNames"] = passing
        else:
            keep = set(passing)
            kept = [i for i in items if field(field(i, "metadata"), "name") in keep]
            result["Nodes"] = {"metadata": {}, "items": kept}
        return result

    def prioritize(self, args: Mapping[str, Any]) -> list[dict[str, Any]]:
        """``ExtenderArgs`` -> ``HostPriorityList``: per node 0..10, from the share of CPUs and
        memory the pod leaves free on the NUMA nodes it would use (``least-allocated``: more
        left is better; ``most-allocated``: less left is better); 0 where it does not fit.
        Raises :class:`ExtenderRequestError`."""
        read = self._pod(args)
        names, _items = self._candidates(args)
        if read is None:
            return [{"Host": name, "Score": 0} for name in names]
        out = []
        for name in names:
            verdict = self.verdict(name, *read, score=True)
            score = 0
            if verdict.admit and verdict.free_after is not None:
                free = verdict.free_after
                if self.settings.scoring == MOST_ALLOCATED:
                    free = 1.0 - free
                score = max(0, min(MAX_EXTENDER_PRIORITY, round(free * MAX_EXTENDER_PRIORITY)))
            out.append({"Host": name, "Score": score})
        return out

    def binding(self, args: Mapping[str, Any]) -> tuple[str, str, str, str]:
        """``ExtenderBindingArgs`` -> (namespace, name, uid, node); raises
        :class:`ExtenderRequestError`."""
        if not isinstance(args, Mapping):
            raise ExtenderRequestError("ExtenderBindingArgs: must be an object")
        values = []
        for key in ("PodNamespace", "PodName", "PodUID", "Node"):
            value = field(args, key)
            if not isinstance(value, str) or not value:
                raise ExtenderRequestError(f"ExtenderBindingArgs.{key}: {value!r}: required")
            values.append(value)
        return values[0], values[1], values[2], values[3]

    def bound(self, uid: str, node: str) -> None:
        """The pod is bound to ``node``: it counts there until the node's object shows it."""
        pod = self._pods.pop(uid, None)
        if pod is not None:
            self.assumed.assume(node, pod, self.clock())

    def assume(self, node: str, pods: Iterable[PodSpec]) -> None:
        """Count ``pods`` on ``node`` (tests and tools)."""
        for pod in pods:
            self.assumed.assume(node, pod, self.clock())
