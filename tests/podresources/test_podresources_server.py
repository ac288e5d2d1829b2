"""The PodResources server over a real unix socket, checked with a raw client."""

from __future__ import annotations

import os
import socket
import stat
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest
from counted_steps import run_counted
from podres_raw import RawPodResourcesClient
from static_view import StaticView

from nri_plrm.base.cpuset import CPUSet
from nri_plrm.config.settings import PodResourcesSettings
from nri_plrm.engine.spec import AssignmentType, ContainerAssignment, ContainerKind, MemoryBlock
from nri_plrm.ledger.view import ContainerView, PodView
from nri_plrm.podresources import report
from nri_plrm.podresources import server as server_module
from nri_plrm.podresources.client import PodResourcesClient
from nri_plrm.podresources.server import (
    PodResourcesServer,
    PodResourcesService,
    SocketInUseError,
    remove_stale_socket,
)
from nri_plrm.proto import podresources_api_pb2 as pb
from nri_plrm.util.ratelimit import TokenBucket
from nri_plrm.util.steps import beside_loop

GI = 1024**3


def _assign(kind: AssignmentType, cpus: str, mems: str = "", memory: tuple[MemoryBlock, ...] = ()):
    return ContainerAssignment(kind, CPUSet.parse(cpus), CPUSet.parse(mems), memory)


POD = PodView(
    uid="u1",
    namespace="prod",
    name="db",
    containers=(
        ContainerView("setup", _assign(AssignmentType.POD_SHARED, "2-3", "1"), ContainerKind.INIT),
        ContainerView(
            "main",
            _assign(AssignmentType.POD_EXCLUSIVE, "8,40", "1", (MemoryBlock((1,), "memory", GI),)),
            ContainerKind.APP,
        ),
        ContainerView("sidecar", _assign(AssignmentType.POD_SHARED, "9,41", "1"), None),
        ContainerView("pending"),
    ),
    cpus=CPUSet.parse("8-9,40-41"),
    memory=(MemoryBlock((1,), "memory", 2 * GI),),
)
CLASSIC = PodView(
    uid="u2",
    namespace="default",
    name="web",
    containers=(ContainerView("app", _assign(AssignmentType.NODE_SHARED, "1-7,10-39")),),
)
VIEW = StaticView(
    (POD, CLASSIC),
    CPUSet.parse("1-63"),
    (
        MemoryBlock((0,), "memory", 15 * GI),
        MemoryBlock((1,), "memory", 16 * GI),
        MemoryBlock((1,), "hugepages-2Mi", 0),
    ),
)


@pytest.fixture
def sock(tmp_path: Path) -> str:
    return str(tmp_path / "run" / "pod-resources.sock")


def serve(view: StaticView, path: str, **kwargs: object) -> PodResourcesServer:
    limiter = kwargs.pop("limiter", None)
    kubelet = kwargs.pop("kubelet", None)
    calls = kwargs.pop("observer", None)
    service = PodResourcesService(view, limiter, kubelet, calls)  # type: ignore[arg-type]
    server = PodResourcesServer(service, path, **kwargs)  # type: ignore[arg-type]
    server.start()
    return server


@pytest.fixture
def client(sock: str) -> Iterator[RawPodResourcesClient]:
    server = serve(VIEW, sock)
    c = RawPodResourcesClient(sock)
    yield c
    c.close()
    server.stop()


def test_list_reports_exclusive_only_and_skips_init_containers(
    client: RawPodResourcesClient,
) -> None:
    pods = client.list()
    assert [(p["namespace"], p["name"]) for p in pods] == [("prod", "db"), ("default", "web")]
    db = pods[0]
    assert db["cpu_ids"] == [8, 9, 40, 41]
    assert db["memory"] == [("memory", 2 * GI, [1])]
    by_name = {c["name"]: c for c in db["containers"]}
    assert list(by_name) == ["main", "sidecar", "pending"]
    assert by_name["main"]["cpu_ids"] == [8, 40]
    assert by_name["main"]["memory"] == [("memory", GI, [1])]
    assert by_name["sidecar"]["cpu_ids"] == [] and by_name["sidecar"]["memory"] == []
    assert by_name["pending"]["cpu_ids"] == []
    web = pods[1]
    assert web["cpu_ids"] == [] and web["memory"] == []
    assert web["containers"][0]["cpu_ids"] == []
    shared_pool = set(db["cpu_ids"]) - {c for x in db["containers"] for c in x["cpu_ids"]}
    assert shared_pool == {9, 41}


