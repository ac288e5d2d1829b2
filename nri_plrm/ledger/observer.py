"""What the ledger reports about its decisions and its files (the Prometheus metrics)."""

from __future__ import annotations

from typing import Protocol

from nri_plrm.engine.spec import ContainerAssignment


class LedgerObserver(Protocol):
    """The one interface through which decisions are counted
    (``nri_plrm.observability.metrics.Metrics``)."""

    def record_admission(self, reason: str | None = None) -> None:
        """A pod admitted (``reason`` None) or rejected with the kubelet's reason."""
        ...

    def record_placement(self, assignment: ContainerAssignment) -> None:
        """A container placed."""
        ...

    def record_placement_error(self, reason: str) -> None:
        """A container refused with the kubelet's reason."""
        ...

    def record_checkpoint_write(self, seconds: float, ok: bool = True) -> None:
        """A journal append or checkpoint write, and how long it took."""
        ...

    def record_corrupt_checkpoint(self, kind: str) -> None:
        """The checkpoint or the journal was unusable (``kind`` says why)."""
        ...

    def record_state_directory_lost(self) -> None:
        """The state directory or the journal was deleted or replaced (and written again)."""
        ...
