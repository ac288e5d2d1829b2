"""The pure allocation engine: topology, CPU and memory managers with pod-level resources."""
