"""``nri-plrm run``: the wiring of the plugin and the services beside it (liveness, systemd,
hotplug)."""
