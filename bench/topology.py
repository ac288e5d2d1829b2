"""Topology figures: sysfs discovery of a 1,024-CPU machine, synthetic builds, uevent parsing."""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable

from fakesysfs import write_sysfs

from bench.common import main, percentile
from nri_plrm.daemon.hotplug.uevent import hotplug_event, parse_uevent
from nri_plrm.topology.machines import SYNTHETIC_1024_SPEC, load_topology
from nri_plrm.topology.synthetic import describe, synthetic_topology
from nri_plrm.topology.sysfs import discover

_UEVENT = (
    b"offline@/devices/system/cpu/cpu37\x00ACTION=offline\x00DEVPATH=/devices/system/cpu/cpu37"
    b"\x00SUBSYSTEM=cpu\x00SEQNUM=48213\x00"
)


def _times_ms(action: Callable[[], object], rounds: int) -> list[float]:
    samples = []
    for _ in range(rounds):
        started = time.perf_counter()
        action()
        samples.append((time.perf_counter() - started) * 1000)
    return samples


def run() -> dict[str, float]:
    """Median and p99 of each operation (milliseconds, microseconds for uevent parsing)."""
    machine = synthetic_topology(SYNTHETIC_1024_SPEC)
    fast = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
    with tempfile.TemporaryDirectory(prefix="nri-plrm-bench-", dir=fast) as root:
        write_sysfs(machine, root)
        discovery = _times_ms(lambda: discover(root), 10)
    build = _times_ms(lambda: synthetic_topology(SYNTHETIC_1024_SPEC), 20)
    default = _times_ms(lambda: load_topology("sockets=2"), 50)
    described = _times_ms(lambda: describe(machine), 20)
    parse = _times_ms(lambda: [hotplug_event(parse_uevent(_UEVENT)) for _ in range(1000)], 10)
    return {
        "topology_discover_1024cpu_p50_ms": percentile(discovery, 50),
        "topology_discover_1024cpu_p99_ms": percentile(discovery, 99),
        "topology_synthetic_1024cpu_p50_ms": percentile(build, 50),
        "topology_load_default_spec_p50_ms": percentile(default, 50),
        "topology_describe_1024cpu_p50_ms": percentile(described, 50),
        "topology_uevent_parse_p50_us": percentile(parse, 50),
    }


if __name__ == "__main__":
    main(run)
