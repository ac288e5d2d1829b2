"""``nri-plrm doctor``: a read-only preflight of the node, before and after installing.

Exit code: the worst result, 0 all OK, 1 a warning, 2 a failure (also 2 for a bad option, as
every command).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import TextIO

from nri_plrm.cli.render import add_output_option, emit_json, render_table
from nri_plrm.config.settings import DEFAULT_PATH
from nri_plrm.doctor.containerd import DEFAULT_CONFIG_PATH as CONTAINERD_CONFIG
from nri_plrm.doctor.containerd_version import DEFAULT_ADDRESS as CONTAINERD_SOCKET
from nri_plrm.doctor.kubelet import DEFAULT_CONFIG_PATH as KUBELET_CONFIG
from nri_plrm.doctor.kubelet_process import DEFAULT_PROC
from nri_plrm.doctor.node import DEFAULT_CGROUP_ROOT
from nri_plrm.doctor.result import Check, Status, worst
from nri_plrm.doctor.runner import DoctorInputs, run_checks


def add_parser(new_parser: Callable[..., argparse.ArgumentParser], prog: str) -> None:
    """Register ``doctor`` through ``new_parser``, the sub-command parsers' ``add_parser``."""
    doctor = new_parser(
        "doctor",
        help="check this node before and after installing (containerd, kubelet, cgroups, plugin)",
        description=(
            "Read-only preflight: containerd's version and NRI settings, the kubelet's resource "
            "managers, the cgroup version, the plugin's configuration against this machine, "
            "whether the plugin is registered (/healthz) and its PodResources socket. Each "
            "check prints OK, WARN or FAIL with the fix. Exit code: the worst result (0 OK, "
            "1 WARN, 2 FAIL). Writes nothing; every probe has a timeout."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n"
        + "\n".join(
            f"  {line}"
            for line in (
                f"{prog} doctor",
                f"{prog} doctor --config /etc/nri-plrm/config.toml --output json",
                f"{prog} doctor --kubelet-config /etc/kubernetes/kubelet.yaml",
            )
        ),
    )
    doctor.add_argument(
        "--config", default=DEFAULT_PATH, help=f"plugin config (default {DEFAULT_PATH})"
    )
    doctor.add_argument(
        "--containerd-config",
        default=CONTAINERD_CONFIG,
        help=f"containerd's config.toml (default {CONTAINERD_CONFIG})",
    )
    doctor.add_argument(
        "--containerd-socket",
        metavar="PATH",
        help="containerd's API socket, asked for its version (default: [grpc] address of its "
        f"config, else {CONTAINERD_SOCKET})",
    )
    doctor.add_argument(
        "--kubelet-config",
        metavar="FILE",
        help="the kubelet's configuration file (default: the running kubelet's --config, else "
        f"{KUBELET_CONFIG})",
    )
    doctor.add_argument(
        "--proc",
        default=DEFAULT_PROC,
        metavar="DIR",
        help=f"where to find the running kubelet's command line (default {DEFAULT_PROC})",
    )
    doctor.add_argument(
        "--sysfs",
        metavar="DIR",
        help="sysfs to read the machine from (default: [topology] sysfs_root)",
    )
    doctor.add_argument(
        "--cgroup-root",
        default=DEFAULT_CGROUP_ROOT,
        metavar="DIR",
        help=f"cgroup mount point (default {DEFAULT_CGROUP_ROOT})",
    )
    add_output_option(doctor)
    doctor.set_defaults(handler=cmd_doctor)


def cmd_doctor(args: argparse.Namespace, out: TextIO) -> int:
    """``doctor``."""
    inputs = DoctorInputs(
        config=args.config,
        containerd_config=args.containerd_config,
        containerd_socket=args.containerd_socket,
        kubelet_config=args.kubelet_config,
        proc=args.proc,
        sysfs=args.sysfs,
        cgroup_root=args.cgroup_root,
    )
    checks = run_checks(inputs)
    result = worst(checks)
    if args.output == "json":
        emit_json(out, doctor_json(checks))
    else:
        out.write(doctor_report(checks))
    return int(result)


def _counts(checks: Sequence[Check]) -> dict[str, int]:
    return {s.label.lower(): sum(1 for c in checks if c.status is s) for s in Status}


def doctor_json(checks: Sequence[Check]) -> dict[str, object]:
    """The ``--output json`` document: overall status, exit code, counts and every check."""
    result = worst(checks)
    return {
        "status": result.label,
        "exit_code": int(result),
        "counts": _counts(checks),
        "checks": [c.to_json() for c in checks],
    }


def doctor_report(checks: Sequence[Check]) -> str:
    """The table of checks, then the fix of each one that is not OK."""
    table = render_table(
        ["STATUS", "CHECK", "FOUND"],
        [[c.status.label, f"{c.area}.{c.name}", c.message] for c in checks],
    )
    todo = [c for c in checks if c.status is not Status.OK]
    lines = [table]
    if todo:
        lines.append("\nto fix:\n")
        for c in sorted(todo, key=lambda c: -c.status):
            lines.append(f"  {c.status.label:<4}  {c.area}.{c.name}: {c.fix}\n")
    counts = _counts(checks)
    result = worst(checks)
    lines.append(
        f"\n{counts['fail']} FAIL, {counts['warn']} WARN, {counts['ok']} OK: "
        f"{result.label} (exit {int(result)})\n"
    )
    return "".join(lines)
