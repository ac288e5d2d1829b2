"""``nri-plrm``: the operator command line (run, simulate, state, topology, check-config, version).

Exit codes: 0 success, 1 a runtime failure (e.g. the state cannot be read), 2 bad input (an
invalid configuration, manifest, topology spec or option). Configuration errors are listed one
per line as ``FILE: key.path: value: rule``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, TextIO

from nri_plrm import __version__
from nri_plrm.config import (
    DEFAULT_PATH,
    Config,
    ConfigError,
    load_config,
    validate_for_topology,
)
from nri_plrm.topology.model import Topology, TopologyError

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2

PROG = "nri-plrm"


class UsageError(Exception):
    """Bad input from the operator (exit code 2); the message names the input and the rule."""

    def __init__(self, *lines: str) -> None:
        super().__init__("\n".join(lines))
        self.lines = lines


class CommandError(Exception):
    """A runtime failure (exit code 1)."""


def _examples(*lines: str) -> str:
    return "examples:\n" + "\n".join(f"  {line}" for line in lines)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every sub-command."""
    formatter = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Kubernetes pod-level resource managers as a containerd NRI plugin.",
        formatter_class=formatter,
        epilog=_examples(
            f"{PROG} simulate examples/*.yaml",
            f"{PROG} check-config /etc/nri-plrm/config.toml",
            f"{PROG} run --config /etc/nri-plrm/config.toml",
        ),
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    run = sub.add_parser(
        "run",
        help="run the plugin (connects to containerd's NRI socket)",
        description="Run the NRI plugin until SIGTERM/SIGINT; SIGHUP reloads the log level.",
        formatter_class=formatter,
        epilog=_examples(
            f"{PROG} run --config /etc/nri-plrm/config.toml",
            f"{PROG} run   # uses {DEFAULT_PATH}",
        ),
    )
    run.add_argument("--config", default=DEFAULT_PATH, help=f"TOML file (default {DEFAULT_PATH})")
    run.set_defaults(handler=cmd_run)

    sim = sub.add_parser(
        "simulate",
        help="dry-run pod manifests through the plugin on a synthetic or recorded machine",
        description=(
            "Admit Kubernetes Pod manifests (YAML or JSON, several per file, kind: List) in the "
            "order given, through the same code path as the daemon, against an in-memory "
            "runtime. Rejections are results: the exit code is 0 when the simulation ran."
        ),
        formatter_class=formatter,
        epilog=_examples(
            f"{PROG} simulate examples/*.yaml",
            f"{PROG} simulate --output json examples/pod-scope-mixed.yaml",
            f"{PROG} simulate --config config.toml --topology "
            "sockets=1,numa_per_socket=2,cores_per_numa=4,threads_per_core=2,"
            "memory_per_numa=8Gi pods.yaml",
            f"{PROG} simulate --topology machine.json pods.yaml",
            f"{PROG} simulate --sysfs /tmp/sysfs-snapshot pods.yaml",
        ),
    )
    _config_option(sim)
    _topology_options(sim, "default: the bundled 2-socket, 4-NUMA, 32-core SMT2 machine")
    _output_option(sim)
    sim.add_argument("manifests", nargs="+", metavar="MANIFEST", help="pod manifest files")
    sim.set_defaults(handler=cmd_simulate)

    state = sub.add_parser(
        "state",
        help="show the checkpoint or a running plugin's PodResources view",
        description=(
            "Show pods, containers and their CPUs and memory: from the checkpoint in the state "
            "directory (read-only), or with --socket from a running plugin's PodResources "
            "endpoint."
        ),
        formatter_class=formatter,
        epilog=_examples(
            f"{PROG} state --config /etc/nri-plrm/config.toml",
            f"{PROG} state --state-dir /var/lib/nri-plrm --output json",
            f"{PROG} state --socket   # the socket named in the config",
            f"{PROG} state --socket /var/lib/nri-plrm/pod-resources.sock",
        ),
    )
    _config_option(state)
    state.add_argument("--state-dir", help="checkpoint directory (default: [state] dir)")
    state.add_argument(
        "--socket",
        nargs="?",
        const="",
        help="query this PodResources socket instead (no value: [pod_resources] socket)",
    )
    _topology_options(state, "default: discovered from [topology] sysfs_root")
    _output_option(state)
    state.set_defaults(handler=cmd_state)

    topo = sub.add_parser(
        "topology",
        help="show the machine: sockets, NUMA nodes, cores, memory, hugepages, distances",
        description="Describe the discovered (or given) machine as the plugin sees it.",
        formatter_class=formatter,
        epilog=_examples(
            f"{PROG} topology",
            f"{PROG} topology --sysfs /tmp/sysfs-snapshot --output json",
            f"{PROG} topology --topology "
            "sockets=2,numa_per_socket=2,cores_per_numa=8,threads_per_core=2,memory_per_numa=16Gi",
        ),
    )
    _config_option(topo)
    _topology_options(topo, "default: discovered from [topology] sysfs_root")
    _output_option(topo)
    topo.set_defaults(handler=cmd_topology)

    check = sub.add_parser(
        "check-config",
        help="validate a configuration file and list every error",
        description=(
            "Validate a TOML configuration. With --topology or --sysfs the machine-dependent "
            "rules (reserved CPUs and memory exist) are checked too. Exit code 2 on errors."
        ),
        formatter_class=formatter,
        epilog=_examples(
            f"{PROG} check-config /etc/nri-plrm/config.toml",
            f"{PROG} check-config --sysfs /sys /etc/nri-plrm/config.toml",
        ),
    )
    check.add_argument("file", metavar="FILE", help="TOML configuration file")
    _topology_options(check, "optional: also check against this machine")
    check.set_defaults(handler=cmd_check_config)

    version = sub.add_parser(
        "version",
        help="print the version",
        description="Print the plugin's version.",
        formatter_class=formatter,
        epilog=_examples(f"{PROG} version"),
    )
    version.set_defaults(handler=cmd_version)
    return parser


