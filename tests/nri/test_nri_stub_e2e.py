"""End-to-end: the plugin stub against the runtime simulator over real unix sockets."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import struct
import tempfile
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

import pytest
from nrisim import NRISimulator, request
from nrisim.capture import capture_available, missing_capture_reason

from nri_plrm.nri import events as ev
from nri_plrm.nri.handlers import NRIError
from nri_plrm.nri.stub import RuntimeUnreachable, Stub
from nri_plrm.proto import nri_api_pb2 as api
from nri_plrm.ttrpc.messages import Code, TtrpcError
from nri_plrm.ttrpc.transport import ChannelClosed, connect_unix

T = TypeVar("T")

needs_capture = pytest.mark.skipif(not capture_available(), reason=missing_capture_reason())
"""Tests that replay recorded messages; the others run from the repository alone."""

if capture_available():
    SYNC = request("run2-sync-existing", "Synchronize")
    GOLDEN_CREATE = request("golden", "CreateContainer")
    POD, CTR = GOLDEN_CREATE.pod, GOLDEN_CREATE.container


@pytest.fixture
def sock_path() -> Iterator[str]:
    d = tempfile.mkdtemp(prefix="nri")  # short path: AF_UNIX paths are limited to 108 bytes
    yield os.path.join(d, "nri.sock")
    shutil.rmtree(d, ignore_errors=True)


def run(coro_fn: Callable[[], Awaitable[T]], timeout: float = 30.0) -> T:
    async def main() -> T:
        return await asyncio.wait_for(coro_fn(), timeout)

    return asyncio.run(main())


class Plugin:
    """Handlers for every event; records calls; behaviour adjustable per test."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.syncs: list[tuple[list[api.PodSandbox], list[api.Container]]] = []
        self.disconnects = 0
        self.create_gate: asyncio.Event | None = None
        self.create_started = asyncio.Event()
        self.stub: Stub | None = None

    def synchronize(
        self, pods: list[api.PodSandbox], ctrs: list[api.Container]
    ) -> list[api.ContainerUpdate]:
        self.syncs.append((pods, ctrs))
        return [api.ContainerUpdate(container_id=c.id) for c in ctrs[:1]]

    def run_pod_sandbox(self, pod: api.PodSandbox) -> None:
        self.calls.append(("run_pod_sandbox", pod.id))

    def stop_pod_sandbox(self, pod: api.PodSandbox) -> None:
        self.calls.append(("stop_pod_sandbox", pod.id))

    def remove_pod_sandbox(self, pod: api.PodSandbox) -> None:
        self.calls.append(("remove_pod_sandbox", pod.id))

    async def update_pod_sandbox(
        self, pod: api.PodSandbox, overhead: Any, resources: api.LinuxResources | None
    ) -> None:
        self.calls.append(("update_pod_sandbox", resources is not None))

    def post_update_pod_sandbox(self, pod: api.PodSandbox) -> None:
        self.calls.append(("post_update_pod_sandbox", pod.id))

    async def create_container(
        self, pod: api.PodSandbox, ctr: api.Container
    ) -> tuple[api.ContainerAdjustment, list[api.ContainerUpdate]]:
        self.calls.append(("create_container", ctr.name))
        self.create_started.set()
        if self.create_gate is not None:
            await self.create_gate.wait()
        adj = api.ContainerAdjustment()
        adj.linux.resources.cpu.cpus = "0-1"
        adj.linux.resources.cpu.quota.value = -1
        return adj, [api.ContainerUpdate(container_id="other")]

    def update_container(
        self, pod: api.PodSandbox, ctr: api.Container, res: api.LinuxResources
    ) -> list[api.ContainerUpdate]:
        self.calls.append(("update_container", res.cpu.cpus))
        return []

    def stop_container(self, pod: api.PodSandbox, ctr: api.Container) -> list[api.ContainerUpdate]:
        self.calls.append(("stop_container", ctr.name))
        return [api.ContainerUpdate(container_id="sibling")]

    def start_container(self, pod: api.PodSandbox, ctr: api.Container) -> None:
        self.calls.append(("start_container", ctr.name))

    def remove_container(self, pod: api.PodSandbox, ctr: api.Container) -> None:
        self.calls.append(("remove_container", ctr.name))

    def post_create_container(self, pod: api.PodSandbox, ctr: api.Container) -> None:
        self.calls.append(("post_create_container", ctr.name))

    def post_start_container(self, pod: api.PodSandbox, ctr: api.Container) -> None:
        self.calls.append(("post_start_container", ctr.name))

    def post_update_container(self, pod: api.PodSandbox, ctr: api.Container) -> None:
        self.calls.append(("post_update_container", ctr.name))

    def on_disconnect(self) -> None:
        self.disconnects += 1


