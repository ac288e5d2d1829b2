"""The node's state: the ledger of pods, containers and assignments, and its read model."""
