"""The node's state: :class:`NodeLedger` (pods, containers, assignments, their journal and
checkpoint) and its read model (:mod:`.view`)."""

from nri_plrm.ledger.node import NodeLedger, NotSavedError

__all__ = ["NodeLedger", "NotSavedError"]