def test_get_one_pod(client: RawPodResourcesClient) -> None:
    pod = client.get("prod", "db")
    assert pod["name"] == "db" and pod["cpu_ids"] == [8, 9, 40, 41]


def test_get_unknown_pod_fails_like_the_kubelet(client: RawPodResourcesClient) -> None:
    with pytest.raises(grpc.RpcError) as info:
        client.get("prod", "nope")
    assert info.value.code() == grpc.StatusCode.UNKNOWN
    assert info.value.details() == "pod nope in namespace prod not found"


def test_allocatable(client: RawPodResourcesClient) -> None:
    alloc = client.allocatable()
    assert alloc["cpu_ids"] == list(range(1, 64))
    assert alloc["memory"] == [("memory", 15 * GI, [0]), ("memory", 16 * GI, [1])]
    assert alloc["devices"] == []


def test_socket_mode_and_cleanup(sock: str) -> None:
    server = serve(VIEW, sock)
    try:
        st = os.lstat(sock)
        assert stat.S_ISSOCK(st.st_mode)
        assert stat.S_IMODE(st.st_mode) == 0o600
        assert sorted(os.listdir(os.path.dirname(sock))) == ["pod-resources.sock"]
    finally:
        server.stop()
    assert not os.path.exists(sock)


def test_group_mode(sock: str) -> None:
    group = str(os.getgid())
    server = serve(VIEW, sock, mode=0o660, group=group)
    try:
        st = os.lstat(sock)
        assert stat.S_IMODE(st.st_mode) == 0o660
        assert st.st_gid == os.getgid()
    finally:
        server.stop()


def test_rate_limit(sock: str) -> None:
    codes: list[tuple[str, str]] = []
    server = serve(
        VIEW,
        sock,
        limiter=TokenBucket(qps=0.001, burst=10),
        observer=lambda m, c: codes.append((m, c)),
    )
    c = RawPodResourcesClient(sock)
    try:
        for _ in range(10):
            c.list()
        with pytest.raises(grpc.RpcError) as info:
            c.list()
        assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert info.value.details() == "rejected by rate limit"
    finally:
        c.close()
        server.stop()
    assert codes == [("List", "OK")] * 10 + [("List", "RESOURCE_EXHAUSTED")]


def test_token_bucket_refills_at_qps() -> None:
    now = [0.0]
    bucket = TokenBucket(100, 10, clock=lambda: now[0])
    assert [bucket.allow() for _ in range(11)] == [True] * 10 + [False]
    now[0] += 0.05  # 5 tokens
    assert [bucket.allow() for _ in range(6)] == [True] * 5 + [False]
    now[0] += 10.0  # capped at the burst
    assert sum(bucket.allow() for _ in range(20)) == 10


def test_stale_socket_is_replaced(sock: str) -> None:
    os.makedirs(os.path.dirname(sock))
    dead = socket.socket(socket.AF_UNIX)
    dead.bind(sock)
    dead.close()
    server = serve(VIEW, sock)
    try:
        assert RawPodResourcesClient(sock).get("default", "web")["name"] == "web"
    finally:
        server.stop()


def test_live_socket_is_not_stolen(sock: str) -> None:
    first = serve(VIEW, sock)
    try:
        with pytest.raises(SocketInUseError, match="another process is serving"):
            remove_stale_socket(sock)
    finally:
        first.stop()


def test_regular_file_is_not_removed(sock: str) -> None:
    os.makedirs(os.path.dirname(sock))
    Path(sock).write_text("precious")
    with pytest.raises(SocketInUseError, match="not a socket"):
        serve(VIEW, sock)
    assert Path(sock).read_text() == "precious"


def _fake_kubelet(path: str) -> grpc.Server:
    """A kubelet-side PodResources endpoint that reports devices (a real gRPC server)."""
    devices = pb.ContainerResources(
        name="main",
        devices=[pb.ContainerDevices(resource_name="nvidia.com/gpu", device_ids=["GPU-1"])],
        dynamic_resources=[pb.DynamicResource(claim_name="claim-a")],
        cpu_ids=[99],
    )
    pod = pb.PodResources(name="db", namespace="prod", containers=[devices], cpu_ids=[99])

    def list_(request: bytes, context: object) -> bytes:
        return pb.ListPodResourcesResponse(pod_resources=[pod]).SerializeToString()

    def get(request: bytes, context: object) -> bytes:
        return pb.GetPodResourcesResponse(pod_resources=pod).SerializeToString()

    def alloc(request: bytes, context: object) -> bytes:
        reply = pb.AllocatableResourcesResponse(
            devices=[pb.ContainerDevices(resource_name="nvidia.com/gpu", device_ids=["GPU-1"])],
            cpu_ids=[99],
        )
        return reply.SerializeToString()

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    server.add_generic_rpc_handlers(
        (
            grpc.method_handlers_generic_handler(
                "v1.PodResourcesLister",
                {
                    "List": grpc.unary_unary_rpc_method_handler(list_),
                    "Get": grpc.unary_unary_rpc_method_handler(get),
                    "GetAllocatableResources": grpc.unary_unary_rpc_method_handler(alloc),
                },
            ),
        )
    )
    server.add_insecure_port(f"unix:{path}")
    server.start()
    return server