class Observer:
    def __init__(self) -> None:
        self.requests: list[tuple[str, bool]] = []
        self.connects = 0
        self.disconnects = 0

    def on_request(self, method: str, seconds: float, ok: bool) -> None:
        assert seconds >= 0
        self.requests.append((method, ok))

    def on_connect(self) -> None:
        self.connects += 1

    def on_disconnect(self) -> None:
        self.disconnects += 1


def make_stub(handlers: object, path: str, **kw: Any) -> Stub:
    kw.setdefault("backoff_initial", 0.02)
    kw.setdefault("backoff_max", 0.1)
    return Stub(handlers, name="plrm-test", index="42", socket_path=path, **kw)


async def full_lifecycle(sim: NRISimulator, plugin: Plugin) -> None:
    await sim.run_pod_sandbox(POD)
    resp = await sim.create_container(POD, CTR)
    assert resp is not None
    assert resp.adjust.linux.resources.cpu.cpus == "0-1"
    assert resp.adjust.linux.resources.cpu.HasField("quota")
    assert resp.adjust.linux.resources.cpu.quota.value == -1
    assert [u.container_id for u in resp.update] == ["other"]
    await sim.post_create_container(POD, CTR)
    await sim.start_container(POD, CTR)
    await sim.post_start_container(POD, CTR)
    upd = await sim.update_container(POD, CTR, api.LinuxResources(cpu=api.LinuxCPU(cpus="3")))
    assert upd is not None and list(upd.update) == []
    await sim.post_update_container(POD, CTR)
    await sim.update_pod_sandbox(POD, resources=api.LinuxResources())
    await sim.post_update_pod_sandbox(POD)
    stop = await sim.stop_container(POD, CTR)
    assert stop is not None and [u.container_id for u in stop.update] == ["sibling"]
    await sim.remove_container(POD, CTR)
    await sim.stop_pod_sandbox(POD)
    await sim.remove_pod_sandbox(POD)


def lifecycle_calls() -> list[tuple[str, object]]:
    """The handler calls :func:`full_lifecycle` makes on the plugin."""
    return [
        ("run_pod_sandbox", POD.id),
        ("create_container", CTR.name),
        ("post_create_container", CTR.name),
        ("start_container", CTR.name),
        ("post_start_container", CTR.name),
        ("update_container", "3"),
        ("post_update_container", CTR.name),
        ("update_pod_sandbox", True),
        ("post_update_pod_sandbox", POD.id),
        ("stop_container", CTR.name),
        ("remove_container", CTR.name),
        ("stop_pod_sandbox", POD.id),
        ("remove_pod_sandbox", POD.id),
    ]


@needs_capture
def test_register_sync_and_full_lifecycle(sock_path: str) -> None:
    plugin, obs = Plugin(), Observer()

    async def scenario() -> None:
        sim = await NRISimulator.start(sock_path, pods=SYNC.pods, containers=SYNC.containers)
        stub = make_stub(plugin, sock_path, observer=obs)
        task = asyncio.create_task(stub.run())
        session = await sim.wait_registered()
        assert (session.name, session.index) == ("plrm-test", "42")
        assert session.events == 0x1FFF == stub.events  # no validation handler: bit 0x2000 off
        assert stub.ready.is_set() and stub.connected
        assert len(plugin.syncs) == 1
        pods, ctrs = plugin.syncs[0]
        assert len(pods) == 3 and len(ctrs) == 3
        assert list(pods) == list(SYNC.pods) and list(ctrs) == list(SYNC.containers)
        assert session.sync_reply is not None
        assert [u.container_id for u in session.sync_reply.update] == [ctrs[0].id]
        await full_lifecycle(sim, plugin)
        assert plugin.calls == lifecycle_calls()
        assert not session.state_change_fallback
        await stub.stop()
        await task
        await sim.close()

    run(scenario)
    assert obs.connects == obs.disconnects == 1
    assert ("CreateContainer", True) in obs.requests
    assert obs.requests[0] == ("Configure", True)


