"""Named test machines shared by the engine tests and the benchmarks, and the machine lookup.

The kubelet's CPU manager test machines (``pkg/kubelet/cm/cpumanager/policy_test.go`` and
``topology_hints_test.go``) are reproduced with the kubelet's exact core, socket and NUMA ids,
so that allocation vectors ported from upstream give the same answers. Upstream leaves
``UncoreCacheID`` unset in these tables, so every CPU has ``l3 == 0`` (one uncore cache per
machine); the uncore test machine sets it explicitly. They carry no memory and the default
distances (10 local, 20 remote); use :func:`nri_plrm.topology.synthetic.with_memory` to add
memory.

Keys are the upstream variable names, plus:

- ``returnMachineInfo``: the cadvisor machine of ``topology_hints_test.go`` after the
  kubelet's ``Discover`` (platform-unique core ids).
- ``default``: :data:`nri_plrm.topology.synthetic.DEFAULT_SPEC`.
- ``synthetic1024``: 1,024 CPUs, 4 sockets, 16 NUMA nodes, 512 SMT2 cores, 64Gi per node
  with 512 2Mi and 2 1Gi hugepages per node (:data:`SYNTHETIC_1024_SPEC`).

Machines are built on first access and cached. :func:`load_topology` finds a machine by CPU-table
file, by name here, or by compact spec (the ``--topology`` option of the commands).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator, Mapping

from nri_plrm.topology.model import CPUInfo, Topology, TopologyError
from nri_plrm.topology.synthetic import DEFAULT_SPEC, load_cpu_table, synthetic_topology
from nri_plrm.util.bounded_file import InputFileError, read_regular_file

MAX_CPU_TABLE_BYTES = 16 * 1024 * 1024
"""The largest CPU-table file read: 16 MiB (a row is about 100 bytes: room for 100,000 CPUs)."""

SYNTHETIC_1024_SPEC = (
    "sockets=4,numa_per_socket=4,cores_per_numa=32,threads_per_core=2,memory_per_numa=64Gi,"
    "hugepages_2Mi_per_numa=512,hugepages_1Gi_per_numa=2"
)
"""The 1,024-CPU, 16-NUMA benchmark machine."""

# topoQuadSocketFourWayHT (Xeon Phi KNL, SNC4): per socket, (core id, its four CPU ids).
_KNL_CORES: tuple[tuple[tuple[int, tuple[int, int, int, int]], ...], ...] = (
    (  # socket 0
        (0, (0, 169, 109, 229)),
        (1, (50, 170, 110, 230)),
        (64, (1, 25, 13, 38)),
        (65, (2, 26, 14, 39)),
        (72, (9, 33, 21, 46)),
        (73, (10, 34, 22, 47)),
        (8, (57, 177, 117, 237)),
        (9, (58, 178, 118, 238)),
        (24, (71, 191, 131, 251)),
        (25, (72, 192, 132, 252)),
        (32, (79, 199, 139, 259)),
        (33, (80, 200, 140, 260)),
        (40, (87, 207, 147, 267)),
        (41, (88, 208, 148, 268)),
        (48, (95, 215, 155, 275)),
        (49, (96, 216, 156, 276)),
        (56, (103, 223, 163, 283)),
        (57, (104, 224, 164, 284)),
    ),
    (  # socket 1
        (66, (3, 27, 15, 40)),
        (67, (4, 28, 16, 41)),
        (74, (11, 35, 23, 48)),
        (75, (12, 36, 24, 49)),
        (2, (51, 171, 111, 231)),
        (3, (52, 172, 112, 232)),
        (10, (59, 179, 119, 239)),
        (11, (60, 180, 120, 240)),
        (18, (65, 185, 125, 245)),
        (19, (66, 186, 126, 246)),
        (26, (73, 193, 133, 253)),
        (27, (74, 194, 134, 254)),
        (34, (81, 201, 141, 261)),
        (35, (82, 202, 142, 262)),
        (42, (89, 209, 149, 269)),
        (43, (90, 210, 150, 270)),
        (50, (97, 217, 157, 277)),
        (51, (98, 218, 158, 278)),
    ),
    (  # socket 2
        (68, (5, 29, 17, 42)),
        (69, (6, 30, 18, 43)),
        (4, (53, 173, 113, 233)),
        (5, (54, 174, 114, 234)),
        (12, (61, 181, 121, 241)),
        (13, (62, 182, 122, 242)),
        (20, (67, 187, 127, 247)),
        (21, (68, 188, 128, 248)),
        (28, (75, 195, 135, 255)),
        (29, (76, 196, 136, 256)),
        (36, (83, 203, 143, 263)),
        (37, (84, 204, 144, 264)),
        (44, (91, 211, 151, 271)),
        (45, (92, 212, 152, 272)),
        (52, (99, 219, 159, 279)),
        (53, (100, 220, 160, 280)),
        (60, (105, 225, 165, 285)),
        (61, (106, 226, 166, 286)),
    ),
    (  # socket 3
        (70, (7, 31, 19, 44)),
        (71, (8, 32, 20, 45)),
        (63, (37, 168, 108, 228)),
        (62, (107, 227, 167, 287)),
        (6, (55, 175, 115, 235)),
        (7, (56, 176, 116, 236)),
        (14, (63, 183, 123, 243)),
        (15, (64, 184, 124, 244)),
        (22, (69, 189, 129, 249)),
        (23, (70, 190, 130, 250)),
        (30, (77, 197, 137, 257)),
        (31, (78, 198, 138, 258)),
        (38, (85, 205, 145, 265)),
        (39, (86, 206, 146, 266)),
        (46, (93, 213, 153, 273)),
        (47, (94, 214, 154, 274)),
        (54, (101, 221, 161, 281)),
        (55, (102, 222, 162, 282)),
    ),
)

# topoTripleSocketHT: (socket = NUMA node) of cores 0..8; each core c holds CPUs 2c and 2c+1.
_TRIPLE_CORE_SOCKET = (1, 1, 1, 0, 0, 0, 2, 2, 2)

# returnMachineInfo (topology_hints_test.go): per NUMA node = socket, the thread pairs.
_HINTS_MACHINE = (((0, 6), (1, 7), (2, 8)), ((3, 9), (4, 10), (5, 11)))


def _table(
    rows: list[tuple[int, int, int, int]], l3: Callable[[int], int] | None = None
) -> Topology:
    """Rows of (cpu, core, socket, numa); l3 maps a cpu to its uncore id (default: 0)."""
    return Topology.build(
        CPUInfo(cpu, core, socket, numa, l3(cpu) if l3 else 0) for cpu, core, socket, numa in rows
    )


def _single_socket_ht() -> Topology:
    return _table([(c, c % 4, 0, 0) for c in range(8)])


def _dual_socket_ht() -> Topology:
    return _table([(c, c % 6, c % 2, c % 2) for c in range(12)])


def _dual_socket_no_ht() -> Topology:
    return _table([(c, c, c // 4, c // 4) for c in range(8)])


def _triple_socket_ht() -> Topology:
    rows = []
    for cpu in range(18):
        socket = _TRIPLE_CORE_SOCKET[cpu // 2]
        rows.append((cpu, cpu // 2, socket, socket))
    return _table(rows)


def _quad_socket_four_way_ht() -> Topology:
    rows = [
        (cpu, core, socket, socket)
        for socket, cores in enumerate(_KNL_CORES)
        for core, cpus in cores
        for cpu in cpus
    ]
    return _table(rows)


def _dual_socket_multi_numa_ht() -> Topology:
    # Dual Xeon Gold 6230: 2 sockets x 2 NUMA nodes x 10 cores, siblings c and c+40.
    return _table([(c, c % 40, (c % 40) // 20, (c % 40) // 10) for c in range(80)])


def _multi_socket_dual_socket_per_numa_ht() -> Topology:
    # The 6230 layout with NUMA cells and sockets swapped: 4 sockets, 2 NUMA nodes.
    return _table([(c, c % 40, (c % 40) // 10, (c % 40) // 20) for c in range(80)])


def _dual_socket_multi_numa_ht_large() -> Topology:
    # Dual EPYC 7742, NPS=4: 2 sockets x 4 NUMA nodes x 16 cores, siblings c and c+128.
    return _table([(c, c % 128, (c % 128) // 64, (c % 128) // 16) for c in range(256)])


def _single_socket_smt_small_uncore() -> Topology:
    # 64 cores x 2 threads (siblings c and c+64), one uncore cache per 4 cores (8 CPUs).
    # Upstream's table was not readable; this is the shape its test vectors imply.
    return _table([(c, c % 64, 0, 0) for c in range(128)], l3=lambda c: (c % 64) // 4)


def _hints_machine_info() -> Topology:
    rows = [
        (cpu, min(pair), node, node)
        for node, pairs in enumerate(_HINTS_MACHINE)
        for pair in pairs
        for cpu in pair
    ]
    return _table(rows)


_BUILDERS: dict[str, Callable[[], Topology]] = {
    "topoSingleSocketHT": _single_socket_ht,
    "topoDualSocketHT": _dual_socket_ht,
    "topoDualSocketNoHT": _dual_socket_no_ht,
    "topoTripleSocketHT": _triple_socket_ht,
    "topoQuadSocketFourWayHT": _quad_socket_four_way_ht,
    "topoDualSocketMultiNumaPerSocketHT": _dual_socket_multi_numa_ht,
    "fakeTopoMultiSocketDualSocketPerNumaHT": _multi_socket_dual_socket_per_numa_ht,
    "topoDualSocketMultiNumaPerSocketHTLarge": _dual_socket_multi_numa_ht_large,
    "topoSingleSocketSingleNumaPerSocketSMTSmallUncore": _single_socket_smt_small_uncore,
    "returnMachineInfo": _hints_machine_info,
    "default": lambda: synthetic_topology(DEFAULT_SPEC),
    "synthetic1024": lambda: synthetic_topology(SYNTHETIC_1024_SPEC),
}


class _LazyMachines(Mapping[str, Topology]):
    """A read-only mapping that builds each machine on first access."""

    def __init__(self, builders: Mapping[str, Callable[[], Topology]]) -> None:
        self._builders = dict(builders)
        self._built: dict[str, Topology] = {}

    def __getitem__(self, name: str) -> Topology:
        topology = self._built.get(name)
        if topology is None:
            try:
                builder = self._builders[name]
            except KeyError:
                raise KeyError(
                    f"unknown test machine {name!r}; known: {', '.join(self._builders)}"
                ) from None
            topology = self._built[name] = builder()
        return topology

    def __iter__(self) -> Iterator[str]:
        return iter(self._builders)

    def __len__(self) -> int:
        return len(self._builders)

    def __contains__(self, name: object) -> bool:
        return name in self._builders


MACHINES: Mapping[str, Topology] = _LazyMachines(_BUILDERS)
"""Named machines, built lazily (see the module documentation for the names)."""


def load_topology(spec_or_path: str) -> Topology:
    """A CPU-table file, a named test machine, or a compact spec (in that order of lookup).

    A file is read with :func:`nri_plrm.util.bounded_file.read_regular_file` (at most
    :data:`MAX_CPU_TABLE_BYTES`); a value that looks like a path (it has a ``/`` or ends in
    ``.json``) and names a directory, FIFO or device is refused as such. An empty value is
    refused.
    """
    if not spec_or_path.strip():
        raise TopologyError(
            f"topology {spec_or_path!r}: empty: give a cpu-table file, a test machine name or "
            f"a key=value spec such as {DEFAULT_SPEC!r}"
        )
    looks_like_path = os.sep in spec_or_path or spec_or_path.endswith(".json")
    if os.path.isfile(spec_or_path) or (looks_like_path and os.path.lexists(spec_or_path)):
        try:
            raw = read_regular_file(spec_or_path, MAX_CPU_TABLE_BYTES, "cpu-table file")
            data = json.loads(raw.decode("utf-8"))
        except InputFileError as exc:
            raise TopologyError(str(exc)) from exc
        except UnicodeDecodeError as exc:
            raise TopologyError(f"{spec_or_path}: cannot read the cpu table: {exc}") from exc
        except json.JSONDecodeError as exc:
            raise TopologyError(f"{spec_or_path}: not valid JSON: {exc}") from exc
        except RecursionError as exc:
            raise TopologyError(f"{spec_or_path}: not valid JSON: nested too deeply") from exc
        return load_cpu_table(data, spec_or_path)
    if spec_or_path in MACHINES:
        return MACHINES[spec_or_path]
    if "=" not in spec_or_path:
        if os.sep in spec_or_path or spec_or_path.endswith(".json"):
            raise TopologyError(f"{spec_or_path}: no such cpu-table file")
        raise TopologyError(
            f"topology {spec_or_path!r}: not a cpu-table file, a test machine name "
            f"({', '.join(MACHINES)}) or a key=value spec such as {DEFAULT_SPEC!r}"
        )
    return synthetic_topology(spec_or_path)
