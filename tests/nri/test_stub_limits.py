"""Stub bounds: the paged-Synchronize caps and the in-flight request tracking (issue 12)."""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
import time
from pathlib import Path

from nrisim import NRISimulator

from nri_plrm.nri import events as ev
from nri_plrm.nri.stub import Stub
from nri_plrm.nri.sync_pages import SYNC_MAX_PAGES
from nri_plrm.proto import nri_api_pb2 as api
from nri_plrm.ttrpc.codec import MAX_MESSAGE_LEN


class Handlers:
    def __init__(self) -> None:
        self.synced: list[int] = []
        self.gate = asyncio.Event()

    def synchronize(
        self, pods: list[api.PodSandbox], containers: list[api.Container]
    ) -> list[api.ContainerUpdate]:
        self.synced.append(len(pods))
        return []

    async def run_pod_sandbox(self, pod: api.PodSandbox) -> None:
        await self.gate.wait()


PODS = [api.PodSandbox(id=f"pod-{i}", uid=f"uid-{i}", name=f"p{i}") for i in range(64)]


def test_too_many_pages_close_the_connection_and_the_next_sync_works() -> None:
    async def main() -> None:
        with tempfile.TemporaryDirectory() as tmp:
            path = str(Path(tmp) / "nri.sock")
            # 256 small pods in pages of about 600 bytes: 14 pages
            sim = await NRISimulator.start(path, pods=PODS * 4, max_message_len=600)
            handlers = Handlers()
            stub = Stub(
                handlers,
                name="limits",
                index="10",
                socket_path=path,
                sync_max_pages=5,
                backoff_initial=0.5,
            )
            task = asyncio.create_task(stub.run())
            try:
                deadline = time.monotonic() + 10
                while sim.session is None or sim.session.failure is None:
                    assert time.monotonic() < deadline, "the paged Synchronize was not refused"
                    await asyncio.sleep(0.01)
                failure = sim.session.failure
                assert "at most 5 pages" in failure, failure
                assert len(sim.session.sync_pages) == 5, "pages 1-5 accepted, page 6 refused"
                await sim.wait_disconnected()
                assert stub._sync.pods == [] and stub._sync.size == 0, "accumulation freed"
                sim.max_message_len = MAX_MESSAGE_LEN  # one page from now on
                await sim.wait_registered(timeout=10)
                assert handlers.synced == [256]
                assert stub.reconnects >= 1
            finally:
                await stub.stop()
                await task
                await sim.close()

    asyncio.run(main())


def test_default_caps_accept_a_node_sized_paged_synchronize() -> None:
    """The default caps take a Synchronize split into many small pages."""

    async def main() -> None:
        with tempfile.TemporaryDirectory() as tmp:
            path = str(Path(tmp) / "nri.sock")
            pods = PODS * (SYNC_MAX_PAGES // 8)
            sim = await NRISimulator.start(path, pods=pods, max_message_len=600)
            handlers = Handlers()
            stub = Stub(handlers, name="limits", index="10", socket_path=path)
            task = asyncio.create_task(stub.run())
            try:
                session = await sim.wait_registered(timeout=10)
                assert 8 < len(session.sync_pages) <= SYNC_MAX_PAGES
                assert handlers.synced == [len(pods)]
            finally:
                await stub.stop()
                await task
                await sim.close()

    asyncio.run(main())


def test_oldest_request_tracks_handlers_in_flight() -> None:
    async def main() -> None:
        with tempfile.TemporaryDirectory() as tmp:
            path = str(Path(tmp) / "nri.sock")
            sim = await NRISimulator.start(path)
            handlers = Handlers()
            stub = Stub(handlers, name="limits", index="10", socket_path=path)
            task = asyncio.create_task(stub.run())
            try:
                await sim.wait_registered(timeout=10)
                assert stub.oldest_request() is None
                before = time.monotonic()
                payload = api.RunPodSandboxRequest(pod=PODS[0]).SerializeToString()
                call = asyncio.create_task(
                    sim.call_raw(ev.SERVICE_PLUGIN, "RunPodSandbox", payload)
                )
                while stub.oldest_request() is None:
                    await asyncio.sleep(0.005)
                method, started = stub.oldest_request() or ("", 0.0)
                assert method == "RunPodSandbox" and before <= started <= time.monotonic()
                handlers.gate.set()
                await call
                assert stub.oldest_request() is None
            finally:
                await stub.stop()
                with contextlib.suppress(Exception):
                    await task
                await sim.close()

    asyncio.run(main())
