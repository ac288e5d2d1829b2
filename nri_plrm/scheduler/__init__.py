"""The scheduler side: the node state a NodeResourceTopology object publishes, the decision the
node's engine would make on it, and the kube-scheduler HTTP extender around that decision."""
