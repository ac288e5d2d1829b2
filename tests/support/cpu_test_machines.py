"""The kubelet's CPU manager test machines (``cpumanager/policy_test.go``) as ``Topology`` objects.

Ids follow the upstream tables: ``core`` is the table's CoreID, NUMA node = the table's
NUMANodeID, L3 = socket unless the machine models uncore caches.
"""

from __future__ import annotations

from collections.abc import Callable

from nri_plrm.topology.model import CPUInfo, Topology


def _machine(n: int, where: Callable[[int], tuple[int, int, int, int]]) -> Topology:
    cpus = []
    for cpu in range(n):
        core, socket, numa, l3 = where(cpu)
        cpus.append(CPUInfo(cpu=cpu, core=core, socket=socket, numa=numa, l3=l3))
    return Topology.build(cpus)


SINGLE_SOCKET_HT = _machine(8, lambda c: (c % 4, 0, 0, 0))
"""topoSingleSocketHT: 1 socket, 4 cores x 2 threads, siblings (c, c+4)."""

DUAL_SOCKET_HT = _machine(12, lambda c: (c % 6, c % 2, c % 2, c % 2))
"""topoDualSocketHT: cores (0,6)(2,8)(4,10) on socket 0, (1,7)(3,9)(5,11) on socket 1."""

DUAL_SOCKET_NO_HT = _machine(8, lambda c: (c, c // 4, c // 4, c // 4))
"""topoDualSocketNoHT: 2 sockets x 4 cores, no SMT."""

_TRIPLE_SOCKET = {0: 1, 1: 1, 2: 1, 3: 0, 4: 0, 5: 0, 6: 2, 7: 2, 8: 2}
TRIPLE_SOCKET_HT = _machine(
    18, lambda c: (c // 2, _TRIPLE_SOCKET[c // 2], _TRIPLE_SOCKET[c // 2], _TRIPLE_SOCKET[c // 2])
)
"""topoTripleSocketHT: cores (2k, 2k+1); cores 0-2 on socket 1, 3-5 on socket 0, 6-8 on socket 2."""

DUAL_SOCKET_MULTI_NUMA_HT = _machine(
    80, lambda c: (c % 40, (c % 40) // 20, (c % 40) // 10, (c % 40) // 20)
)
"""topoDualSocketMultiNumaPerSocketHT: 2 sockets x 2 NUMA x 10 cores x 2 threads (c, c+40)."""

DUAL_SOCKET_MULTI_NUMA_HT_LARGE = _machine(
    256, lambda c: (c % 128, (c % 128) // 64, (c % 128) // 16, (c % 128) // 64)
)
"""topoDualSocketMultiNumaPerSocketHTLarge (EPYC 7742 NPS=4): 2 sockets x 4 NUMA x 16 cores x 2."""

SINGLE_SOCKET_SMT_SMALL_UNCORE = _machine(128, lambda c: (c % 64, 0, 0, (c % 64) // 4))
"""Inferred from the uncore vectors (spec 7.3): 64 cores x 2 threads (c, c+64), 4 cores per L3."""

DUAL_SOCKET_SUB_NUMA_MONOLITHIC_UNCORE = _machine(
    240, lambda c: (c % 120, (c % 120) // 60, (c % 120) // 30, (c % 120) // 60)
)
"""Inferred from the uncore vectors (spec 7.3): 120 cores x 2 threads (c, c+120), one L3 per
socket, two NUMA nodes per socket."""


def synthetic(sockets: int, numa_per_socket: int, cores_per_numa: int, threads: int) -> Topology:
    """A regular machine numbered like Linux: thread t of core k is cpu ``k + t * cores``."""
    cores = sockets * numa_per_socket * cores_per_numa
    return _machine(
        cores * threads,
        lambda c: (
            c % cores,
            (c % cores) // (numa_per_socket * cores_per_numa),
            (c % cores) // cores_per_numa,
            (c % cores) // (numa_per_socket * cores_per_numa),
        ),
    )
