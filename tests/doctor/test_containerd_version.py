"""containerd's version over its gRPC API: decoding, a daemon up, old, stopped, absent, silent."""

from __future__ import annotations

import socket
import stat
import time
from pathlib import Path

import pytest
from fakenode import containerd_api, encode_version_response
from pbwire import encode_varint

from nri_plrm.doctor.containerd_version import (
    WireError,
    check_version,
    decode_version_response,
    probe_version,
    version_triple,
)
from nri_plrm.doctor.result import Status


def test_decode_skips_unknown_fields() -> None:
    data = encode_version_response("v2.1.4", "abc")
    extra = bytes([3 << 3 | 0]) + encode_varint(300) + bytes([4 << 3 | 5]) + b"\0\0\0\0"
    assert decode_version_response(extra + data) == ("v2.1.4", "abc")
    assert decode_version_response(b"") == ("", "")


@pytest.mark.parametrize("data", [b"\x0a\x05v2", b"\x0a", b"\x0b\x00", b"\x0a\x02\xff\xfe"])
def test_decode_rejects_broken_bytes(data: bytes) -> None:
    with pytest.raises(WireError):
        decode_version_response(data)


@pytest.mark.parametrize(
    ("text", "triple"),
    [("v2.1.4", (2, 1, 4)), ("2.0.0-rc.1", (2, 0, 0)), ("1.7.27", (1, 7, 27)), ("dev", None)],
)
def test_version_triple(text: str, triple: tuple[int, int, int] | None) -> None:
    assert version_triple(text) == triple


def test_running_2x(tmp_path: Path) -> None:
    with containerd_api(str(tmp_path / "containerd.sock")) as path:
        found = probe_version(path)
    assert found.version == (2, 1, 4) and found.revision
    check = check_version(found)
    assert check.status is Status.OK and check.message == f"containerd 2.1.4 running ({path})"


def test_running_1x_fails(tmp_path: Path) -> None:
    with containerd_api(str(tmp_path / "containerd.sock"), "v1.7.27") as path:
        check = check_version(probe_version(path))
    assert check.status is Status.FAIL and "needs containerd 2.0 or later" in check.message


def test_not_installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    check = check_version(probe_version(str(tmp_path / "containerd.sock")))
    assert check.status is Status.FAIL
    assert check.message.startswith("containerd is not installed (no `containerd` on PATH)")
    assert "install containerd 2.0 or later" in check.fix


def test_installed_but_stopped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    binary = tmp_path / "bin" / "containerd"
    binary.parent.mkdir()
    binary.write_text("")  # looked up on PATH, never run
    binary.chmod(binary.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", str(binary.parent))
    check = check_version(probe_version(str(tmp_path / "containerd.sock")))
    assert check.status is Status.FAIL
    assert check.message.startswith(f"{binary} is installed but not running")
    assert "systemctl enable --now containerd" in check.fix


def test_not_a_socket(tmp_path: Path) -> None:
    path = tmp_path / "containerd.sock"
    path.write_text("")
    check = check_version(probe_version(str(path)))
    assert check.status is Status.FAIL and check.message.endswith(": not a socket")


def test_silent_socket_is_cut_off(tmp_path: Path) -> None:
    path = str(tmp_path / "silent.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(path)
        listener.listen(1)
        started = time.monotonic()
        check = check_version(probe_version(path, timeout=0.5))
        assert time.monotonic() - started < 5
    assert check.status is Status.FAIL and "Version: DEADLINE_EXCEEDED" in check.message
