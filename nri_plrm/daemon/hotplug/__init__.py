"""CPU and memory hotplug: uevent parsing, the kernel socket watcher, the monitor and repairs."""
