"""What the engine keeps per admitted pod, and its snapshot form."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from nri_plrm.base.cpuset import CPUSet
from nri_plrm.engine.bitmask import mask_of
from nri_plrm.engine.spec import ContainerKind, ContainerSpec, PodSpec, TopologyHint
from nri_plrm.engine.spec_json import (
    KeptForms,
    container_from_dict,
    container_to_dict,
    spec_from_dict,
    spec_to_dict,
)

MODE_WHOLE = "whole"
MODE_POD_LEVEL = "pod-level"
MODE_CLASSIC = "classic"

INIT_KEY = "initContainers"
"""Key of a pod's init containers in the snapshot (kubelet spelling, unlike the intents')."""


@dataclass
class AdmittedPod:
    """What the engine knows of an admitted pod."""

    spec: PodSpec
    """Whole mode: the full spec. Incremental: identity and budget, containers as they come."""
    mode: str
    hint: TopologyHint | None = None
    """Incremental pod scope: the merged pod hint every container is allocated with."""
    containers: list[ContainerSpec] = field(default_factory=list)
    """Incremental: containers in creation order (kind as given, INIT once stopped early)."""
    stopped: set[str] = field(default_factory=set)
    shared: set[str] = field(default_factory=set)
    """Incremental pod-level: containers on the pod shared pool."""
    baselines: dict[str, CPUSet] = field(default_factory=dict)
    """Exclusive CPUs resized containers were created with (the kubelet's baseline)."""

    def to_dict(self, forms: KeptForms | None = None) -> dict[str, Any]:
        """JSON-able form (the engine snapshot's ``pods`` entries); the forms of its spec and
        containers taken from ``forms`` when given (shared: read them only)."""
        forms = KeptForms() if forms is None else forms
        return {
            "spec": forms.form(self.spec, _pod_form),
            "mode": self.mode,
            "hint": None if self.hint is None else hint_to_dict(self.hint),
            "containers": [forms.form(c, container_to_dict) for c in self.containers],
            "stopped": sorted(self.stopped),
            "shared": sorted(self.shared),
            "baselines": {name: str(cpus) for name, cpus in sorted(self.baselines.items())},
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> AdmittedPod:
        """Inverse of :meth:`to_dict`."""
        hint = data.get("hint")
        return cls(
            spec=spec_from_dict(data["spec"], INIT_KEY),
            mode=str(data["mode"]),
            hint=None if hint is None else hint_from_dict(hint),
            containers=[container_from_dict(c) for c in data.get("containers", [])],
            stopped={str(n) for n in data.get("stopped", [])},
            shared={str(n) for n in data.get("shared", [])},
            baselines={str(n): CPUSet.parse(str(c)) for n, c in data.get("baselines", {}).items()},
        )

    def container_names(self) -> list[str]:
        """The names of the containers known: the whole spec's, or those seen so far."""
        known = self.spec.all_containers() if self.mode == MODE_WHOLE else self.containers
        return [c.name for c in known]

    def spec_so_far(self) -> PodSpec:
        """The pod as known now: budget plus the containers seen, init-like ones first."""
        inits = tuple(c for c in self.containers if c.kind is not ContainerKind.APP)
        apps = tuple(c for c in self.containers if c.kind is ContainerKind.APP)
        return PodSpec(
            uid=self.spec.uid,
            namespace=self.spec.namespace,
            name=self.spec.name,
            init_containers=inits,
            containers=apps,
            requests=self.spec.requests,
            limits=self.spec.limits,
            devices=self.spec.devices,
        )


def _pod_form(spec: PodSpec) -> dict[str, Any]:
    return spec_to_dict(spec, INIT_KEY)


def hint_to_dict(hint: TopologyHint) -> dict[str, Any]:
    """A stored affinity as JSON."""
    return {
        "numaAffinity": list(hint.nodes()) if hint.numa_affinity else None,
        "preferred": hint.preferred,
    }


def hint_from_dict(data: Mapping[str, Any]) -> TopologyHint:
    """Inverse of :func:`hint_to_dict`."""
    nodes = data.get("numaAffinity")
    mask = None if nodes is None else mask_of(int(n) for n in nodes)
    return TopologyHint(mask, bool(data.get("preferred", False)))
