"""CPU and memory hotplug: the kernel uevent watcher and the monitor that re-reads the machine."""
