"""The pod cache against a hostile or broken API server (issue 28, findings 2 to 6): a huge list,
an endless ``continue``, a huge watch line, watches that end at once, pods the API does not
know at Synchronize. Timing figures live in ``bench/hostile_api.py``; these tests assert what
the cache does: pages asked for, steps that yield, caps enforced, refusals counted, the cache
degraded."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
from fakekube import FakeKube, api_pod, kubeconfig_text

from nri_plrm.checkpoint.store import CheckpointStore
from nri_plrm.config.file import parse_config
from nri_plrm.engine.facade import Engine
from nri_plrm.engine.spec import ContainerSpec, PodSpec
from nri_plrm.ledger import NodeLedger
from nri_plrm.observability.metrics import Metrics
from nri_plrm.plugin.handlers import Plugin
from nri_plrm.podsource import kube
from nri_plrm.podsource.client import load_kube_config, new_pod_api
from nri_plrm.podsource.kube import Backoff, KubePodCache
from nri_plrm.podsource.podapi import ApiLimits
from nri_plrm.topology.machines import MACHINES
from nri_plrm.translate.pod_to_cri import nri_pod_sandbox

NODE = "node-a"
LOGGER = "test.podsource.hostile"
MIB = 1 << 20


def sample(metrics: Metrics, name: str, **labels: str) -> float:
    return metrics.registry.get_sample_value(name, labels) or 0.0


def refusals(metrics: Metrics, reason: str) -> float:
    return sample(metrics, "nri_plrm_pod_cache_refusals_total", reason=reason)


async def eventually(check: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.01)


@contextlib.asynccontextmanager
async def cache_for(
    tmp_path: Path,
    fk: FakeKube,
    metrics: Metrics,
    *,
    limits: ApiLimits | None = None,
    backoff: Backoff | None = None,
) -> AsyncIterator[KubePodCache]:
    path = tmp_path / "kubeconfig"
    path.write_text(kubeconfig_text(fk.url))
    cache = KubePodCache(
        new_pod_api(load_kube_config(str(path)), limits),
        NODE,
        metrics=metrics,
        logger=logging.getLogger(LOGGER),
        server=fk.url,
        backoff=backoff or Backoff(0.01, 0.05),
    )
    cache.start()
    try:
        yield cache
    finally:
        await cache.stop()


def run(body: Callable[[FakeKube], Awaitable[None]]) -> None:
    async def main() -> None:
        fk = await FakeKube().start()
        try:
            await body(fk)
        finally:
            await fk.stop()

    asyncio.run(main())


def test_huge_list_is_asked_for_in_pages(tmp_path: Path) -> None:
    """Finding 2: 21,500 pods are asked for in pages of ``limit`` following ``continue`` (one
    answer of 8 MB was decoded and stored in one step)."""
    metrics = Metrics()

    async def body(fk: FakeKube) -> None:
        fk.fill(21_500, NODE)
        async with cache_for(tmp_path, fk, metrics) as cache:
            assert await cache.wait_synced(60)
            assert len(cache.specs()) == 21_500
        lists = fk.pod_requests(watch=False)
        assert [r.query.get("limit") for r in lists] == ["500"] * 43
        assert [r.query.get("continue", "") for r in lists[:3]] == ["", "500", "1000"]

    run(body)


def test_a_page_is_stored_in_steps_that_yield(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Finding 2: one page holding every pod (a server ignoring ``limit``) is decoded and stored
    in slices between which the event loop runs other tasks; with slices of no time at all, the
    loop turns at least once per pod."""
    metrics = Metrics()
    monkeypatch.setattr(kube, "SLICE", 0.0)
    turns = 0

    async def ticker() -> None:
        nonlocal turns
        while True:
            await asyncio.sleep(0)
            turns += 1

    async def body(fk: FakeKube) -> None:
        fk.fill(3_000, NODE)
        fk.ignore_limit = True
        async with cache_for(tmp_path, fk, metrics) as cache:
            task = asyncio.get_running_loop().create_task(ticker())
            assert await cache.wait_synced(60)
            task.cancel()
            assert len(cache.specs()) == 3_000
        assert len(fk.pod_requests(watch=False)) == 1
        assert turns >= 3_000, turns

    run(body)


