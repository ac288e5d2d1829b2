"""The PodResources v1 gRPC endpoint (PodResourcesLister) served on a unix socket."""
