"""sd_notify protocol over real unix datagram sockets (filesystem and abstract)."""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nri_plrm.daemon import sdnotify
from nri_plrm.daemon.sdnotify import Notifier, NotifyError, encode


def _parse(datagram: bytes) -> dict[str, str]:
    text = datagram.decode()
    assert text.endswith("\n")
    return dict(line.split("=", 1) for line in text[:-1].split("\n"))


@pytest.fixture
def listener(tmp_path: Path) -> Iterator[tuple[str, socket.socket]]:
    path = str(tmp_path / "notify.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    sock.settimeout(5)
    yield path, sock
    sock.close()


@pytest.fixture
def abstract_listener() -> Iterator[tuple[str, socket.socket]]:
    name = f"nri-plrm-test-{uuid.uuid4().hex}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind("\0" + name)
    sock.settimeout(5)
    yield "@" + name, sock
    sock.close()


def test_ready_with_status_reaches_a_filesystem_socket(
    listener: tuple[str, socket.socket],
) -> None:
    path, sock = listener
    assert Notifier(path).ready("registered,\nsynchronized 3 containers")
    assert _parse(sock.recv(4096)) == {
        "READY": "1",
        "STATUS": "registered, synchronized 3 containers",
    }


def test_abstract_socket_with_at_prefix(abstract_listener: tuple[str, socket.socket]) -> None:
    name, sock = abstract_listener
    notifier = Notifier.from_environment({"NOTIFY_SOCKET": name})
    assert notifier.enabled
    assert notifier.stopping("SIGTERM")
    assert _parse(sock.recv(4096)) == {"STOPPING": "1", "STATUS": "SIGTERM"}


def test_status_and_reloading(listener: tuple[str, socket.socket]) -> None:
    path, sock = listener
    notifier = Notifier(path)
    assert notifier.status("waiting for /var/run/nri/nri.sock")
    assert _parse(sock.recv(4096)) == {"STATUS": "waiting for /var/run/nri/nri.sock"}
    assert notifier.reloading()
    fields = _parse(sock.recv(4096))
    assert fields["RELOADING"] == "1"
    assert int(fields["MONOTONIC_USEC"]) > 0


def test_without_notify_socket_everything_is_a_noop() -> None:
    notifier = Notifier.from_environment({})
    assert not notifier.enabled
    assert notifier.watchdog_interval is None
    assert not notifier.ready("x")
    assert not notifier.status("x")
    assert not notifier.stopping()
    assert not notifier.watchdog()


def test_module_functions_use_os_environ(
    listener: tuple[str, socket.socket], monkeypatch: pytest.MonkeyPatch
) -> None:
    path, sock = listener
    monkeypatch.setenv("NOTIFY_SOCKET", path)
    monkeypatch.delenv("WATCHDOG_USEC", raising=False)
    assert sdnotify.ready()
    assert _parse(sock.recv(4096)) == {"READY": "1"}
    assert sdnotify.notify({"X_CUSTOM": "a b"})
    assert _parse(sock.recv(4096)) == {"X_CUSTOM": "a b"}
    assert sdnotify.watchdog_interval() is None
    assert not sdnotify.watchdog()
    monkeypatch.delenv("NOTIFY_SOCKET")
    assert not sdnotify.status("gone")


def test_watchdog_only_when_usec_set_and_pid_matches(
    listener: tuple[str, socket.socket],
) -> None:
    path, sock = listener
    mine = Notifier.from_environment(
        {"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "3000000", "WATCHDOG_PID": str(os.getpid())}
    )
    assert mine.watchdog_interval == 3.0
    assert mine.watchdog()
    assert _parse(sock.recv(4096)) == {"WATCHDOG": "1"}
    other = Notifier.from_environment(
        {"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "3000000", "WATCHDOG_PID": "1"}
    )
    assert other.watchdog_interval is None
    assert not other.watchdog()


def test_unreachable_socket_is_logged_not_raised(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    missing = str(tmp_path / "absent.sock")
    assert not Notifier(missing).ready()
    assert "absent.sock" in caplog.text


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"NOTIFY_SOCKET": "relative/path"}, "NOTIFY_SOCKET: 'relative/path'"),
        ({"NOTIFY_SOCKET": "@"}, "NOTIFY_SOCKET: '@'"),
        ({"NOTIFY_SOCKET": "/run/a\0b"}, "must not contain a NUL"),
        ({"NOTIFY_SOCKET": "/x", "WATCHDOG_USEC": "soon"}, "WATCHDOG_USEC: 'soon'"),
        ({"NOTIFY_SOCKET": "/x", "WATCHDOG_USEC": "0"}, "WATCHDOG_USEC: 0"),
    ],
)
def test_bad_environment_is_named(env: dict[str, str], message: str) -> None:
    with pytest.raises(NotifyError, match=message.replace("(", r"\(")):
        Notifier.from_environment(env)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({}, "at least one"),
        ({"ready": "1"}, "notification key: 'ready'"),
        ({"STATUS": "a\nb"}, "must not contain a newline"),
    ],
)
def test_malformed_notifications_raise(fields: dict[str, str], message: str) -> None:
    with pytest.raises(NotifyError, match=message):
        encode(fields)


_KEY_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")
_keys = st.from_regex(r"[A-Z][A-Z0-9_]{0,15}", fullmatch=True)
_values = st.text(st.characters(blacklist_characters="\n\x00", codec="utf-8"), max_size=200)


@given(st.dictionaries(_keys, _values, min_size=1, max_size=6))
def test_encode_round_trips(fields: dict[str, str]) -> None:
    assert _parse(encode(fields)) == fields


@given(st.dictionaries(st.text(max_size=10), st.text(max_size=20), max_size=4))
def test_encode_accepts_only_well_formed_fields(fields: dict[str, str]) -> None:
    well_formed = bool(fields) and all(
        k and k[0].isascii() and k[0].isupper() and all(c in _KEY_CHARS for c in k) for k in fields
    )
    well_formed = well_formed and all("\n" not in v for v in fields.values())
    if well_formed:
        assert _parse(encode(fields)) == fields
    else:
        with pytest.raises(NotifyError):
            encode(fields)


@given(
    st.dictionaries(
        st.sampled_from(["NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"]),
        st.text(max_size=30),
    )
)
def test_any_environment_gives_a_notifier_or_a_named_error(env: dict[str, str]) -> None:
    try:
        notifier = Notifier.from_environment(env)
    except NotifyError as exc:
        assert str(exc).startswith(("NOTIFY_SOCKET:", "WATCHDOG_USEC:"))
        return
    assert notifier.enabled == bool(env.get("NOTIFY_SOCKET"))
    interval = notifier.watchdog_interval
    assert interval is None or interval > 0
