"""What the plugin tells operators: Prometheus metrics, their HTTP endpoint and the log output."""
