"""``nri-plrm topology``: the discovered (or given) machine as the plugin sees it."""

from __future__ import annotations

import argparse
from typing import Any, TextIO

from nri_plrm.base.quantity import format_bytes_human
from nri_plrm.cli.inputs import EXIT_OK, load, machine
from nri_plrm.cli.render import count, emit_json, render_table
from nri_plrm.engine.spec import MEMORY
from nri_plrm.topology.synthetic import describe


def cmd_topology(args: argparse.Namespace, out: TextIO) -> int:
    """``topology``."""
    config = load(args.config)
    topology = machine(args, config, None)
    data = describe(topology)
    if args.output == "json":
        emit_json(out, data)
        return EXIT_OK
    out.write(topology_table(data))
    return EXIT_OK


def topology_table(data: dict[str, Any]) -> str:
    """The ``topology`` table from :func:`nri_plrm.topology.synthetic.describe` output."""
    head = (
        f"{count(data['num_sockets'], 'socket')}, {count(data['num_numa_nodes'], 'NUMA node')}, "
        f"{count(data['num_cores'], 'core')}, {count(data['num_cpus'], 'CPU')} "
        f"({count(data['threads_per_core'], 'thread')} per core), "
        f"{count(data['num_uncore_caches'], 'L3 cache')}\n"
    )
    totals = ", ".join(
        ("" if k == MEMORY else f"{k} ") + format_bytes_human(v)
        for k, v in data["memory_total"].items()
    )
    sockets = render_table(
        ["SOCKET", "CPUS", "CORES", "NUMA NODES"],
        [
            [s["id"], s["cpus"], s["cores"], ",".join(map(str, s["numa_nodes"]))]
            for s in data["sockets"]
        ],
    )
    ids = data["numa_ids"]
    nodes = render_table(
        ["NUMA", "CPUS", "CORES", "SOCKETS", "L3", "MEMORY", "DISTANCES"],
        [
            [
                n["id"],
                n["cpus"] or "-",
                n["cores"],
                ",".join(map(str, n["sockets"])) or "-",
                ",".join(map(str, n["uncore_caches"])) or "-",
                " ".join(f"{k}={format_bytes_human(v)}" for k, v in n["memory"].items()) or "-",
                " ".join(f"{i}:{d}" for i, d in zip(ids, n["distances"], strict=True)),
            ]
            for n in data["numa_nodes"]
        ],
    )
    return head + f"memory: {totals or 'unknown'}\n\n" + sockets + "\n" + nodes
