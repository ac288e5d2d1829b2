"""The node's admission, decided away from the node: the engine the node runs, rebuilt from the
state its NodeResourceTopology object publishes (pure: no I/O).

:class:`NodeModel` holds one published state. :meth:`NodeModel.decide` admits a pod on a copy of
that state, after the pods the scheduler already placed there that the object does not show yet
(the assume cache's), exactly as the node's engine admits a pod whose full spec it knows
(``Engine.admit_pod``): the verdict is admit, or the kubelet's reason and message with the cause
``nri_plrm.engine.explain`` gives on the node. A refusal that also happens on the same node with
nothing allocated is *unresolvable*: no eviction makes room for the pod there.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from nri_plrm.engine.availability import free_per_numa
from nri_plrm.engine.explain import explain_rejection
from nri_plrm.engine.facade import Engine
from nri_plrm.engine.memory_state import copy_machine_state
from nri_plrm.engine.spec import CPU, MEMORY, AdmissionError, PodSpec
from nri_plrm.podsource.nrt_exact_state import PublishedNode

_HELD = ""
"""The pod uid under which the CPUs the node handed out are held in a rebuilt state (an API
pod always has a uid, so it never meets a real one)."""


@dataclass(frozen=True)
class Verdict:
    """One node's answer for one pod."""

    admit: bool
    reason: str = ""
    message: str = ""
    cause: str = ""
    unresolvable: bool = False
    """Refused even with nothing allocated on the node."""
    free_after: float | None = None
    """With ``score``: the share of CPUs and memory left free, after the pod, on the NUMA
    nodes its exclusive resources use (all of the node's when it has none), 0..1."""

    def text(self) -> str:
        """``<reason>: <message>; cause: <cause>`` (empty for an admission)."""
        if self.admit:
            return ""
        return f"{self.reason}: {self.message}; cause: {self.cause}"


ADMIT = Verdict(True)


class NodeType:
    """What the nodes of one type (machine and configuration, :attr:`PublishedNode.type_key`)
    share: one engine that decides for each of them in turn (loaded with that node's state
    first), and which pods the type refuses with nothing allocated (unresolvable), kept per pod
    shape (the pod without its identity, e.g. ``repr`` of it with the uid cleared)."""

    MAX_SHAPES = 4096

    def __init__(self, node: PublishedNode) -> None:
        self.engine = Engine(node.topology, node.config)
        self._empty = Engine(node.topology, node.config)
        self._refused: dict[str, bool] = {}

    def refuses(self, pod: PodSpec, shape: str | None = None) -> bool:
        """True when the node with nothing allocated refuses ``pod``."""
        if shape is not None and shape in self._refused:
            return self._refused[shape]
        try:
            self._empty.admit_pod(pod)
            refused = False
        except AdmissionError:
            refused = True
        else:
            self._empty.remove_pod(pod.uid)
        if shape is not None:
            if len(self._refused) >= self.MAX_SHAPES:
                self._refused.clear()
            self._refused[shape] = refused
        return refused


class NodeModel:
    """A node's published state and its decisions, made by its type's engine (``node_type``,
    shared by the nodes of one :attr:`PublishedNode.type_key`; its own when not given) loaded
    with that state; the published state is never changed."""

    def __init__(self, node: PublishedNode, node_type: NodeType | None = None) -> None:
        self.node = node
        self.type = node_type or NodeType(node)
        cpu = self.type.engine.cpu_manager
        reserved = cpu.reserved_cpus
        everything = node.topology.all_cpus
        if cpu.options.strict_cpu_reservation:
            self._default = node.free_cpus
            held = everything - reserved - self._default
        else:
            self._default = node.free_cpus | reserved
            held = everything - self._default
        self._held = {_HELD: {_HELD: held}} if held else {}

    def _load(self) -> Engine:
        """The type's engine with this node's published state and no pod records."""
        engine = self.type.engine
        for uid in engine.pods():
            engine.remove_pod(uid)
        engine.cpu_manager.start_from_state(self._default, self._held, validate=False)
        engine.memory_manager.machine_state = copy_machine_state(self.node.machine_state)
        return engine

    def decide(
        self,
        pod: PodSpec,
        assumed: Sequence[PodSpec] = (),
        *,
        score: bool = False,
        shape: str | None = None,
    ) -> Verdict:
        """The node's verdict for ``pod`` once ``assumed`` (pods placed here that the object
        does not show yet, in the order they were placed) are admitted; the state is left as
        published. ``score`` fills :attr:`Verdict.free_after` of an admission; ``shape`` (the
        pod without its identity) lets the unresolvable answer be reused."""
        engine = self._load()
        try:
            for other in assumed:
                if other.uid == pod.uid:
                    continue
                try:
                    engine.admit_pod(other)
                except AdmissionError:
                    continue  # the node refuses it too: it holds nothing there
            try:
                engine.admit_pod(pod)
            except AdmissionError as err:
                cause = explain_rejection(engine, pod, err)
                never = self.type.refuses(pod, shape)
                return Verdict(False, err.reason, err.message, cause, unresolvable=never)
            if score:
                return Verdict(True, free_after=_free_after(engine, pod))
            return ADMIT
        finally:
            for uid in engine.pods():
                engine.remove_pod(uid)


def _free_after(engine: Engine, pod: PodSpec) -> float:
    """:attr:`Verdict.free_after` of an admitted ``pod``."""
    topology = engine.topology
    touched: set[int] = set()
    cpus = engine.pod_cpus(pod.uid)
    if cpus is not None:
        touched.update(topology.cpu_info[c].numa for c in cpus)
    for container in pod.all_containers():
        assignment = engine.assignment(pod.uid, container.name)
        if assignment is not None and assignment.exclusive:
            touched.update(topology.cpu_info[c].numa for c in assignment.cpus)
            touched.update(assignment.mems)
    shares: list[float] = []
    for numa in free_per_numa(engine):
        if touched and numa.node not in touched:
            continue
        for name in (CPU, MEMORY):
            r = numa.resource(name)
            if r is not None and r.allocatable > 0:
                shares.append(r.available / r.allocatable)
    return sum(shares) / len(shares) if shares else 0.0
