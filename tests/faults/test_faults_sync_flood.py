"""A runtime that floods Synchronize pages (``more=true`` without end) (issue 12, finding 6).

Before the fix the stub kept every page: 60 pages of 4 MiB took the daemon to 906 MB. Now a
paged Synchronize past ``SYNC_MAX_PAGES`` pages or ``SYNC_MAX_BYTES`` bytes is answered with
RESOURCE_EXHAUSTED, the pages are dropped and the connection closed; the plugin reconnects and
serves the runtime normally. Driven over the real socket against the real daemon (forked), whose
peak memory is read from ``/proc/<pid>/status``.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

from cpu_pods import make_pod
from daemon_process import wait_logged
from fault_daemon import ForkedDaemon, prepare
from nrisim import NRISimulator
from nrisim.sim import PluginSession
from plrm_runtime import FakeRuntime

from nri_plrm.nri import events as ev
from nri_plrm.nri.sync_pages import SYNC_MAX_BYTES, SYNC_MAX_PAGES
from nri_plrm.proto import nri_api_pb2 as api
from nri_plrm.ttrpc.codec import MAX_MESSAGE_LEN
from nri_plrm.ttrpc.messages import Code, TtrpcError

PAGE_CONTAINERS = 1500
"""Containers per flood page: about 3.6 MiB, as full as containerd fills its pages."""
FLOOD_PAGES = 40
"""Pages each flood sends at most (160 MiB: more than twice the byte cap)."""
FLOODS = 3
MIB = 1 << 20


def flood_page() -> bytes:
    """One ``more=true`` page of realistic containers (annotations, env, mounts, args)."""
    page = api.SynchronizeRequest(more=True)
    for i in range(PAGE_CONTAINERS):
        c = page.containers.add(
            id=f"{i:064x}",
            pod_sandbox_id=f"{i // 4:064x}",
            name=f"container-{i}",
            state=api.CONTAINER_RUNNING,
        )
        c.annotations.update({f"io.kubernetes.container.k{k}": "v" * 40 for k in range(12)})
        c.labels.update({"io.kubernetes.pod.namespace": "default", "app": f"app-{i}"})
        c.args.extend(["/bin/server", "--port=8080", "--log-level=info"])
        c.env.extend(f"VAR_{k}=value-{k}-{'x' * 30}" for k in range(20))
        for k in range(6):
            c.mounts.add(destination=f"/mnt/{k}", source=f"/var/lib/kubelet/pods/{i}/{k}")
    data = page.SerializeToString()
    assert len(data) < MAX_MESSAGE_LEN
    return data


class FloodingSimulator(NRISimulator):
    """Sends ``floods`` endless paged Synchronizes (one per connection), then behaves."""

    def __init__(self, path: str, **kwargs: Any) -> None:
        super().__init__(path, **kwargs)
        self.floods_left = 0
        self.page = flood_page()
        self.refusals: list[tuple[int, TtrpcError]] = []
        """(page number, error) of every flood the plugin refused."""

    async def _synchronize(self, session: PluginSession) -> None:
        if not self.floods_left:
            await super()._synchronize(session)
            return
        self.floods_left -= 1
        for number in range(1, FLOOD_PAGES + 1):
            try:
                reply = await session.channel.call(
                    ev.SERVICE_PLUGIN, "Synchronize", self.page, timeout=30
                )
            except TtrpcError as exc:
                self.refusals.append((number, exc))
                raise
            assert api.SynchronizeResponse.FromString(reply).more
        raise ValueError(f"plugin accepted {FLOOD_PAGES} pages of an endless Synchronize")


def peak_rss_mib(pid: int) -> float:
    """The process's peak resident set size (``VmHWM``) in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"/proc/{pid}/status has no VmHWM")


def test_flooded_synchronize_is_refused_closed_and_the_plugin_comes_back(
    tmp_path: Path,
) -> None:
    async def main() -> None:
        daemon = ForkedDaemon(prepare(tmp_path))
        sim = FloodingSimulator(str(tmp_path / "nri.sock"))
        await sim.listen()
        daemon.start()
        try:
            await sim.wait_registered(timeout=60)
            baseline = peak_rss_mib(daemon.pid)
            sim.floods_left = FLOODS
            old = sim.session
            await sim.restart(downtime=0.1)
            await daemon.wait_new_session(sim, old)
            session = await sim.wait_registered(timeout=60)
            assert sim.floods_left == 0 and len(sim.refusals) == FLOODS, sim.refusals
            for number, exc in sim.refusals:
                assert exc.code == Code.RESOURCE_EXHAUSTED
                assert f"at most {SYNC_MAX_PAGES} pages and {SYNC_MAX_BYTES} bytes" in str(exc)
                assert number <= SYNC_MAX_BYTES // len(sim.page) + 1
            # each refused connection was closed by the plugin, which reconnected
            assert sim.sessions == 2 + FLOODS
            await wait_logged(daemon.log, "closing the connection")
            # and the plugin serves the runtime on the connection after the floods
            runtime = FakeRuntime(sim)
            pod = await runtime.launch(make_pod("after-flood", "pinned", "2", "2"))
            await runtime.settle()
            assert len(runtime.cpus_of(pod, "pinned")) == 2
            assert session.channel.is_open
            grown = peak_rss_mib(daemon.pid) - baseline
            # 64 MiB of pages held at most once at a time (parsed, about 3x the wire size)
            assert grown < 4 * SYNC_MAX_BYTES / MIB, f"peak RSS grew {grown:.0f} MiB"
            assert await daemon.terminate() == 0
        finally:
            await daemon.kill()
            with contextlib.suppress(Exception):
                await sim.close()

    asyncio.run(main())
