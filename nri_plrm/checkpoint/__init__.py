"""Versioned, checksummed, atomic state files and the kubelet-compatible exports."""
