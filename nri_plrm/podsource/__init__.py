"""Optional cache of this node's pod specs from the Kubernetes API (list + watch)."""
