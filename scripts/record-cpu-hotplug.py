#!/usr/bin/env python3
"""Record what the kernel does on one CPU hotplug cycle (root, a machine you may disturb).

Takes ``--cpu`` offline for ``--seconds`` and back online (always back online, whatever
happens), while a raw ``NETLINK_KOBJECT_UEVENT`` socket (kernel group 1) records every datagram.
On a cgroup v1 cpuset hierarchy it first builds a small tree under ``--cgroup`` (a pod with a
container on the CPU alone and one on all CPUs, each running a ``sleep``) and records
``cpuset.cpus`` and the tasks of every cgroup before, while offline and after; the tree is
removed at the end. Writes ``<out>.jsonl`` (one datagram per line: ``raw_base64``, ``text``)
and ``<out>.cgroups.json``.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import select
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from cpuset_v1 import ScratchTree, scratch_tree, set_online, snapshot

NETLINK_KOBJECT_UEVENT = 15


def drain(sock: socket.socket, out: list[bytes], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        if select.select([sock], [], [], left)[0]:
            out.append(sock.recv(65536))


@contextlib.contextmanager
def cgroup_tree(root: Path, all_cpus: str, cpu: int) -> Iterator[ScratchTree]:
    mems = (root.parent / "cpuset.mems").read_text().strip()
    layout = [
        (root, all_cpus),
        (root / "burstable", all_cpus),
        (root / "burstable" / "pod-test", all_cpus),
        (root / "burstable" / "pod-test" / "ctr-exclusive", str(cpu)),
        (root / "burstable" / "pod-test" / "ctr-shared", all_cpus),
    ]
    with scratch_tree() as tree:
        for path, cpus in layout:
            tree.make(path, cpus, mems)
        for path, _ in layout[3:]:
            tree.run_sleeper(path)
        yield tree


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cpu", type=int, default=1)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--cgroup", default="/sys/fs/cgroup/cpuset/kubepods-test")
    parser.add_argument("--out", required=True, help="output path without extension")
    args = parser.parse_args()
    root = Path(args.cgroup)
    all_cpus = (root.parent / "cpuset.cpus").read_text().strip()
    datagrams: list[bytes] = []
    states: dict[str, Any] = {}
    with (
        socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, NETLINK_KOBJECT_UEVENT) as sock,
        cgroup_tree(root, all_cpus, args.cpu),
    ):
        sock.bind((os.getpid(), 1))
        states["before"] = snapshot(root)
        try:
            set_online(args.cpu, False)
            drain(sock, datagrams, args.seconds)
            states["offline"] = snapshot(root)
        finally:
            set_online(args.cpu, True)
        drain(sock, datagrams, 1.0)
        states["online"] = snapshot(root)
    with open(args.out + ".jsonl", "w") as f:
        for data in datagrams:
            text = data.decode("utf-8", "backslashreplace")
            f.write(json.dumps({"raw_base64": base64.b64encode(data).decode(), "text": text}))
            f.write("\n")
    Path(args.out + ".cgroups.json").write_text(json.dumps(states, indent=1) + "\n")


if __name__ == "__main__":
    main()
