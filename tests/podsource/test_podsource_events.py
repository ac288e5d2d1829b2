"""Pod Events posted to a real HTTP server (fakekube): content, dedupe, rate limit, failures."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime, timezone
from pathlib import Path

import pytest
from fakekube import FakeKube, kubeconfig_text

from nri_plrm.observability.metrics import Metrics
from nri_plrm.podsource.client import load_kube_config, new_client
from nri_plrm.podsource.events import (
    MAX_MESSAGE,
    EventRecorder,
    PodEvent,
    event_object,
)
from nri_plrm.util.ratelimit import TokenBucket

NODE = "node-a"
LOGGER = "test.podsource.events"
REASON = "TopologyAffinityError"
MESSAGE = "Pod Scope pod with pod-level resources failed admission under pod-scope topology manager"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def results(metrics: Metrics) -> dict[str, float]:
    out = {}
    for result in ("posted", "failed", "dropped", "deduplicated", "rate_limited"):
        value = metrics.registry.get_sample_value(
            "nri_plrm_kubernetes_events_total", {"result": result}
        )
        out[result] = value or 0.0
    return out


def run(
    tmp_path: Path,
    body: Callable[[FakeKube, EventRecorder], Awaitable[None]],
    metrics: Metrics,
    **options: object,
) -> None:
    async def main() -> None:
        fk = await FakeKube().start()
        path = tmp_path / "kubeconfig"
        path.write_text(kubeconfig_text(fk.url))
        client = new_client(load_kube_config(str(path)))
        recorder = EventRecorder(
            client,
            NODE,
            metrics=metrics,
            logger=logging.getLogger(LOGGER),
            **options,  # type: ignore[arg-type]
        )
        recorder.start()
        try:
            await body(fk, recorder)
        finally:
            await recorder.stop()
            await client.close()
            await fk.stop()

    asyncio.run(main())


def test_event_is_posted_on_the_pod(tmp_path: Path) -> None:
    metrics = Metrics()

    async def body(fk: FakeKube, rec: EventRecorder) -> None:
        rec.record("uid-1", "plrm-tutorial", "empty-shared-pool", REASON, MESSAGE)
        await rec.drain()
        (posted,) = fk.events
        (request,) = [r for r in fk.requests if r.method == "POST"]
        assert request.path == "/api/v1/namespaces/plrm-tutorial/events"
        assert posted["involvedObject"] == {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": "empty-shared-pool",
            "namespace": "plrm-tutorial",
            "uid": "uid-1",
        }
        assert (posted["reason"], posted["message"], posted["type"]) == (REASON, MESSAGE, "Warning")
        assert posted["source"] == {"component": "nri-plrm", "host": NODE}
        assert posted["metadata"]["name"].startswith("empty-shared-pool.")
        assert posted["count"] == 1
        rec.record("uid-1", "plrm-tutorial", "empty-shared-pool", REASON, "x" * (MAX_MESSAGE + 9))
        await rec.drain()
        assert fk.events[1]["message"] == "x" * MAX_MESSAGE

    run(tmp_path, body, metrics)
    assert results(metrics)["posted"] == 2


def test_identical_events_are_deduplicated(tmp_path: Path) -> None:
    metrics = Metrics()
    clock = Clock()

    async def body(fk: FakeKube, rec: EventRecorder) -> None:
        for _ in range(3):
            rec.record("uid-1", "ns", "p", REASON, MESSAGE)
        rec.record("uid-1", "ns", "p", REASON, MESSAGE + " (other)")
        rec.record("uid-2", "ns", "q", REASON, MESSAGE)
        await rec.drain()
        assert len(fk.events) == 3
        clock.now += 601  # past the window: the same event is news again
        rec.record("uid-1", "ns", "p", REASON, MESSAGE)
        await rec.drain()
        assert len(fk.events) == 4

    run(tmp_path, body, metrics, clock=clock, dedupe_window=600.0)
    assert results(metrics) == {
        "posted": 4,
        "failed": 0,
        "dropped": 0,
        "deduplicated": 2,
        "rate_limited": 0,
    }


def test_rate_limit_spends_a_token_bucket(tmp_path: Path) -> None:
    metrics = Metrics()
    clock = Clock()

    async def body(fk: FakeKube, rec: EventRecorder) -> None:
        for i in range(5):
            rec.record(f"uid-{i}", "ns", f"p{i}", REASON, MESSAGE)
        await rec.drain()
        assert [e["involvedObject"]["name"] for e in fk.events] == ["p0", "p1"]
        clock.now += 1.0  # one token back at 1/s
        rec.record("uid-9", "ns", "p9", REASON, MESSAGE)
        rec.record("uid-10", "ns", "p10", REASON, MESSAGE)
        await rec.drain()
        assert [e["involvedObject"]["name"] for e in fk.events] == ["p0", "p1", "p9"]

    run(tmp_path, body, metrics, clock=clock, rate=1.0, burst=2)
    assert results(metrics)["rate_limited"] == 4
    assert results(metrics)["posted"] == 3


def test_failed_posts_are_logged_and_counted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    metrics = Metrics()
    caplog.set_level(logging.WARNING, logger=LOGGER)

    async def body(fk: FakeKube, rec: EventRecorder) -> None:
        fk.event_status = 403
        rec.record("uid-1", "ns", "p", REASON, MESSAGE)
        await rec.drain()
        assert fk.events == []
        fk.event_status = 201
        rec.record("uid-2", "ns", "q", REASON, MESSAGE)
        await rec.drain()
        assert len(fk.events) == 1

    run(tmp_path, body, metrics)
    assert results(metrics)["failed"] == 1 and results(metrics)["posted"] == 1
    (warning,) = [r.getMessage() for r in caplog.records]
    assert "TopologyAffinityError" in warning and "ns/p" in warning and "not posted" in warning


def test_record_never_waits_for_the_api(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A slow API server fills the bounded queue; further events are dropped, not awaited."""
    metrics = Metrics()
    caplog.set_level(logging.WARNING, logger=LOGGER)

    async def body(fk: FakeKube, rec: EventRecorder) -> None:
        fk.event_delay = 0.2
        for i in range(6):
            rec.record(f"uid-{i}", "ns", f"p{i}", REASON, MESSAGE)
        counted = results(metrics)
        assert counted["dropped"] >= 3  # at most one posting plus a queue of two
        await rec.drain()
        assert len(fk.events) == 6 - counted["dropped"]

    run(tmp_path, body, metrics, queue_size=2)
    overflow = [r for r in caplog.records if "queue full" in r.getMessage()]
    assert len(overflow) == 1


