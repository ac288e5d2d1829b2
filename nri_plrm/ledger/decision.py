"""The result every admitting or placing decision of the ledger hands back.

:class:`Decision` is what the plugin, Synchronize's reconciliation, the resizes and the
single-container inference read of a decision that was made (a refused one raises instead:
``AdmissionError``, or ``NotSavedError`` when it could not be made durable).
"""

from __future__ import annotations

from dataclasses import dataclass

from nri_plrm.engine.facade import Changes
from nri_plrm.engine.spec import ContainerAssignment
from nri_plrm.ledger.tables import PodRecord


@dataclass(frozen=True)
class Decision:
    """One decision made: the pod's record, the container's assignment (None when the
    decision was the pod's: an admission, a budget resize) and the other containers whose
    cpuset or mems changed."""

    record: PodRecord
    assignment: ContainerAssignment | None
    changes: Changes

    @property
    def placed(self) -> ContainerAssignment:
        """The container's assignment; raises ValueError for a pod's decision."""
        if self.assignment is None:
            raise ValueError(f"pod {self.record.label()}: a pod's decision places no container")
        return self.assignment
