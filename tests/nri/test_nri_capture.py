"""Every recorded frame decodes; the stub answers every recorded request the way Go accepts.

Ground truth: ``shared/testdata/nri-capture`` (real containerd 2.4-dev and 2.1.9 traffic).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from nrisim import (
    REPLY_TYPES,
    REQUEST_TYPES,
    capture_dir,
    capture_folders,
    frames,
    requests,
    trunk_messages,
    unknown_field_paths,
)
from nrisim.gowire import decode_fields, read_go_messages, response_parts
from nrisim.replay import replay_capture

from nri_plrm.nri import events as ev
from nri_plrm.nri.handlers import NRIError
from nri_plrm.nri.stub import Stub
from nri_plrm.proto import nri_api_pb2 as api
from nri_plrm.proto import ttrpc_wire_pb2 as wire
from nri_plrm.ttrpc.codec import TYPE_REQUEST, TYPE_RESPONSE, MuxDecoder

FOLDERS = capture_folders()


def test_capture_has_every_scenario() -> None:
    assert len(FOLDERS) == 15
    assert {"golden", "run3-statechange-fallback", "seed-pods-containerd-2.1"} <= set(FOLDERS)


@pytest.mark.parametrize("folder", FOLDERS)
def test_frames_decode_as_indexed(folder: str) -> None:
    decoders = {"rx": MuxDecoder(), "tx": MuxDecoder()}
    for fr in frames(folder):
        got = decoders[fr.direction].feed(fr.raw)
        want = fr.index["msgs"]
        assert [(m.conn_id, m.stream_id, m.type, m.flags, len(m.data)) for m in got] == [
            (fr.conn, w["sid"], w["type"], w["flags"], w["len"]) for w in want
        ], f"{folder}/{fr.file}"
        for m, w in zip(got, want, strict=True):
            if "method" in w:
                env = wire.Request.FromString(m.data)
                assert (env.service, env.method, env.timeout_nano) == (
                    w["service"],
                    w["method"],
                    w["timeout_nano"],
                )
    assert decoders["rx"].buffered == decoders["tx"].buffered == 0


@pytest.mark.parametrize("folder", FOLDERS)
def test_requests_are_typed_with_fields_intact(folder: str) -> None:
    reqs = requests(folder, "rx") + requests(folder, "tx")
    assert reqs
    for r in reqs:
        assert isinstance(r.payload, REQUEST_TYPES[r.method])
        assert unknown_field_paths(r.payload) == [], f"{folder} {r.method}"
        assert unknown_field_paths(r.envelope) == []
        # Every field the runtime sent survives our decode: re-encoding with sorted map keys
        # gives the same field-by-field content.
        again = r.payload.SerializeToString(deterministic=True)
        desc = r.payload.DESCRIPTOR
        assert _canon(decode_fields(again, desc)) == _canon(decode_fields(r.envelope.payload, desc))


def _canon(fields: dict[int, list[Any]]) -> Any:
    out = []
    for num in sorted(fields):
        vals = [_canon(v) if isinstance(v, dict) else v for v in fields[num]]
        out.append((num, sorted(vals, key=repr)))
    return out


def test_recorded_replies_decode_with_the_go_model() -> None:
    for folder in FOLDERS:
        trunk = (capture_dir() / folder / "trunk-tx.bin").read_bytes()
        msgs = read_go_messages(trunk)
        assert msgs, folder
        rx = {(m.conn_id, m.stream_id): m for m in trunk_messages(folder, "rx") if m.type == 1}
        for m in msgs:
            if m.type != TYPE_RESPONSE:
                continue
            status, payload = response_parts(m.data)
            method = wire.Request.FromString(rx[(m.conn, m.stream_id)].data).method
            if status is None or status.get(1, [0]) == [0]:
                decode_fields(payload, REPLY_TYPES[method].DESCRIPTOR)


class RecordingHandlers:
    """Implements every handler; records what each received; mimics the recorded plugin."""

    def __init__(self, stub_ref: list[Stub], *, create_error: str = "", sync_cpus: str = ""):
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self.create_error = create_error
        self.sync_cpus = sync_cpus
        self.stub_ref = stub_ref

    def _rec(self, name: str, *args: Any) -> None:
        self.calls.append((name, args))

    def configure(self, config: str, runtime_name: str, runtime_version: str) -> None:
        self._rec("configure", config, runtime_name, runtime_version)

    def synchronize(
        self, pods: list[api.PodSandbox], containers: list[api.Container]
    ) -> list[api.ContainerUpdate]:
        self._rec("synchronize", list(pods), list(containers))
        if self.sync_cpus:
            updates = []
            for c in containers:
                u = api.ContainerUpdate(container_id=c.id)
                u.linux.resources.cpu.cpus = self.sync_cpus
                updates.append(u)
            self.stub_ref[0].schedule_update_containers(updates)
        return []

    def run_pod_sandbox(self, pod: api.PodSandbox) -> None:
        self._rec("run_pod_sandbox", pod)

    def stop_pod_sandbox(self, pod: api.PodSandbox) -> None:
        self._rec("stop_pod_sandbox", pod)

    def remove_pod_sandbox(self, pod: api.PodSandbox) -> None:
        self._rec("remove_pod_sandbox", pod)

    def update_pod_sandbox(
        self,
        pod: api.PodSandbox,
        overhead: api.LinuxResources | None,
        res: api.LinuxResources | None,
    ) -> None:
        self._rec("update_pod_sandbox", pod, overhead, res)

    def post_update_pod_sandbox(self, pod: api.PodSandbox) -> None:
        self._rec("post_update_pod_sandbox", pod)

    def create_container(
        self, pod: api.PodSandbox, ctr: api.Container
    ) -> tuple[api.ContainerAdjustment | None, list[api.ContainerUpdate]]:
        self._rec("create_container", pod, ctr)
        if self.create_error:
            raise NRIError(self.create_error)
        adj = api.ContainerAdjustment()
        adj.linux.resources.cpu.cpus = "1"
        return adj, []

    def update_container(
        self, pod: api.PodSandbox, ctr: api.Container, res: api.LinuxResources
    ) -> list[api.ContainerUpdate]:
        self._rec("update_container", pod, ctr, res)
        return []

    def stop_container(self, pod: api.PodSandbox, ctr: api.Container) -> list[api.ContainerUpdate]:
        self._rec("stop_container", pod, ctr)
        return []

    def start_container(self, pod: api.PodSandbox, ctr: api.Container) -> None:
        self._rec("start_container", pod, ctr)

    def remove_container(self, pod: api.PodSandbox, ctr: api.Container) -> None:
        self._rec("remove_container", pod, ctr)

    def post_create_container(self, pod: api.PodSandbox, ctr: api.Container) -> None:
        self._rec("post_create_container", pod, ctr)

    def post_start_container(self, pod: api.PodSandbox, ctr: api.Container) -> None:
        self._rec("post_start_container", pod, ctr)

    def post_update_container(self, pod: api.PodSandbox, ctr: api.Container) -> None:
        self._rec("post_update_container", pod, ctr)

    def validate_container_adjustment(
        self, req: api.ValidateContainerAdjustmentRequest
    ) -> str | None:
        self._rec("validate_container_adjustment", req)
        return None


def expected_call(method: str, p: Any) -> tuple[str, tuple[Any, ...] | None] | None:
    """The handler call a recorded request must produce."""
    if method == "Configure":
        return "configure", (p.config, p.runtime_name, p.runtime_version)
    if method == "Synchronize":
        return None if p.more else ("synchronize", None)
    if method == "StateChange":
        name = ev.EVENT_HANDLERS[p.event]
        return name, (p.pod,) if p.event in ev.POD_EVENTS else (p.pod, p.container)
    if method == "UpdatePodSandbox":
        return "update_pod_sandbox", (
            p.pod,
            p.overhead_linux_resources if p.HasField("overhead_linux_resources") else None,
            p.linux_resources if p.HasField("linux_resources") else None,
        )
    if method == "UpdateContainer":
        return "update_container", (p.pod, p.container, p.linux_resources)
    if method == "ValidateContainerAdjustment":
        return "validate_container_adjustment", (p,)
    name = "".join("_" + c.lower() if c.isupper() else c for c in method).lstrip("_")
    if "pod_sandbox" in name:
        return name, (p.pod,)
    return name, (p.pod, p.container)


def _run_replay(folder: str, tmp_path: Path, **kw: Any) -> tuple[Any, RecordingHandlers, Stub]:
    ref: list[Stub] = []
    handlers = RecordingHandlers(ref, **kw)
    sock = str(tmp_path / "nri.sock")
    stub = Stub(handlers, name="replay", index="10", socket_path=sock, reconnect=False)
    ref.append(stub)
    result = asyncio.run(replay_capture(folder, sock, stub.run))
    return result, handlers, stub


@pytest.mark.parametrize("folder", FOLDERS)
def test_stub_answers_every_recorded_request(folder: str, tmp_path: Path) -> None:
    sync_cpus = "1" if folder == "run2-sync-existing" else ""
    result, handlers, stub = _run_replay(folder, tmp_path, sync_cpus=sync_cpus)
    go_msgs = read_go_messages(result.tx)  # framing accepted by the Go reader model
    plugin_calls = [r for r in requests(folder, "rx") if r.message.conn_id == 1]
    want_calls = []
    for r in plugin_calls:
        go_reply = [m for m in go_msgs if m.conn == 1 and m.stream_id == r.message.stream_id]
        assert len(go_reply) == 1, f"{folder}: {r.method} stream {r.message.stream_id}"
        reply = go_reply[0]
        assert (reply.type, reply.flags) == (TYPE_RESPONSE, 0)
        status, payload = response_parts(reply.data)
        assert status is None, f"{folder}: {r.method} failed: {status}"
        fields = decode_fields(payload, REPLY_TYPES[r.method].DESCRIPTOR)
        if r.method == "Configure":
            valid = ev.valid_events(
                r.payload.runtime_name, r.payload.runtime_version, r.payload.NRI_version
            )
            assert fields == {2: [valid]}  # every handler implemented: all valid events
        elif r.method == "CreateContainer":
            assert fields == {1: [{6: [{2: [{2: [{6: ["1"]}]}]}]}]}
        elif r.method == "Synchronize" and r.payload.more:
            assert fields == {2: [True]}
        else:
            assert fields == {}, f"{folder}: {r.method}"
        call = expected_call(r.method, r.payload)
        if call is not None:
            want_calls.append(call)
    assert want_calls or folder == "run4d-bad-index"
    got = [(n, a) for n, a in handlers.calls if n != "synchronize"]
    assert got == [c for c in want_calls if c[0] != "synchronize"]
    syncs = [r.payload for r in plugin_calls if r.method == "Synchronize"]
    if syncs:
        (sync_call,) = [a for n, a in handlers.calls if n == "synchronize"]
        assert sync_call[0] == [p for s in syncs for p in s.pods]
        assert sync_call[1] == [c for s in syncs for c in s.containers]
    if folder == "run4d-bad-index":
        assert not stub.ready.is_set()


def test_golden_replies_are_byte_identical_to_the_recorded_plugin(tmp_path: Path) -> None:
    result, _, _ = _run_replay("golden", tmp_path)
    ours = [m for m in result.messages if m.conn_id == 1]
    recorded = [m for m in trunk_messages("golden", "tx") if m.conn_id == 1]
    assert ours == recorded
    conn1_frames = [fr.raw for fr in frames("golden") if fr.direction == "tx" and fr.conn == 1]
    assert result.tx.endswith(b"".join(conn1_frames[-1:]))
    assert b"".join(conn1_frames) in result.tx


def test_handler_error_reply_is_byte_identical(tmp_path: Path) -> None:
    msg = "testbed plugin: injected CreateContainer failure"
    result, _, _ = _run_replay("run4a-create-error", tmp_path, create_error=msg)
    recorded = [fr.raw for fr in frames("run4a-create-error") if "resp-CreateContainer" in fr.file]
    assert len(recorded) == 1 and recorded[0] in result.tx


def test_sync_then_unsolicited_update_matches_recording(tmp_path: Path) -> None:
    result, _, _ = _run_replay("run2-sync-existing", tmp_path, sync_cpus="1")
    ours = [m for m in result.messages if m.conn_id == 2 and m.type == TYPE_REQUEST]
    assert [m.stream_id for m in ours] == [1, 3]
    sent = api.UpdateContainersRequest.FromString(wire.Request.FromString(ours[1].data).payload)
    recorded = [r.payload for r in requests("run2-sync-existing", "tx")]
    assert sent == recorded[1]
