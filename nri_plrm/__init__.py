"""nri-plrm: Kubernetes pod-level resource managers as a containerd NRI plugin."""

__version__ = "0.1.0"
