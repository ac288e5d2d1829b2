"""InFlight: start times of requests in progress, read from another thread."""

from __future__ import annotations

import threading
import time

from nri_plrm.nri.inflight import InFlight


def test_oldest_request_in_progress() -> None:
    inflight = InFlight()
    assert inflight.oldest() is None
    first = inflight.start(1, "Synchronize")
    inflight.start(2, "CreateContainer")
    assert inflight.oldest() == ("Synchronize", first)
    inflight.finish(1)
    oldest = inflight.oldest()
    assert oldest is not None and oldest[0] == "CreateContainer" and oldest[1] >= first
    inflight.finish(2)
    assert inflight.oldest() is None


def test_reads_from_another_thread_while_requests_come_and_go() -> None:
    inflight = InFlight()
    stop = threading.Event()
    seen: list[object] = []

    def reader() -> None:
        while not stop.is_set():
            seen.append(inflight.oldest())

    thread = threading.Thread(target=reader)
    thread.start()
    deadline = time.monotonic() + 0.2
    key = 0
    while time.monotonic() < deadline:
        key += 1
        inflight.start(key, "RunPodSandbox")
        inflight.finish(key)
    stop.set()
    thread.join()
    assert seen and all(s is None or s[0] == "RunPodSandbox" for s in seen)