def test_devices_are_merged_from_the_kubelet(tmp_path: Path, sock: str) -> None:
    kubelet_sock = str(tmp_path / "kubelet.sock")
    kubelet = _fake_kubelet(kubelet_sock)
    settings = PodResourcesSettings(socket=sock, kubelet_socket=kubelet_sock)
    server = PodResourcesServer.from_settings(VIEW, settings)
    server.start()
    c = RawPodResourcesClient(sock)
    try:
        main = next(x for x in c.get("prod", "db")["containers"] if x["name"] == "main")
        assert main["devices"] == [("nvidia.com/gpu", ["GPU-1"])]
        assert main["dynamic_resources"] == ["claim-a"]
        assert main["cpu_ids"] == [8, 40]  # ours, not the kubelet's
        listed = c.list()[0]
        assert listed["containers"][0]["devices"] == [("nvidia.com/gpu", ["GPU-1"])]
        assert listed["cpu_ids"] == [8, 9, 40, 41]
        alloc = c.allocatable()
        assert alloc["devices"] == [("nvidia.com/gpu", ["GPU-1"])]
        assert alloc["cpu_ids"] == list(range(1, 64))
    finally:
        c.close()
        server.stop()
        kubelet.stop(None)


def test_missing_kubelet_socket_does_not_break_replies(tmp_path: Path, sock: str) -> None:
    service = PodResourcesService(VIEW, kubelet=PodResourcesClient(str(tmp_path / "no.sock"), 0.5))
    server = PodResourcesServer(service, sock)
    server.start()
    c = RawPodResourcesClient(sock)
    try:
        assert c.get("prod", "db")["containers"][0]["devices"] == []
    finally:
        c.close()
        server.stop()


class _ChangingView:
    """A view that publishes a new snapshot object on every change, as the plugin does."""

    def __init__(self) -> None:
        self.snapshot: tuple[PodView, ...] = (CLASSIC,)

    def pods(self) -> tuple[PodView, ...]:
        return self.snapshot

    def allocatable_cpus(self) -> CPUSet:
        return CPUSet()

    def allocatable_memory(self) -> tuple[MemoryBlock, ...]:
        return ()


def test_list_follows_new_snapshots(sock: str) -> None:
    view = _ChangingView()
    server = PodResourcesServer(PodResourcesService(view), sock)
    server.start()
    c = RawPodResourcesClient(sock)
    try:
        assert [p["name"] for p in c.list()] == ["web"]
        assert [p["name"] for p in c.list()] == ["web"]
        view.snapshot = (CLASSIC, POD)
        assert [p["name"] for p in c.list()] == ["web", "db"]
        view.snapshot = ()
        assert c.list() == []
    finally:
        c.close()
        server.stop()


def test_list_is_built_a_pod_at_a_time() -> None:
    """The server builds ``List`` in steps (one per pod) that a thread beside the event loop
    runs with pauses; the reply is the one built at once."""
    pods = VIEW.pods()
    reply, pieces = run_counted(report.list_steps(pods))
    assert pieces == len(pods) > 1
    assert reply == pb.ListPodResourcesResponse(pod_resources=[report.pod_message(p) for p in pods])
    assert report.list_response(VIEW) == reply


def test_the_server_builds_list_beside_the_loop(sock: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """``List`` replies are built with ``steps.beside_loop`` (pauses between pods), once per
    published snapshot."""
    runs: list[int] = []

    def counted(steps: Any, *args: Any) -> Any:
        runs.append(1)
        return beside_loop(steps, *args)

    monkeypatch.setattr(server_module, "beside_loop", counted)
    server = serve(VIEW, sock)
    c = RawPodResourcesClient(sock)
    try:
        assert len(c.list()) == 2 and len(c.list()) == 2
    finally:
        c.close()
        server.stop()
    assert runs == [1]