def test_api_unreachable_counts_failures(tmp_path: Path) -> None:
    metrics = Metrics()

    async def body(fk: FakeKube, rec: EventRecorder) -> None:
        await fk.stop()
        rec.record("uid-1", "ns", "p", REASON, MESSAGE)
        await rec.drain()

    run(tmp_path, body, metrics)
    assert results(metrics)["failed"] == 1


def test_event_object_shape() -> None:
    when = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=timezone.utc)
    event = PodEvent("u", "ns", "pod", "R", "m", "Normal")
    obj = event_object(event, "node-1", when)
    assert obj["metadata"]["name"] == f"pod.{int(when.timestamp() * 1_000_000) * 1000:x}"
    assert obj["firstTimestamp"] == obj["lastTimestamp"] == "2026-01-02T03:04:05Z"
    assert obj["type"] == "Normal"
    assert obj["reportingInstance"] == "node-1"


def test_token_bucket_rules() -> None:
    clock = Clock()
    bucket = TokenBucket(0.5, 1, clock)
    assert bucket.allow() and not bucket.allow()
    clock.now += 1.0
    assert not bucket.allow()
    clock.now += 1.0
    assert bucket.allow()
    with pytest.raises(ValueError, match="rate must be > 0"):
        TokenBucket(0, 1)
    with pytest.raises(ValueError, match="burst >= 1"):
        TokenBucket(1, 0)