@needs_capture
def test_legacy_runtime_uses_state_change_and_old_mask(sock_path: str) -> None:
    plugin = Plugin()

    async def scenario() -> None:
        sim = await NRISimulator.start(
            sock_path, runtime_version="v2.1.9", nri_version="v0.8.0", pods=SYNC.pods
        )
        stub = make_stub(plugin, sock_path)
        task = asyncio.create_task(stub.run())
        session = await sim.wait_registered()
        assert session.events == ev.VALID_EVENTS_V08  # 0x1800 dropped for a v0.8 runtime
        await sim.run_pod_sandbox(POD)
        await sim.create_container(POD, CTR)
        await sim.start_container(POD, CTR)
        await sim.remove_container(POD, CTR)
        methods = [r.method for r in sim.records]
        assert methods[-4:] == ["StateChange", "CreateContainer", "StateChange", "StateChange"]
        assert plugin.calls == [
            ("run_pod_sandbox", POD.id),
            ("create_container", CTR.name),
            ("start_container", CTR.name),
            ("remove_container", CTR.name),
        ]
        await stub.stop()
        await task
        await sim.close()

    run(scenario)


def big_pods(count: int, annotation_bytes: int) -> list[api.PodSandbox]:
    out = []
    for i in range(count):
        pod = api.PodSandbox()
        pod.CopyFrom(SYNC.pods[i % len(SYNC.pods)])
        pod.id = f"pod-{i:04d}"
        pod.annotations["bulk"] = "x" * annotation_bytes
        out.append(pod)
    return out


@needs_capture
def test_synchronize_over_4mib_is_paged_with_more(sock_path: str) -> None:
    plugin = Plugin()
    pods = big_pods(48, 100_000)  # about 4.9 MB in one message

    async def scenario() -> None:
        sim = await NRISimulator.start(sock_path, pods=pods, containers=SYNC.containers)
        stub = make_stub(plugin, sock_path)
        task = asyncio.create_task(stub.run())
        session = await sim.wait_registered()
        assert len(session.sync_pages) >= 2
        assert [p.more for p in session.sync_pages] == [True] * (len(session.sync_pages) - 1) + [
            False
        ]
        replies = [r.reply for r in sim.records if r.method == "Synchronize"]
        assert all(isinstance(r, api.SynchronizeResponse) and r.more for r in replies[:-1])
        assert len(plugin.syncs) == 1
        got_pods, got_ctrs = plugin.syncs[0]
        assert [p.id for p in got_pods] == [p.id for p in pods]
        assert len(got_ctrs) == 3
        await stub.stop()
        await task
        await sim.close()

    run(scenario)


@needs_capture
def test_runtime_restart_mid_request_reconnects_and_resyncs(sock_path: str) -> None:
    plugin, obs = Plugin(), Observer()
    plugin.create_gate = asyncio.Event()

    async def scenario() -> None:
        sim = await NRISimulator.start(sock_path, pods=SYNC.pods, containers=SYNC.containers)
        stub = make_stub(plugin, sock_path, observer=obs)
        task = asyncio.create_task(stub.run())
        await sim.wait_registered()
        pending = asyncio.create_task(sim.create_container(POD, CTR))
        await plugin.create_started.wait()
        await sim.restart(pods=SYNC.pods[:1], containers=SYNC.containers[:1], downtime=0.05)
        with pytest.raises(ChannelClosed):
            await pending
        assert plugin.create_gate is not None
        plugin.create_gate.set()  # the late reply goes nowhere and must not break anything
        session = await sim.wait_registered()
        assert sim.sessions == 2 and stub.reconnects == 1
        assert [len(p) for p, _ in plugin.syncs] == [3, 1]
        assert plugin.disconnects == 1
        plugin.create_gate = None
        resp = await sim.create_container(POD, CTR)
        assert resp is not None and resp.adjust.linux.resources.cpu.cpus == "0-1"
        assert session.channel.is_open
        await stub.stop()
        await task
        await sim.close()

    run(scenario)
    assert obs.connects == 2 and obs.disconnects == 2


