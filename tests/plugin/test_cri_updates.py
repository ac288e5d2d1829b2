"""Other pods' cpusets through CRI UpdateContainerResources: the request on the wire (a gRPC
server on a real unix socket decodes it by field number), failures with the runtime's reason,
and which way the plugin chooses for which runtime."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import grpc
import pbwire
import pytest

from nri_plrm.plugin.cri_updates import IN_FLIGHT, UPDATE_METHOD, CRIUpdater
from nri_plrm.plugin.pool_updates import choose_update_path, nri_version_tuple
from nri_plrm.proto import nri_api_pb2 as api


def update(cid: str, cpus: str, mems: str = "", quota: int = 0) -> api.ContainerUpdate:
    u = api.ContainerUpdate(container_id=cid)
    u.linux.resources.cpu.cpus = cpus
    u.linux.resources.cpu.mems = mems
    if quota:
        u.linux.resources.cpu.quota.value = quota
    return u


async def serve(path: str, seen: list[bytes], fail: dict[str, grpc.StatusCode]) -> grpc.aio.Server:
    async def handle(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        seen.append(request)
        cid = pbwire.string(pbwire.fields(request), 1)
        if cid in fail:
            await context.abort(fail[cid], f"container {cid}: it went wrong")
        return b""

    method = UPDATE_METHOD.rsplit("/", 1)[1]
    handler = grpc.method_handlers_generic_handler(
        "runtime.v1.RuntimeService",
        {method: grpc.unary_unary_rpc_method_handler(handle)},
    )
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port(f"unix://{path}")
    await server.start()
    return server


def test_each_update_is_one_cri_call_with_the_cpuset_only(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    seen: list[bytes] = []
    fail = {"c": grpc.StatusCode.UNKNOWN, "gone": grpc.StatusCode.NOT_FOUND}

    async def main() -> list[api.ContainerUpdate]:
        path = str(tmp_path / "cri.sock")
        server = await serve(path, seen, fail)
        updater = CRIUpdater(path, logging.getLogger("test.cri"))
        try:
            return await updater(
                [update("a", "0-3", "0", quota=-1), update("gone", "4"), update("c", "5-7")]
            )
        finally:
            await updater.close()
            await server.stop(None)

    with caplog.at_level(logging.WARNING):
        failed = asyncio.run(main())
    assert [u.container_id for u in failed] == ["c"]  # a container gone is not a failure
    by_id = {pbwire.string(pbwire.fields(raw), 1): pbwire.fields(raw) for raw in seen}
    assert set(by_id) == {"a", "gone", "c"}
    (linux,) = pbwire.messages(by_id["a"], 2)
    assert set(linux) == {6, 7}  # cpuset_cpus and cpuset_mems: the quota stays the runtime's
    assert (pbwire.string(linux, 6), pbwire.string(linux, 7)) == ("0-3", "0")
    assert "container c failed: UNKNOWN: container c: it went wrong" in caplog.text


def test_the_way_chosen_for_each_runtime(tmp_path: Path) -> None:
    async def nri(updates: list[api.ContainerUpdate]) -> list[api.ContainerUpdate]:
        return []

    socket = tmp_path / "containerd.sock"
    cri = CRIUpdater(str(socket), logging.getLogger("test.cri"))
    assert choose_update_path(cri, nri, "v0.12.2")[0] is nri  # no socket there
    socket.touch()
    chosen, how = choose_update_path(cri, nri, "")
    assert chosen is cri and str(socket) in how
    assert choose_update_path(None, nri, "v0.12.1")[0] is nri
    chosen, how = choose_update_path(None, nri, "v0.12.0")
    assert chosen is None and "containerd#13733" in how
    assert choose_update_path(None, nri, "")[0] is None  # NRI before v0.12 sends no version


@pytest.mark.parametrize(
    ("text", "parsed"),
    [("v0.12.2", (0, 12, 2)), ("0.12.1-rc.1", (0, 12, 1)), ("", ()), ("vX", ())],
)
def test_nri_versions(text: str, parsed: tuple[int, ...]) -> None:
    assert nri_version_tuple(text) == parsed


def test_calls_overlap_up_to_the_limit(tmp_path: Path) -> None:
    """containerd runs the runc updates outside its NRI lock: IN_FLIGHT calls at once, never
    more."""
    current = [0, 0]  # in flight, most seen

    async def main() -> list[api.ContainerUpdate]:
        async def handle(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
            current[0] += 1
            current[1] = max(current)
            await asyncio.sleep(0.05)
            current[0] -= 1
            return b""

        handler = grpc.method_handlers_generic_handler(
            "runtime.v1.RuntimeService",
            {"UpdateContainerResources": grpc.unary_unary_rpc_method_handler(handle)},
        )
        server = grpc.aio.server()
        server.add_generic_rpc_handlers((handler,))
        path = str(tmp_path / "cri.sock")
        server.add_insecure_port(f"unix://{path}")
        await server.start()
        updater = CRIUpdater(path, logging.getLogger("test.cri"))
        try:
            return await updater([update(f"c{i}", "1") for i in range(3 * IN_FLIGHT)])
        finally:
            await updater.close()
            await server.stop(None)

    assert asyncio.run(main()) == []
    assert current[1] == IN_FLIGHT
