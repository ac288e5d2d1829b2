"""Read the recorded containerd NRI traffic (``shared/testdata/nri-capture``) as typed messages."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from google.protobuf.message import Message as PbMessage
from google.protobuf.unknown_fields import UnknownFieldSet

from nri_plrm.proto import nri_api_pb2 as api
from nri_plrm.proto import ttrpc_wire_pb2 as wire
from nri_plrm.ttrpc.codec import TYPE_REQUEST, Message, MuxDecoder

_REPO = Path(__file__).resolve().parents[3]


def capture_root() -> Path:
    """Where the capture is looked for: ``$NRI_CAPTURE_DIR`` or
    ``<repo>/../shared/testdata/nri-capture``."""
    env = os.environ.get("NRI_CAPTURE_DIR")
    return Path(env) if env else _REPO.parent / "shared" / "testdata" / "nri-capture"


def capture_available() -> bool:
    """True when :func:`capture_root` holds a capture (its ``golden/index.jsonl``)."""
    return (capture_root() / "golden" / "index.jsonl").is_file()


def missing_capture_reason() -> str:
    """The one-line skip reason of the replay tests when the capture is absent."""
    return (
        f"recorded containerd NRI traffic not found at {capture_root()}: "
        "set NRI_CAPTURE_DIR to the nri-capture directory to run the replay tests"
    )


def capture_dir() -> Path:
    """The capture root; skips the calling test (or module, at import) when it is absent."""
    if not capture_available():
        import pytest  # here only: the benchmarks import this module where pytest is absent

        pytest.skip(missing_capture_reason(), allow_module_level=True)
    return capture_root()


def capture_folders() -> list[str]:
    """Every scenario folder of the capture, sorted."""
    root = capture_dir()
    return sorted(p.name for p in root.iterdir() if (p / "index.jsonl").is_file())


#: Request message type of every Plugin and Runtime method.
REQUEST_TYPES: dict[str, type[PbMessage]] = {
    "RegisterPlugin": api.RegisterPluginRequest,
    "UpdateContainers": api.UpdateContainersRequest,
    "Configure": api.ConfigureRequest,
    "Synchronize": api.SynchronizeRequest,
    "Shutdown": api.Empty,
    "StateChange": api.StateChangeEvent,
    "CreateContainer": api.CreateContainerRequest,
    "UpdateContainer": api.UpdateContainerRequest,
    "StopContainer": api.StopContainerRequest,
    "UpdatePodSandbox": api.UpdatePodSandboxRequest,
    "ValidateContainerAdjustment": api.ValidateContainerAdjustmentRequest,
    "RunPodSandbox": api.RunPodSandboxRequest,
    "StopPodSandbox": api.StopPodSandboxRequest,
    "RemovePodSandbox": api.RemovePodSandboxRequest,
    "PostUpdatePodSandbox": api.PostUpdatePodSandboxRequest,
    "PostCreateContainer": api.PostCreateContainerRequest,
    "StartContainer": api.StartContainerRequest,
    "PostStartContainer": api.PostStartContainerRequest,
    "PostUpdateContainer": api.PostUpdateContainerRequest,
    "RemoveContainer": api.RemoveContainerRequest,
}

#: Reply message type of every Plugin and Runtime method.
REPLY_TYPES: dict[str, type[PbMessage]] = {
    "RegisterPlugin": api.Empty,
    "UpdateContainers": api.UpdateContainersResponse,
    "Configure": api.ConfigureResponse,
    "Synchronize": api.SynchronizeResponse,
    "Shutdown": api.Empty,
    "StateChange": api.Empty,
    "CreateContainer": api.CreateContainerResponse,
    "UpdateContainer": api.UpdateContainerResponse,
    "StopContainer": api.StopContainerResponse,
    "UpdatePodSandbox": api.UpdatePodSandboxResponse,
    "ValidateContainerAdjustment": api.ValidateContainerAdjustmentResponse,
    "RunPodSandbox": api.RunPodSandboxResponse,
    "StopPodSandbox": api.StopPodSandboxResponse,
    "RemovePodSandbox": api.RemovePodSandboxResponse,
    "PostUpdatePodSandbox": api.PostUpdatePodSandboxResponse,
    "PostCreateContainer": api.PostCreateContainerResponse,
    "StartContainer": api.StartContainerResponse,
    "PostStartContainer": api.PostStartContainerResponse,
    "PostUpdateContainer": api.PostUpdateContainerResponse,
    "RemoveContainer": api.RemoveContainerResponse,
}


@dataclass(frozen=True)
class Frame:
    """One recorded mux frame and its ``index.jsonl`` entry."""

    n: int
    direction: str
    conn: int
    file: str
    raw: bytes
    index: dict[str, Any]


@dataclass(frozen=True)
class CapturedRequest:
    """A recorded ttrpc request with its decoded envelope and typed payload."""

    folder: str
    direction: str
    message: Message
    envelope: wire.Request
    payload: Any

    @property
    def method(self) -> str:
        return self.envelope.method


def frames(folder: str) -> list[Frame]:
    """The recorded frames of ``folder`` in recording order."""
    base = capture_dir() / folder
    out = []
    for line in (base / "index.jsonl").read_text().splitlines():
        entry = json.loads(line)
        raw = (base / entry["file"]).read_bytes()
        out.append(Frame(entry["n"], entry["dir"], entry["conn"], entry["file"], raw, entry))
    return out


def trunk_messages(folder: str, direction: str) -> list[Message]:
    """Decode the whole ``trunk-rx.bin`` or ``trunk-tx.bin`` of ``folder``."""
    data = (capture_dir() / folder / f"trunk-{direction}.bin").read_bytes()
    dec = MuxDecoder()
    msgs = dec.feed(data)
    if dec.buffered:
        raise ValueError(f"{folder}/trunk-{direction}.bin ends with {dec.buffered} stray bytes")
    return msgs


def requests(folder: str, direction: str = "rx") -> list[CapturedRequest]:
    """Every request in one direction of ``folder`` (rx: runtime to plugin) with typed payload."""
    out = []
    for msg in trunk_messages(folder, direction):
        if msg.type != TYPE_REQUEST:
            continue
        env = wire.Request.FromString(msg.data)
        payload = REQUEST_TYPES[env.method].FromString(env.payload)
        out.append(CapturedRequest(folder, direction, msg, env, payload))
    return out


def request(folder: str, method: str, nth: int = 0) -> Any:
    """The typed payload of the ``nth`` recorded ``method`` request in ``folder``."""
    found = [r.payload for r in requests(folder) if r.method == method]
    if len(found) <= nth:
        raise LookupError(f"{folder}: only {len(found)} recorded {method} requests, wanted #{nth}")
    return found[nth]


def unknown_field_paths(msg: PbMessage, path: str = "") -> list[str]:
    """Paths of every (sub)message carrying fields our protos do not define."""
    where = path or msg.DESCRIPTOR.name
    out = [where] if len(UnknownFieldSet(msg)) else []
    for fd, value in msg.ListFields():
        if fd.message_type is None:
            continue
        sub = f"{where}.{fd.name}"
        if fd.message_type.GetOptions().map_entry:
            if fd.message_type.fields_by_name["value"].message_type is not None:
                for key, item in value.items():
                    out += unknown_field_paths(item, f"{sub}[{key}]")
        elif fd.is_repeated:
            for i, item in enumerate(value):
                out += unknown_field_paths(item, f"{sub}[{i}]")
        else:
            out += unknown_field_paths(value, sub)
    return out