def _config_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", help="TOML configuration file (default: built-in defaults)")


def _topology_options(parser: argparse.ArgumentParser, default: str) -> None:
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--topology",
        metavar="SPEC",
        help=f"a key=value machine spec or a CPU-table JSON file ({default})",
    )
    group.add_argument("--sysfs", metavar="DIR", help="discover the machine from this sysfs tree")


def _output_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--output", "-o", choices=("table", "json"), default="table", help="output format"
    )


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    """Entry point of the ``nri-plrm`` command; returns the exit code."""
    stdout = out or sys.stdout
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    handler: Callable[[argparse.Namespace, TextIO], int] = args.handler
    try:
        return handler(args, stdout)
    except UsageError as exc:
        for line in exc.lines:
            print(f"{PROG} {args.command}: {line}", file=sys.stderr)
        return EXIT_USAGE
    except CommandError as exc:
        print(f"{PROG} {args.command}: {exc}", file=sys.stderr)
        return EXIT_FAILURE


# Shared helpers ----------------------------------------------------------------------------


def _load(path: str | None) -> Config:
    if path is None:
        return Config()
    try:
        return load_config(path)
    except ConfigError as exc:
        raise UsageError(*(f"{path}: {e}" for e in exc.errors)) from exc


def _machine(args: argparse.Namespace, config: Config, default_spec: str | None) -> Topology:
    from nri_plrm.topology.synthetic import load_topology
    from nri_plrm.topology.sysfs import discover

    try:
        if args.topology:
            return load_topology(args.topology)
        if args.sysfs:
            return _discover(discover, args.sysfs)
        if default_spec is not None:
            return load_topology(default_spec)
        return _discover(discover, config.topology.sysfs_root)
    except TopologyError as exc:
        raise UsageError(str(exc)) from exc


def _discover(discover: Callable[[str], Topology], root: str) -> Topology:
    if not os.path.isdir(root):
        raise UsageError(f"--sysfs {root}: not a directory")
    try:
        return discover(root)
    except OSError as exc:
        raise CommandError(f"cannot read the machine from {root}: {exc}") from exc


def _emit_json(out: TextIO, data: Any) -> None:
    json.dump(data, out, indent=2, sort_keys=False)
    out.write("\n")