def test_endless_continue_is_refused_at_the_page_cap(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Finding 3: an endless ``continue`` stops at ``max_pages``, is logged and counted, the
    cache decides from NRI data and lists again after a back-off, holding no pod of the
    refused lists."""
    metrics = Metrics()
    caplog.set_level(logging.INFO, logger=LOGGER)
    limits = ApiLimits(page_size=20, max_pages=5)

    async def body(fk: FakeKube) -> None:
        fk.endless_continue = True
        async with cache_for(tmp_path, fk, metrics, limits=limits) as cache:
            await eventually(lambda: refusals(metrics, "list_pages") >= 3)
            assert not cache.available
            assert sample(metrics, "nri_plrm_pod_cache_available") == 0
            assert cache.specs() == {}
            assert fk.pages_served <= 5 * (refusals(metrics, "list_pages") + 1)
            assert await cache.lookup("uid-x", "default", "x", 1.0) is None
            assert sample(metrics, "nri_plrm_pod_cache_fallbacks_total", reason="unavailable")
            fk.endless_continue = False
            fk.add(api_pod("real", NODE))
            await eventually(lambda: cache.available)
            assert set(cache.specs()) == {"uid-real"}
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert any("list_pages" in m and "after 5 pages" in m for m in warnings), warnings

    run(body)


def test_list_past_the_byte_cap_is_refused(tmp_path: Path) -> None:
    """Finding 3: a list larger than ``max_list_bytes`` is refused and counted."""
    metrics = Metrics()
    limits = ApiLimits(page_size=100, max_list_bytes=64 * 1024)

    async def body(fk: FakeKube) -> None:
        fk.fill(2_000, NODE)  # about 400 KB
        async with cache_for(tmp_path, fk, metrics, limits=limits) as cache:
            await eventually(lambda: refusals(metrics, "list_bytes") >= 2)
            assert not cache.available and cache.specs() == {}

    run(body)


def test_huge_watch_line_is_refused_unread(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Finding 4: a watch line past ``max_line_bytes`` is refused before it is held whole (the
    server could not even send most of it), counted, and the cache lists again."""
    metrics = Metrics()
    caplog.set_level(logging.INFO, logger=LOGGER)
    limits = ApiLimits(max_line_bytes=1 * MIB)

    async def body(fk: FakeKube) -> None:
        fk.add(api_pod("a", NODE))
        fk.watch_line_bytes = 300 * MIB
        async with cache_for(tmp_path, fk, metrics, limits=limits) as cache:
            await eventually(lambda: refusals(metrics, "watch_line") >= 2)
            assert len(fk.pod_requests(watch=False)) >= 2  # listed again after each
            assert "uid-huge" not in cache.specs() and "uid-a" in cache.specs()
            fk.watch_line_bytes = 0
            await eventually(lambda: fk.watch_count() == 1)
            fk.add(api_pod("b", NODE))
            await eventually(lambda: "uid-b" in cache.specs())
            assert cache.available
        assert fk.huge_bytes_sent < 300 * MIB // 4
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert any("watch_line" in m and str(MIB) in m for m in warnings), warnings

    run(body)


def test_watch_that_ends_at_once_is_reopened_after_a_back_off(tmp_path: Path) -> None:
    """Finding 5: watches that end without an event are reopened with a growing back-off (it
    was reopened at once, 100 times a second); a watch with events resets it."""
    metrics = Metrics()

    async def body(fk: FakeKube) -> None:
        fk.watch_ends_at_once = True
        async with cache_for(tmp_path, fk, metrics, backoff=Backoff(0.05, 0.4)) as cache:
            assert await cache.wait_synced(5)
            await asyncio.sleep(1.5)
            opened = len(fk.pod_requests(watch=True))
            assert 2 <= opened <= 30, opened
            assert cache.available
            fk.watch_ends_at_once = False
            await eventually(lambda: fk.watch_count() == 1, timeout=5)
            fk.add(api_pod("after", NODE))
            await eventually(lambda: "uid-after" in cache.specs())
        assert len(fk.pod_requests(watch=False)) == 1

    run(body)


def test_synchronize_waits_once_for_pods_the_api_does_not_know(tmp_path: Path) -> None:
    """Finding 6: four pods the API cache does not know (a wrong node name) cost one
    ``lookup_timeout`` in all, not one each (2 s, past containerd's deadline): the first
    lookup waits, the three others are made without waiting and counted."""
    metrics = Metrics()
    pods = [
        PodSpec(uid=f"unknown-{i}", name=f"unknown-{i}", containers=(ContainerSpec("c"),))
        for i in range(4)
    ]

    async def body(fk: FakeKube) -> None:
        async with cache_for(tmp_path, fk, metrics) as cache:
            assert await cache.wait_synced(5)
            engine = Engine(MACHINES["default"], parse_config("").engine_config())
            ledger = NodeLedger(engine, store=CheckpointStore(tmp_path / "state"))
            ledger.open()
            plugin = Plugin(ledger, pod_specs=cache, metrics=metrics, lookup_timeout=0.5)
            await plugin.synchronize([nri_pod_sandbox(p) for p in pods], [])
            assert all(plugin.ledger.pod(p.uid) is not None for p in pods)
            assert sample(metrics, "nri_plrm_pod_lookups_unwaited_total") == 3
            assert sample(metrics, "nri_plrm_pod_cache_fallbacks_total", reason="not_found") == 4

    run(body)
