"""containerd's version, asked of the running daemon over its gRPC API (never by starting a
program: the package starts none, docs/security.md).

``containerd.services.version.v1.Version/Version`` takes an empty request and answers
``VersionResponse{version = 1, revision = 2}`` (both strings). containerd listens on
``/run/containerd/containerd.sock`` unless ``[grpc] address`` says otherwise; the socket is
root-only.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
from dataclasses import dataclass
from typing import Any

import grpc

from nri_plrm.doctor.docs import doc_ref
from nri_plrm.doctor.result import Check, fail, ok, warn

AREA = "containerd"
DEFAULT_ADDRESS = "/run/containerd/containerd.sock"
VERSION_METHOD = "/containerd.services.version.v1.Version/Version"
VERSION_TIMEOUT = 3.0
"""Seconds the Version call may take."""
INSTALL = (
    "install containerd 2.0 or later (release tarball or your distribution's containerd 2.x "
    "package) and start it (`systemctl enable --now containerd`)"
)

_TRIPLE = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)")


class WireError(ValueError):
    """Bytes that are not a protobuf message of the expected shape."""


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        if pos >= len(data) or shift > 63:
            raise WireError(f"truncated or overlong varint at byte {pos}")
        byte = data[pos]
        value |= (byte & 0x7F) << shift
        pos += 1
        if not byte & 0x80:
            return value, pos
        shift += 7


def decode_version_response(data: bytes) -> tuple[str, str]:
    """(version, revision) of a serialized ``VersionResponse``; unknown fields are skipped."""
    fields: dict[int, str] = {}
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            _, pos = _varint(data, pos)
        elif wire == 1 or wire == 5:
            pos += 8 if wire == 1 else 4
        elif wire == 2:
            size, pos = _varint(data, pos)
            if pos + size > len(data):
                raise WireError(f"field {number}: {size} bytes past the end")
            if number in (1, 2):
                try:
                    fields[number] = data[pos : pos + size].decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise WireError(f"field {number}: not UTF-8") from exc
            pos += size
        else:
            raise WireError(f"field {number}: unsupported wire type {wire}")
        if pos > len(data):
            raise WireError("truncated message")
    return fields.get(1, ""), fields.get(2, "")


def version_triple(text: str) -> tuple[int, int, int] | None:
    """``(2, 1, 4)`` for ``"v2.1.4"`` (suffixes ignored); None when there is no x.y.z."""
    match = _TRIPLE.match(text.strip())
    return (int(match[1]), int(match[2]), int(match[3])) if match else None


@dataclass(frozen=True)
class ContainerdVersion:
    """What the daemon said: its version text and triple, or why it could not be asked."""

    address: str
    version: tuple[int, int, int] | None = None
    text: str = ""
    revision: str = ""
    error: str = ""
    binary: str | None = None
    """``containerd`` on PATH (looked up, never run), to tell "stopped" from "not installed"."""


def probe_version(address: str, timeout: float = VERSION_TIMEOUT) -> ContainerdVersion:
    """Ask the containerd listening on ``address`` for its version, with a timeout."""
    binary = shutil.which("containerd")
    try:
        mode = os.stat(address).st_mode
    except FileNotFoundError:
        return ContainerdVersion(address, error="no such socket", binary=binary)
    except OSError as exc:
        return ContainerdVersion(address, error=exc.strerror or str(exc), binary=binary)
    if not stat.S_ISSOCK(mode):
        return ContainerdVersion(address, error="not a socket", binary=binary)
    channel = grpc.insecure_channel(f"unix://{address}")
    try:
        call: Any = channel.unary_unary(
            VERSION_METHOD,
            request_serializer=lambda _: b"",
            response_deserializer=lambda data: data,
        )
        reply: bytes = call(None, timeout=timeout)
        text, revision = decode_version_response(reply)
    except grpc.RpcError as exc:
        return ContainerdVersion(
            address, error=f"Version: {exc.code().name}: {exc.details()}", binary=binary
        )
    except WireError as exc:
        return ContainerdVersion(address, error=f"Version reply: {exc}", binary=binary)
    finally:
        channel.close()
    return ContainerdVersion(address, version_triple(text), text, revision, binary=binary)


def check_version(found: ContainerdVersion) -> Check:
    """containerd runs and is 2.0 or later."""
    if found.error == "no such socket":
        if found.binary is None:
            return fail(
                AREA,
                "version",
                f"containerd is not installed (no `containerd` on PATH) and not running (no "
                f"socket at {found.address})",
                INSTALL,
            )
        return fail(
            AREA,
            "version",
            f"{found.binary} is installed but not running (no socket at {found.address})",
            "start it: `systemctl enable --now containerd` (or pass its socket with "
            "--containerd-socket)",
        )
    if found.error:
        return fail(
            AREA,
            "version",
            f"{found.address}: {found.error}",
            "run doctor as root (the socket is root-only), check `systemctl status containerd`",
        )
    if found.version is None:
        return warn(
            AREA,
            "version",
            f"{found.address}: version {found.text!r} has no x.y.z",
            "check `containerd --version`: nri-plrm needs containerd 2.0 or later",
        )
    text = ".".join(map(str, found.version))
    if found.version[0] < 2:
        return fail(
            AREA,
            "version",
            f"containerd {found.text}: nri-plrm needs containerd 2.0 or later",
            f"upgrade containerd to 2.0 or later ({doc_ref('install.md', 'requirements')})",
        )
    return ok(AREA, "version", f"containerd {text} running ({found.address})")