@needs_capture
def test_unknown_method_gets_unimplemented_and_serving_continues(sock_path: str) -> None:
    plugin = Plugin()

    async def scenario() -> None:
        sim = await NRISimulator.start(sock_path)
        stub = make_stub(plugin, sock_path)
        task = asyncio.create_task(stub.run())
        await sim.wait_registered()
        with pytest.raises(TtrpcError) as err:
            await sim.call_raw(ev.SERVICE_PLUGIN, "FutureMethod", b"")
        assert (err.value.code, err.value.message) == (Code.UNIMPLEMENTED, "method FutureMethod")
        with pytest.raises(TtrpcError) as err:
            await sim.call_raw("some.Other", "Configure", b"")
        assert (err.value.code, err.value.message) == (Code.UNIMPLEMENTED, "service some.Other")
        assert await sim.call_raw(ev.SERVICE_PLUGIN, "Shutdown") == b""
        resp = await sim.create_container(POD, CTR)
        assert resp is not None
        await stub.stop()
        await task
        await sim.close()

    run(scenario)


class Failing:
    def __init__(self) -> None:
        self.ok_after_failure = False

    def create_container(self, pod: api.PodSandbox, ctr: api.Container) -> Any:
        if ctr.name == "bad":
            raise NRIError(f"container {ctr.name}: no CPUs left", Code.RESOURCE_EXHAUSTED)
        if ctr.name == "boom":
            raise ZeroDivisionError("division by zero")
        self.ok_after_failure = True
        return None, []

    def run_pod_sandbox(self, pod: api.PodSandbox) -> None:
        raise NRIError(f"pod {pod.name}: rejected")


@needs_capture
def test_handler_errors_fail_only_that_request(sock_path: str) -> None:
    handlers = Failing()

    async def scenario() -> None:
        sim = await NRISimulator.start(sock_path)
        stub = make_stub(handlers, sock_path)
        task = asyncio.create_task(stub.run())
        await sim.wait_registered()
        with pytest.raises(TtrpcError) as err:
            await sim.run_pod_sandbox(POD)
        assert err.value.code == Code.UNKNOWN and err.value.message == f"pod {POD.name}: rejected"
        for name, code, text in [
            ("bad", Code.RESOURCE_EXHAUSTED, "container bad: no CPUs left"),
            ("boom", Code.UNKNOWN, "CreateContainer failed in plugin: division by zero"),
        ]:
            ctr = api.Container(id=name, name=name)
            with pytest.raises(TtrpcError) as err:
                await sim.create_container(POD, ctr)
            assert (err.value.code, err.value.message) == (code, text)
        resp = await sim.create_container(POD, api.Container(id="good", name="good"))
        assert resp == api.CreateContainerResponse()
        assert handlers.ok_after_failure and stub.reconnects == 0
        await stub.stop()
        await task
        await sim.close()

    run(scenario)


@needs_capture
def test_slow_handler_does_not_stall_other_requests(sock_path: str) -> None:
    plugin = Plugin()
    plugin.create_gate = asyncio.Event()

    class Releasing(Plugin):
        def run_pod_sandbox(self, pod: api.PodSandbox) -> None:
            assert plugin.create_gate is not None
            plugin.create_gate.set()

    releaser = Releasing()
    releaser.create_container = plugin.create_container  # type: ignore[method-assign]

    async def scenario() -> None:
        sim = await NRISimulator.start(sock_path)
        stub = make_stub(releaser, sock_path)
        task = asyncio.create_task(stub.run())
        await sim.wait_registered()
        create = asyncio.create_task(sim.create_container(POD, CTR))
        await plugin.create_started.wait()
        # The create handler waits for the run handler: only concurrent dispatch completes both.
        await sim.run_pod_sandbox(POD)
        resp = await create
        assert resp is not None and resp.adjust.linux.resources.cpu.cpus == "0-1"
        await stub.stop()
        await task
        await sim.close()

    run(scenario)