def render_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A plain text table with left-aligned columns separated by two spaces."""
    cells = [[str(h) for h in headers]] + [["" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    ]
    return "\n".join(lines) + "\n"


# Commands ----------------------------------------------------------------------------------


def cmd_version(args: argparse.Namespace, out: TextIO) -> int:
    """``version``."""
    out.write(f"{PROG} {__version__}\n")
    return EXIT_OK


def cmd_check_config(args: argparse.Namespace, out: TextIO) -> int:
    """``check-config FILE``."""
    config = _load(args.file)
    if args.topology or args.sysfs:
        topology = _machine(args, config, None)
        try:
            validate_for_topology(config, topology)
        except ConfigError as exc:
            raise UsageError(*(f"{args.file}: {e}" for e in exc.errors)) from exc
    out.write(f"{args.file}: ok\n")
    return EXIT_OK


def cmd_run(args: argparse.Namespace, out: TextIO) -> int:
    """``run --config FILE``."""
    from nri_plrm import daemon

    config = _load(args.config)
    os.umask(0o077)
    return asyncio.run(daemon.run(config))


def cmd_topology(args: argparse.Namespace, out: TextIO) -> int:
    """``topology``."""
    from nri_plrm.topology.synthetic import describe

    config = _load(args.config)
    topology = _machine(args, config, None)
    data = describe(topology)
    if args.output == "json":
        _emit_json(out, data)
        return EXIT_OK
    out.write(topology_table(data))
    return EXIT_OK


def topology_table(data: dict[str, Any]) -> str:
    """The ``topology`` table from :func:`nri_plrm.topology.synthetic.describe` output."""
    from nri_plrm.quantity import format_bytes

    head = (
        f"{data['num_sockets']} sockets, {data['num_numa_nodes']} NUMA nodes, "
        f"{data['num_cores']} cores, {data['num_cpus']} CPUs "
        f"({data['threads_per_core']} threads per core), "
        f"{data['num_uncore_caches']} L3 caches\n"
    )
    totals = ", ".join(f"{k} {format_bytes(v)}" for k, v in data["memory_total"].items())
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
                " ".join(f"{k}={v}" for k, v in n["memory_quantity"].items()) or "-",
                " ".join(f"{i}:{d}" for i, d in zip(ids, n["distances"], strict=True)),
            ]
            for n in data["numa_nodes"]
        ],
    )
    return head + f"memory: {totals or 'unknown'}\n\n" + sockets + "\n" + nodes


def cmd_simulate(args: argparse.Namespace, out: TextIO) -> int:
    """``simulate MANIFEST...``."""
    from nri_plrm.simulate import simulate
    from nri_plrm.topology.synthetic import DEFAULT_SPEC
    from nri_plrm.translate.manifest_to_pod import ManifestError

    config = _load(args.config)
    topology = _machine(args, config, DEFAULT_SPEC)
    try:
        validate_for_topology(config, topology)
    except ConfigError as exc:
        raise UsageError(*(f"{args.config or '<defaults>'}: {e}" for e in exc.errors)) from exc
    for path in args.manifests:
        if not os.path.isfile(path):
            raise UsageError(f"{path}: no such manifest file")
    try:
        result = simulate(args.manifests, topology, config)
    except ManifestError as exc:
        raise UsageError(str(exc)) from exc
    if args.output == "json":
        _emit_json(out, result.to_json())
    else:
        out.write(result.to_table())
    return EXIT_OK


def cmd_state(args: argparse.Namespace, out: TextIO) -> int:
    """``state``: the checkpoint (read-only) or a running plugin's PodResources view."""
    from nri_plrm.podresources import state

    config = _load(args.config)
    try:
        if args.socket is not None:
            data = state.from_socket(args.socket or config.pod_resources.socket)
        else:
            topology = _machine(args, config, None)
            data = state.from_checkpoint(args.state_dir or config.state.dir, topology, config)
    except state.StateError as exc:
        raise CommandError(str(exc)) from exc
    if args.output == "json":
        _emit_json(out, data)
    else:
        out.write(state.table(data))
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
