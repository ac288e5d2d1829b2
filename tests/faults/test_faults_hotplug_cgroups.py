"""CPU 1 offline and back under the running daemon (nrisim runtime, fake sysfs, fake cgroups):
the recorded kernel datagrams go through the real watcher and monitor; on cgroup v1 the CPU is
given back to the ``kubepods`` tree top-down before every container is re-asserted, on cgroup
v2 nothing is written to the tree and the containers are re-asserted unchanged."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import urllib.request
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_cgroups import (
    kernel_v1_offline,
    kernel_v1_online,
    read,
    snapshot,
    write_v1_tree,
    write_v2_tree,
)
from plrm_daemon import Running, running_daemon
from uevent_recordings import OWN_DIR, datagrams

from nri_plrm.base.cpuset import CPUSet
from nri_plrm.daemon import service as daemon
from nri_plrm.daemon.hotplug.watcher import start_hotplug_watcher
from nri_plrm.engine.spec import ContainerSpec, PodSpec

GI = 1 << 30
ALL = CPUSet.parse("0-63")
CPU = 1
EXCLUSIVE_UID = "0c6a3f8e-0000-4000-8000-000000000001"
SHARED_UID = "5d1e2f3a-0000-4000-8000-000000000002"


class ReplaySocket:
    """A bound uevent socket that hands out the datagrams the test pushes, as the kernel's."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[bytes | None] = asyncio.Queue()
        self.bound = asyncio.Event()

    async def bind(self, groups: int) -> None:
        assert groups == 1
        self.bound.set()

    async def get(self) -> AsyncIterator[dict[str, dict[str, bytes]]]:
        while (data := await self.queue.get()) is not None:
            yield {"header": {"payload": data}}

    def close(self) -> None:
        self.queue.put_nowait(None)


def pods() -> tuple[PodSpec, PodSpec]:
    four = {"cpu": 4000, "memory": GI}
    exclusive = PodSpec(
        uid=EXCLUSIVE_UID,
        name="exclusive",
        containers=(ContainerSpec("main", requests=four, limits=four),),
    )
    shared = PodSpec(uid=SHARED_UID, name="shared", containers=(ContainerSpec("app"),))
    return exclusive, shared


def set_online(tmp: Path, cpus: CPUSet) -> None:
    (tmp / "sys" / "devices" / "system" / "cpu" / "online").write_text(f"{cpus}\n")


def scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as reply:
        return str(reply.read().decode())


