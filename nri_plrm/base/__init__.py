"""Small base types every layer shares: CPU sets and Kubernetes quantities."""