@needs_capture
def test_update_containers_waits_for_in_flight_replies(sock_path: str) -> None:
    plugin = Plugin()
    plugin.create_gate = asyncio.Event()
    inside: list[BaseException] = []
    scheduled: list[asyncio.Task[list[api.ContainerUpdate]]] = []

    class Updating(Plugin):
        async def stop_container(  # type: ignore[override]
            self, pod: api.PodSandbox, ctr: api.Container
        ) -> list[api.ContainerUpdate]:
            assert self.stub is not None
            try:
                await self.stub.update_containers([api.ContainerUpdate(container_id="x")])
            except RuntimeError as exc:
                inside.append(exc)
            scheduled.append(
                self.stub.schedule_update_containers([api.ContainerUpdate(container_id="late")])
            )
            return []

    updating = Updating()
    updating.create_gate = plugin.create_gate
    updating.create_started = plugin.create_started

    async def scenario() -> None:
        sim = await NRISimulator.start(sock_path)
        sim.fail_update_ids = {"broken"}
        stub = make_stub(updating, sock_path)
        updating.stub = stub
        task = asyncio.create_task(stub.run())
        await sim.wait_registered()
        create = asyncio.create_task(sim.create_container(POD, CTR))
        await updating.create_started.wait()
        upd = asyncio.create_task(stub.update_containers([api.ContainerUpdate(container_id="c1")]))
        for _ in range(20):
            await asyncio.sleep(0)
        assert not upd.done() and sim.unsolicited == []  # held back while a reply is pending
        assert updating.create_gate is not None
        updating.create_gate.set()
        await create
        assert await upd == []
        assert [u.container_id for u in sim.unsolicited[0].update] == ["c1"]
        failing = [
            api.ContainerUpdate(container_id="broken"),
            api.ContainerUpdate(container_id="fine"),
            api.ContainerUpdate(container_id="broken", ignore_failure=True),
        ]
        failed = await stub.update_containers(failing)
        assert [(u.container_id, u.ignore_failure) for u in failed] == [
            ("broken", False),
            ("fine", False),
        ]
        await sim.stop_container(POD, CTR)
        assert len(inside) == 1 and "schedule_update_containers" in str(inside[0])
        assert await scheduled[0] == []
        assert [u.container_id for u in sim.unsolicited[-1].update] == ["late"]
        stop_reply = [r for r in sim.records if r.method == "StopContainer"]
        assert stop_reply and stop_reply[-1].error is None
        await stub.stop()
        await task
        with pytest.raises(ConnectionError):
            await stub.update_containers([])
        await sim.close()

    run(scenario)


def test_prelaunched_plugin_uses_the_inherited_socket(sock_path: str) -> None:
    plugin = Plugin()

    async def scenario() -> None:
        runtime_end, plugin_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        sim = NRISimulator(sock_path, config="[policy]\nscope = 'pod'\n")
        await sim.adopt(runtime_end)
        env = {
            "NRI_PLUGIN_SOCKET": str(plugin_end.detach()),
            "NRI_PLUGIN_NAME": "nri-plrm",
            "NRI_PLUGIN_IDX": "05",
        }
        stub = Stub(plugin, name="ignored", index="99", environ=env)
        assert not stub.reconnect
        task = asyncio.create_task(stub.run())
        session = await sim.wait_registered()
        assert (session.name, session.index) == ("nri-plrm", "05")
        await sim.close()
        await task  # end of stream: a pre-launched plugin exits instead of reconnecting
        assert stub.reconnects == 0 and not stub.connected

    run(scenario)


