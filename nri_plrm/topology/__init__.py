"""Machine topology: the model, sysfs discovery, synthetic machines and hotplug watching."""
