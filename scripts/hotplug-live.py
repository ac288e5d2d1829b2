#!/usr/bin/env python3
"""Take one CPU offline and back under the running plugin, on a real kernel (root; not CI).

The daemon (``nri_plrm.daemon.service.run``) runs against the runtime simulator
(tests/support/nrisim)
on the machine's real ``/sys`` with the real uevent socket, and repairs a real cgroup v1
cpuset tree built for the experiment under ``/sys/fs/cgroup/cpuset/<--kubepods>`` (pod and
container cgroups laid out like the kubelet's and runc's, each container running ``sleep``).
The simulated runtime applies the plugin's updates and this script writes each container's
cpuset into its cgroup, as runc would, recording whether the kernel accepted it. The CPU is
always brought back online and the tree removed. Prints a JSON report of the cgroups before,
while offline and after, the runtime writes and the plugin's hotplug metrics and log lines.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import sys
import tempfile
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))

from cpuset_v1 import ScratchTree, set_online, snapshot
from nrisim import NRISimulator
from plrm_daemon import free_port
from plrm_runtime import FakeRuntime

from nri_plrm.config.file import parse_config
from nri_plrm.daemon import service as daemon
from nri_plrm.engine.spec import ContainerSpec, PodSpec

GUARANTEED_UID = "0c6a3f8e-0000-4000-8000-0000000000a1"
BESTEFFORT_UID = "5d1e2f3a-0000-4000-8000-0000000000b2"


def runc_write(path: Path, cpus: str) -> str:
    """Write a container's cpuset as runc does; "ok" or the kernel's error."""
    try:
        (path / "cpuset.cpus").write_text(cpus)
    except OSError as exc:
        return f"{cpus}: {exc.strerror}"
    return f"{cpus}: ok"


async def experiment(args: argparse.Namespace, tmp: Path, report: dict[str, Any]) -> None:
    kubepods = Path("/sys/fs/cgroup/cpuset") / args.kubepods
    all_cpus = (kubepods.parent / "cpuset.cpus").read_text().strip()
    mems = (kubepods.parent / "cpuset.mems").read_text().strip()
    port = free_port()
    config = parse_config(
        f"""
[nri]
socket = "{tmp}/nri.sock"
[state]
dir = "{tmp}/state"
[pod_resources]
enabled = false
[metrics]
address = "127.0.0.1:{port}"
[topology]
cgroup_root = "/sys/fs/cgroup"
kubepods_cgroup = "{args.kubepods}"
[cpu_manager]
reserved_cpus = "0"
""",
        str(tmp / "config.toml"),
    )
    records: list[str] = []
    sim = await NRISimulator.start(config.nri.socket)
    ready = asyncio.Event()
    task = asyncio.get_running_loop().create_task(daemon.run(config, on_ready=ready.set))
    tree = ScratchTree()
    try:
        await asyncio.wait_for(ready.wait(), 20)
        handler = logging.Handler(logging.INFO)
        handler.emit = lambda r: records.append(f"{r.levelname} {r.name}: {r.getMessage()}")  # type: ignore[method-assign]
        logging.getLogger("nri_plrm").addHandler(handler)
        runtime = FakeRuntime(sim)
        one = {"cpu": 1000, "memory": 1 << 28}
        guaranteed = PodSpec(
            uid=GUARANTEED_UID,
            name="guaranteed",
            containers=(ContainerSpec("pinned", requests=one, limits=one),),
        )
        besteffort = PodSpec(
            uid=BESTEFFORT_UID, name="besteffort", containers=(ContainerSpec("app"),)
        )
        g_pod = await runtime.launch(guaranteed)
        b_pod = await runtime.launch(besteffort)
        cgroups = {
            runtime.id_of(g_pod, "pinned"): kubepods / f"pod{GUARANTEED_UID}",
            runtime.id_of(b_pod, "app"): kubepods / "besteffort" / f"pod{BESTEFFORT_UID}",
        }
        for path in [kubepods, kubepods / "besteffort", *cgroups.values()]:
            if path not in tree.made:
                tree.make(path, all_cpus, mems)
        for cid, parent in cgroups.items():
            path = parent / cid
            tree.make(path, str(runtime.containers[cid].cpus), mems)
            tree.run_sleeper(path)
        report["decided"] = {cid: str(rc.cpus) for cid, rc in runtime.containers.items()}
        report["before"] = snapshot(kubepods)
        await asyncio.sleep(1)  # the watcher opens its socket after registration

        async def runc_applies(phase: str) -> None:
            await runtime.settle()
            report[f"runc_{phase}"] = {
                cid: runc_write(parent / cid, str(runtime.containers[cid].cpus))
                for cid, parent in cgroups.items()
            }

        try:
            set_online(args.cpu, False)
            await asyncio.sleep(args.seconds)
            await runc_applies("offline")
            report["offline"] = snapshot(kubepods)
        finally:
            set_online(args.cpu, True)
        await asyncio.sleep(2)
        await runc_applies("online")
        report["online"] = snapshot(kubepods)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
            text = reply.read().decode()
        report["metrics"] = [
            line for line in text.splitlines() if "hotplug" in line and not line.startswith("#")
        ]
        report["log"] = [r for r in records if "hotplug" in r]
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
        await sim.close()
        tree.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cpu", type=int, default=1)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--kubepods", default="kubepods-test")
    args = parser.parse_args()
    report: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="nri-plrm-hotplug-") as tmp:
        try:
            asyncio.run(experiment(args, Path(tmp), report))
        finally:
            set_online(args.cpu, True)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