@needs_capture
def test_configure_handler_gets_config_and_runtime(sock_path: str) -> None:
    seen: list[tuple[str, str, str]] = []

    class Configurable:
        async def configure(self, config: str, name: str, version: str) -> None:
            seen.append((config, name, version))

        def create_container(self, pod: api.PodSandbox, ctr: api.Container) -> Any:
            return None

        def validate_container_adjustment(self, req: Any) -> str | None:
            return "no" if req.container.name == "veto" else None

    async def scenario() -> None:
        sim = await NRISimulator.start(sock_path, config="cfg", runtime_version="v2.2.1")
        stub = make_stub(Configurable(), sock_path)
        task = asyncio.create_task(stub.run())
        session = await sim.wait_registered()
        assert session.events == ev.event_bit(api.CREATE_CONTAINER) | ev.event_bit(
            api.VALIDATE_CONTAINER_ADJUSTMENT
        )
        assert stub.request_timeout == 2.0
        ok = await sim.validate_container_adjustment(
            api.ValidateContainerAdjustmentRequest(container=api.Container(name="fine"))
        )
        veto = await sim.validate_container_adjustment(
            api.ValidateContainerAdjustmentRequest(container=api.Container(name="veto"))
        )
        assert ok == api.ValidateContainerAdjustmentResponse()
        assert veto == api.ValidateContainerAdjustmentResponse(reject=True, reason="no")
        assert await sim.run_pod_sandbox(POD) is None  # not subscribed: never sent
        await stub.stop()
        await task
        await sim.close()

    run(scenario)
    assert seen == [("cfg", "containerd", "v2.2.1")]


@needs_capture
def test_malformed_frame_closes_connection_and_plugin_reconnects(sock_path: str) -> None:
    plugin = Plugin()

    async def scenario() -> None:
        sim = await NRISimulator.start(sock_path)
        stub = make_stub(plugin, sock_path)
        task = asyncio.create_task(stub.run())
        await sim.wait_registered()
        sim.inject(struct.pack(">II", 1, 0xFFFFFFFF))  # declares a 4 GiB frame
        await sim.wait_disconnected()
        await sim.wait_registered()
        assert stub.reconnects == 1
        assert await sim.create_container(POD, CTR) is not None
        await stub.stop()
        await task
        await sim.close()

    run(scenario)


@needs_capture
def test_slow_reply_makes_runtime_drop_plugin_which_reconnects(sock_path: str) -> None:
    plugin = Plugin()
    plugin.create_gate = asyncio.Event()

    async def scenario() -> None:
        sim = await NRISimulator.start(sock_path, request_timeout=0.2)
        stub = make_stub(plugin, sock_path)
        task = asyncio.create_task(stub.run())
        await sim.wait_registered()
        assert stub.request_timeout == 0.2  # taken from ConfigureRequest
        with pytest.raises(TimeoutError):
            await sim.create_container(POD, CTR)
        assert sim.session is not None and "deadline" in (sim.session.failure or "")
        assert plugin.create_gate is not None
        plugin.create_gate.set()
        await sim.wait_registered()
        assert stub.reconnects == 1
        await stub.stop()
        await task
        await sim.close()

    run(scenario)


def test_stub_waits_for_the_socket_to_appear(sock_path: str) -> None:
    plugin = Plugin()

    async def scenario() -> None:
        stub = make_stub(plugin, sock_path)
        task = asyncio.create_task(stub.run())
        await asyncio.sleep(0.1)
        assert not stub.connected
        sim = await NRISimulator.start(sock_path)
        await sim.wait_registered()
        await stub.stop()
        await task
        await sim.close()

    run(scenario)


def test_without_reconnect_a_missing_socket_is_an_error(sock_path: str) -> None:
    stub = make_stub(Plugin(), sock_path, reconnect=False)
    with pytest.raises(RuntimeUnreachable) as err:
        run(stub.run)
    assert (
        str(err.value) == f"cannot connect to the NRI socket {sock_path}: No such file or directory"
    )
    assert isinstance(err.value.__cause__, FileNotFoundError)


def test_registration_rejected_is_not_fatal(sock_path: str) -> None:
    plugin = Plugin()

    async def scenario() -> None:
        sim = await NRISimulator.start(sock_path, registration_timeout=0.5)
        stub = make_stub(plugin, sock_path, reconnect=False)
        stub.index = "7"  # bypass local validation to provoke the runtime's error
        await asyncio.wait_for(stub.run(), 5)
        assert sim.session is not None
        assert "2 digits" in (sim.session.failure or "")
        assert not stub.ready.is_set()
        await sim.close()

    run(scenario)


