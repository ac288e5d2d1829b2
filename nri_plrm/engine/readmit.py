"""A pod admitted again under another kind, as one operation (:meth:`Engine.readmit`).

The NRI-only single-container inference re-admits a pod as classic ("promote") or as its
budget ("demote") with the containers it has so far, and then places the container it was
for. Either all of it happens, or nothing: the pod's entries are saved first
(:meth:`Engine.save_pod`) and put back on a refusal (:meth:`Engine.restore_pod`), so the engine
is exactly as before. Only that one pod is saved: the cost is the pod's, never the node's.
:meth:`Engine.readmit` lives with the engine; this module holds what it saves, returns and
raises.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from nri_plrm.engine.admitted import AdmittedPod
from nri_plrm.engine.cpu_state import SavedPodCPUs
from nri_plrm.engine.memory_state import SavedPodMemory
from nri_plrm.engine.spec import (
    AdmissionError,
    ContainerAssignment,
    ContainerSpec,
    PodSpec,
    TopologyHint,
)

Explain = Callable[[PodSpec, AdmissionError, ContainerSpec], str]
"""Explains a refused container of a pod from the engine's numbers at the refusal (the
ledger binds ``engine.explain.explain_rejection`` to its engine)."""


class ReadmitRefused(AdmissionError):
    """A refused readmit (the kubelet's reason and message); the engine is as before.

    ``placing`` is True when the pod was re-admitted but the container it was for was refused;
    ``cause`` then explains it from the engine's numbers at that moment (empty unless asked).
    """

    def __init__(self, error: AdmissionError, *, placing: bool, cause: str = "") -> None:
        super().__init__(error.reason, error.message)
        self.placing = placing
        self.cause = cause


@dataclass(frozen=True)
class SavedPod:
    """One pod's entries in the engine and its managers (:meth:`Engine.save_pod`)."""

    pod_uid: str
    record: AdmittedPod | None
    node_shared: tuple[str, ...]
    cpus: SavedPodCPUs
    memory: SavedPodMemory
    affinity: dict[str, TopologyHint]


@dataclass(frozen=True)
class Readmitted:
    """What a readmit did: the placed container's assignment (None without one) and the other
    containers whose cpuset or mems changed (the pod's own first, then the node-shared ones
    when the node shared pool ended elsewhere)."""

    assignment: ContainerAssignment | None
    changes: dict[tuple[str, str], ContainerAssignment]
