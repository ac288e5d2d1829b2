"""Kubernetes <-> NRI translation, one module per direction."""