def test_invalid_names_and_empty_masks_are_refused() -> None:
    with pytest.raises(ValueError, match="name 'bad name' is invalid"):
        Stub(Plugin(), name="bad name", index="10", environ={})
    with pytest.raises(ValueError, match="index '1' is invalid"):
        Stub(Plugin(), name="ok", index="1", environ={})
    with pytest.raises(ValueError, match="defines no event handler"):
        Stub(object(), name="ok", index="10", environ={})
    with pytest.raises(ValueError, match="NRI_PLUGIN_SOCKET='x'"):
        Stub(Plugin(), name="ok", index="10", environ={"NRI_PLUGIN_SOCKET": "x"})


@pytest.mark.parametrize(
    ("name", "version", "nri", "mask"),
    [
        ("containerd", "v2.1.4", "", 0x7FF),
        ("containerd", "2.1.0+unknown", "", 0x7FF),
        ("containerd", "v2.2.0", "", 0x3FFF),
        ("containerd", "v2.4.0-dev", "v0.12.2", 0x3FFF),
        ("cri-o", "1.33.2", "", 0x7FF),
        ("cri-o", "1.34.0", "", 0x3FFF),
        ("other", "9.9", "", 0x7FF),
    ],
)
def test_valid_events_by_runtime(name: str, version: str, nri: str, mask: int) -> None:
    assert ev.valid_events(name, version, nri) == mask


@needs_capture
def test_containerd_2_2_mixes_dedicated_rpcs_and_state_change(sock_path: str) -> None:
    plugin = Plugin()

    async def scenario() -> None:
        sim = await NRISimulator.start(sock_path, runtime_version="v2.2.1", nri_version="v0.11.0")
        stub = make_stub(plugin, sock_path)
        task = asyncio.create_task(stub.run())
        session = await sim.wait_registered()
        assert session.events == 0x1FFF
        await full_lifecycle(sim, plugin)
        assert plugin.calls == lifecycle_calls()
        methods = [r.method for r in sim.records][2:]  # after Configure and Synchronize
        assert methods == [
            "StateChange",
            "CreateContainer",
            "StateChange",
            "StateChange",
            "StateChange",
            "UpdateContainer",
            "StateChange",
            "UpdatePodSandbox",
            "StateChange",
            "StopContainer",
            "StateChange",
            "StateChange",
            "StateChange",
        ]
        await stub.stop()
        await task
        await sim.close()

    run(scenario)


@needs_capture
def test_simulator_falls_back_to_state_change_after_unimplemented(sock_path: str) -> None:
    seen: list[int] = []

    async def configure(req: Any) -> bytes:
        return api.ConfigureResponse(events=0x7FF).SerializeToString()

    async def synchronize(req: Any) -> bytes:
        return b""

    async def state_change(req: Any) -> bytes:
        seen.append(api.StateChangeEvent.FromString(req.payload).event)
        return b""

    async def scenario() -> None:
        sim = await NRISimulator.start(sock_path)
        methods = {"Configure": configure, "Synchronize": synchronize, "StateChange": state_change}
        channel = await connect_unix(
            sock_path,
            server_conn=1,
            client_conn=2,
            handlers={ev.SERVICE_PLUGIN: methods},
        )
        reg = api.RegisterPluginRequest(plugin_name="old-go-stub", plugin_idx="01")
        await channel.call(ev.SERVICE_RUNTIME, "RegisterPlugin", reg.SerializeToString(), 5.0)
        session = await sim.wait_registered()
        await sim.run_pod_sandbox(POD)
        await sim.start_container(POD, CTR)
        assert session.state_change_fallback
        assert seen == [api.RUN_POD_SANDBOX, api.START_CONTAINER]
        assert [r.method for r in sim.records][2:] == [
            "RunPodSandbox",
            "StateChange",
            "StateChange",
        ]
        channel.close()
        await sim.close()

    run(scenario)