async def replay(d: Running, sock: ReplaySocket, recorded: list[bytes], action: bytes) -> None:
    """Push the recorded datagrams up to and including the CPU event ``action``, then wait
    for the plugin's UpdateContainers and apply it to the runtime."""
    sent = len(d.sim.unsolicited)
    while recorded:
        data = recorded.pop(0)
        sock.queue.put_nowait(data)
        if data.startswith(action + b"@/devices/system/cpu/"):
            break
    deadline = asyncio.get_running_loop().time() + 10
    while len(d.sim.unsolicited) == sent:
        assert asyncio.get_running_loop().time() < deadline, "no UpdateContainers"
        await asyncio.sleep(0.02)
    await d.runtime.settle()


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_cpu_offline_and_back_ends_whole(
    tmp_path: Path, version: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    sock = ReplaySocket()
    monkeypatch.setattr(
        daemon,
        "start_hotplug_watcher",
        functools.partial(start_hotplug_watcher, socket_factory=lambda: sock),
    )
    recorded = datagrams(OWN_DIR / "cpu1-offline-online.jsonl")

    async def scenario() -> None:
        async with running_daemon(tmp_path) as d:
            exclusive, shared = pods()
            ex_pod = await d.runtime.launch(exclusive)
            sh_pod = await d.runtime.launch(shared)
            decided = {cid: rc.cpus for cid, rc in d.runtime.containers.items()}
            main = d.runtime.cpus_of(ex_pod, "main")
            app = d.runtime.cpus_of(sh_pod, "app")
            assert CPU in main and CPU not in app and main | app == ALL
            ex_id, sh_id = d.runtime.id_of(ex_pod, "main"), d.runtime.id_of(sh_pod, "app")
            tree = {
                "kubepods": ALL,
                f"kubepods/pod{EXCLUSIVE_UID}": ALL,
                f"kubepods/pod{EXCLUSIVE_UID}/{ex_id}": main,
                "kubepods/besteffort": ALL,
                f"kubepods/besteffort/pod{SHARED_UID}": ALL,
                f"kubepods/besteffort/pod{SHARED_UID}/{sh_id}": app,
            }
            root = tmp_path / "cgroup"
            if version == "v1":
                hierarchy = write_v1_tree(root, ALL, tree)
            else:
                hierarchy = write_v2_tree(root, ALL, tree)
            before = snapshot(root)
            await asyncio.wait_for(sock.bound.wait(), 10)

            # CPU 1 goes offline: the kernel's view changes, then its datagrams arrive
            set_online(tmp_path, ALL - CPUSet([CPU]))
            if version == "v1":
                kernel_v1_offline(hierarchy, CPU)
            await replay(d, sock, recorded, b"offline")
            (update,) = d.sim.unsolicited[-1:]
            sent = {u.container_id: CPUSet.parse(u.linux.resources.cpu.cpus) for u in update.update}
            if version == "v1":  # v1 refuses offline CPUs: each gets its online part
                assert sent == {cid: cpus - CPUSet([CPU]) for cid, cpus in decided.items()}
            else:  # v2 keeps cpuset.cpus: each gets its decided set
                assert sent == decided

            # CPU 1 comes back
            set_online(tmp_path, ALL)
            if version == "v1":
                kernel_v1_online(hierarchy, CPU)
            with collected("nri_plrm") as records:
                await replay(d, sock, recorded, b"online")
            assert {cid: rc.cpus for cid, rc in d.runtime.containers.items()} == decided
            messages = [r.getMessage() for r in records]
            gave = [m for m in messages if "gave cpus" in m]
            reasserted = next(i for i, m in enumerate(messages) if "re-asserted" in m)
            if version == "v1":
                # every cgroup but the containers', parents first, before the containers
                order = [Path(m.split(" back to ")[1].split(" (")[0]) for m in gave]
                assert sorted(order) == sorted(
                    hierarchy / rel for rel in tree if not rel.endswith((ex_id, sh_id))
                )
                assert all(order.index(p.parent) < i for i, p in enumerate(order) if i)
                assert all(messages.index(m) < reasserted for m in gave)
                for rel, cpus in tree.items():
                    if not rel.endswith((ex_id, sh_id)):
                        assert read(hierarchy / rel) == cpus
            else:
                assert gave == []
                assert snapshot(root) == before

            text = await asyncio.to_thread(scrape, d.metrics_url + "/metrics")
            metrics = parse(text)
            assert metrics['nri_plrm_cpu_hotplug_events_total{action="offline"}'] == 1
            assert metrics['nri_plrm_cpu_hotplug_events_total{action="online"}'] == 1
            assert metrics['nri_plrm_hotplug_repairs_total{kind="container_update"}'] == 4
            cgroup_writes = metrics.get('nri_plrm_hotplug_repairs_total{kind="cgroup_cpuset"}')
            assert cgroup_writes == (4 if version == "v1" else None)

    asyncio.run(scenario())


@contextlib.contextmanager
def collected(name: str) -> Iterator[list[logging.LogRecord]]:
    """The records logged under ``name`` meanwhile (the daemon replaces the root's handlers)."""
    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.INFO)
    handler.emit = records.append  # type: ignore[method-assign]
    logging.getLogger(name).addHandler(handler)
    try:
        yield records
    finally:
        logging.getLogger(name).removeHandler(handler)


def parse(text: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out
