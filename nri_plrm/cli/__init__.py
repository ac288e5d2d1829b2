"""``nri-plrm``: the operator command line (run, simulate, state, topology, check-config, doctor,
scheduler-extender, version).

Exit codes: 0 success, 1 a runtime failure (e.g. the state cannot be read), 2 bad input (an
invalid configuration, manifest, topology spec or option; also no command at all: the help goes
to stderr), 3 ``simulate --fail-on-reject`` with a rejected pod. Configuration errors are
listed one per line as ``FILE: key.path: value: rule``. ``--version`` prints the version.
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from collections.abc import Callable, Sequence
from typing import TextIO

from nri_plrm import __version__
from nri_plrm.cli import doctor, scheduler_extender
from nri_plrm.cli.check_config import cmd_check_config
from nri_plrm.cli.inputs import (
    EXIT_FAILURE,
    EXIT_OK,
    EXIT_REJECTED,
    EXIT_USAGE,
    CommandError,
    UsageError,
)
from nri_plrm.cli.render import add_output_option
from nri_plrm.cli.run import cmd_run
from nri_plrm.cli.simulate import DEFAULT_MEMORY_PER_NUMA, cmd_simulate
from nri_plrm.cli.state import cmd_state
from nri_plrm.cli.topology import cmd_topology
from nri_plrm.config.settings import DEFAULT_PATH
from nri_plrm.topology.machines import MACHINES

PROG = "nri-plrm"


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
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

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
            "Admit Kubernetes Pod manifests (YAML or JSON, several per file, kind: List; - reads "
            "standard input) in the order given, through the same code path as the daemon, "
            "against an in-memory runtime. Rejections are results, with the kubelet's reason "
            "and message and the cause: the exit code is 0 when the simulation ran, or 3 with "
            "--fail-on-reject when a pod was rejected. Without --config the built-in defaults "
            "apply (CPU 0 and 512Mi of NUMA node 0 reserved); a named machine without memory "
            f"is simulated with {DEFAULT_MEMORY_PER_NUMA} per NUMA node."
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
            f"{PROG} simulate --topology topoDualSocketHT --fail-on-reject pods.yaml",
            f"{PROG} simulate --resize default/web/app=cpu=4 examples/pod-scope-mixed.yaml",
            "",
            "machines for --topology (besides a key=value spec or a CPU-table JSON file):",
            *textwrap.wrap(", ".join(MACHINES), 90),
        ),
    )
    _config_option(sim)
    _topology_options(sim, "default: the bundled 2-socket, 4-NUMA, 32-core SMT2 machine")
    add_output_option(sim)
    sim.add_argument(
        "--fail-on-reject",
        action="store_true",
        help=f"exit {EXIT_REJECTED} when any pod is rejected (CI gates on whether pods fit)",
    )
    sim.add_argument(
        "--resize",
        action="append",
        metavar="NAMESPACE/POD[/CONTAINER]=cpu=Q[,memory=Q]",
        help=(
            "after every manifest is admitted, resize a container (or, without CONTAINER, the "
            "pod-level resources) as `kubectl patch --subresource resize` would: the value sets "
            "the request and any limit; repeatable, applied in order; each is shown performed "
            "or refused with the kubelet's reason and message"
        ),
    )
    sim.add_argument(
        "--devices",
        action="append",
        metavar="RESOURCE=NODE:COUNT[,NODE:COUNT]",
        help=(
            "device plugin resources of the node per NUMA node (repeatable), e.g. "
            "nvidia.com/gpu=0:2,1:2; containers ask with an extended resource limit and the "
            "kubelet's Device Manager hands them out at admission"
        ),
    )
    sim.add_argument(
        "--kubelet-topology-policy",
        default=None,
        metavar="POLICY",
        help=(
            "the kubelet's own topologyManagerPolicy, which places the devices (default: "
            "[topology_manager] kubelet_policy of the config, itself none by default: they "
            "land anywhere and the plugin follows them)"
        ),
    )
    sim.add_argument(
        "manifests", nargs="+", metavar="MANIFEST", help="pod manifest files (- for stdin)"
    )
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
    add_output_option(state)
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
    add_output_option(topo)
    topo.set_defaults(handler=cmd_topology)

    check = sub.add_parser(
        "check-config",
        help="validate a configuration file and list every error",
        description=(
            "Validate a TOML configuration, and the machine-dependent rules (reserved CPUs and "
            "memory exist) against this machine ([topology] sysfs_root), or against "
            "--topology or --sysfs. When the machine cannot be read, the output says that "
            "those rules were not checked. Exit code 2 on errors."
        ),
        formatter_class=formatter,
        epilog=_examples(
            f"{PROG} check-config /etc/nri-plrm/config.toml",
            f"{PROG} check-config --sysfs /sys /etc/nri-plrm/config.toml",
        ),
    )
    check.add_argument("file", metavar="FILE", help="TOML configuration file")
    _topology_options(check, "default: this machine, from [topology] sysfs_root")
    check.set_defaults(handler=cmd_check_config)

    doctor.add_parser(sub.add_parser, PROG)
    scheduler_extender.add_parser(sub.add_parser, PROG)

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
        help=f"a key=value machine spec, a CPU-table JSON file or a machine name ({default})",
    )
    group.add_argument("--sysfs", metavar="DIR", help="discover the machine from this sysfs tree")


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    """Entry point of the ``nri-plrm`` command; returns the exit code."""
    stdout = out or sys.stdout
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
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


def cmd_version(args: argparse.Namespace, out: TextIO) -> int:
    """``version``."""
    out.write(f"{PROG} {__version__}\n")
    return EXIT_OK
