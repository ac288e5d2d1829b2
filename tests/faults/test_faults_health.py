"""``/healthz`` and the systemd watchdog tell the truth (issue 12, finding 4).

Before the fix ``/healthz`` answered 200 while the event loop was stuck (a frozen state
filesystem, a blocking read) and the watchdog was fed regardless of stuck requests. The real
daemon runs in-process against ``nrisim``; a thread probes ``/healthz`` every 50 ms the way the
kubelet does and another receives the systemd notifications, so both keep observing while the
daemon's (and the test's) event loop is blocked.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from plrm_daemon import running_daemon

from nri_plrm.nri import events as ev
from nri_plrm.plugin.handlers import Plugin
from nri_plrm.proto import nri_api_pb2 as api

WATCHDOG_USEC = 300_000
"""systemd's WatchdogSec in the tests: 0.3 s, so the daemon pings every 0.15 s."""
BLOCK = 2.5
"""Seconds the blocking handler holds the event loop."""
POD = api.PodSandbox(id="sandbox-1", uid="uid-1", name="stuck", namespace="default")


@dataclass
class Probe:
    """``GET /healthz`` every 50 ms from a thread: (monotonic time, status, body)."""

    url: str
    seen: list[tuple[float, int, str]] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                with urllib.request.urlopen(self.url, timeout=5) as reply:
                    status, body = reply.status, reply.read().decode()
            except urllib.error.HTTPError as exc:
                status, body = exc.code, exc.read().decode()
            except OSError as exc:
                status, body = 0, str(exc)
            self.seen.append((time.monotonic(), status, body))
            time.sleep(0.05)

    def first(self, after: float, status: int) -> tuple[float, int, str]:
        for seen in self.seen:
            if seen[0] >= after and seen[1] == status:
                return seen
        answers = sorted({(s[1], s[2]) for s in self.seen if s[0] >= after})
        raise AssertionError(f"/healthz never answered {status}; it answered {answers}")

    async def wait_for(self, status: int, after: float = 0.0, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while not any(s[0] >= after and s[1] == status for s in self.seen):
            assert time.monotonic() < deadline, f"/healthz never {status}: {self.seen[-3:]}"
            await asyncio.sleep(0.05)


@dataclass
class Watchdog:
    """Receives the daemon's sd_notify datagrams; keeps the arrival times of ``WATCHDOG=1``."""

    sock: socket.socket
    pings: list[float] = field(default_factory=list)

    def run(self) -> None:
        while True:
            try:
                data = self.sock.recv(4096)
            except OSError:
                return
            if b"WATCHDOG=1" in data:
                self.pings.append(time.monotonic())

    def between(self, start: float, end: float) -> list[float]:
        return [t for t in self.pings if start <= t <= end]


@pytest.fixture
def watchdog(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Watchdog]:
    path = str(tmp_path / "notify.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    monkeypatch.setenv("NOTIFY_SOCKET", path)
    monkeypatch.setenv("WATCHDOG_USEC", str(WATCHDOG_USEC))
    monkeypatch.delenv("WATCHDOG_PID", raising=False)
    dog = Watchdog(sock)
    thread = threading.Thread(target=dog.run, daemon=True)
    thread.start()
    yield dog
    sock.shutdown(socket.SHUT_RDWR)
    sock.close()
    thread.join(5)


def start_probe(url: str) -> tuple[Probe, threading.Thread]:
    probe = Probe(url + "/healthz")
    thread = threading.Thread(target=probe.run, daemon=True)
    thread.start()
    return probe, thread


def test_stuck_event_loop_turns_healthz_503_and_stops_the_watchdog(
    tmp_path: Path, watchdog: Watchdog, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocked: list[float] = []

    def stuck_handler(self: Plugin, pod: api.PodSandbox) -> None:
        blocked.append(time.monotonic())
        time.sleep(BLOCK)  # what a frozen state filesystem does to a write on the loop
        blocked.append(time.monotonic())

    monkeypatch.setattr(Plugin, "run_pod_sandbox", stuck_handler)

    async def main() -> None:
        async with running_daemon(tmp_path / "node") as d:
            probe, thread = start_probe(d.metrics_url)
            try:
                await probe.wait_for(200)
                payload = api.RunPodSandboxRequest(pod=POD).SerializeToString()
                await d.sim.call_raw(ev.SERVICE_PLUGIN, "RunPodSandbox", payload, timeout=10)
                start, end = blocked
                await probe.wait_for(200, after=end)
                await asyncio.sleep(3 * WATCHDOG_USEC / 1e6)
            finally:
                probe.stop.set()
                thread.join(10)
            at, _, body = probe.first(start, 503)
            assert at - start <= 2.0, f"/healthz turned 503 only {at - start:.2f} s after"
            assert body.startswith("event loop stuck: no heartbeat for")
            assert all(s[1] == 200 for s in probe.seen if s[0] < start), "healthy before"
            assert watchdog.between(start + 0.3, end) == [], "watchdog fed by a stuck loop"
            assert watchdog.between(start - 1.0, start), "watchdog fed while healthy"
            assert watchdog.between(end, end + 1.0), "watchdog fed again after recovery"

    asyncio.run(main())


def test_request_over_the_runtime_budget_turns_healthz_503_and_stops_the_watchdog(
    tmp_path: Path, watchdog: Watchdog, monkeypatch: pytest.MonkeyPatch
) -> None:
    held: list[float] = []

    async def slow_handler(self: Plugin, pod: api.PodSandbox) -> None:
        held.append(time.monotonic())
        await asyncio.sleep(2.2)  # e.g. waiting on an executor write that never completes
        held.append(time.monotonic())

    monkeypatch.setattr(Plugin, "run_pod_sandbox", slow_handler)

    async def main() -> None:
        # containerd's plugin_request_timeout = 1 s, sent to the plugin in Configure
        async with running_daemon(tmp_path / "node", request_timeout=1.0) as d:
            probe, thread = start_probe(d.metrics_url)
            try:
                await probe.wait_for(200)
                payload = api.RunPodSandboxRequest(pod=POD).SerializeToString()
                await d.sim.call_raw(ev.SERVICE_PLUGIN, "RunPodSandbox", payload, timeout=10)
                start, end = held
                await probe.wait_for(200, after=end)
            finally:
                probe.stop.set()
                thread.join(10)
            at, _, body = probe.first(start, 503)
            assert 0.95 <= at - start <= 2.0, f"503 {at - start:.2f} s into the request"
            assert body.startswith("NRI RunPodSandbox in flight for"), body
            assert "over the runtime's 1 s request timeout" in body
            assert watchdog.between(start + 1.0 + 0.3, end) == [], "watchdog fed past budget"
            assert watchdog.between(start, start + 0.9), "watchdog fed within the budget"

    asyncio.run(main())


def test_unregistered_plugin_is_unhealthy_but_keeps_feeding_the_watchdog(
    tmp_path: Path, watchdog: Watchdog
) -> None:
    async def main() -> None:
        async with running_daemon(tmp_path / "node") as d:
            probe, thread = start_probe(d.metrics_url)
            try:
                await probe.wait_for(200)
                await d.sim.close()  # containerd gone: no socket to reconnect to
                gone = time.monotonic()
                await probe.wait_for(503, after=gone)
                await asyncio.sleep(0.5)
            finally:
                probe.stop.set()
                thread.join(10)
            _, _, body = probe.first(gone, 503)
            assert body == "not connected to the runtime's NRI socket\n"
            # the daemon itself is live: restarting it would not bring containerd back
            assert watchdog.between(gone + 0.2, gone + 0.5)

    asyncio.run(main())
