"""The API pod cache against a real HTTP server speaking the list/watch protocol (fakekube)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
from fakekube import FakeKube, api_pod, free_port, kubeconfig_text
from hypothesis import given
from hypothesis import strategies as st

from nri_plrm.config.settings import KubernetesSettings
from nri_plrm.observability.metrics import Metrics
from nri_plrm.podsource.client import (
    KubeConfigError,
    load_kube_config,
    new_pod_api,
    node_name,
)
from nri_plrm.podsource.kube import Backoff, KubePodCache

NODE = "node-a"
LOGGER = "test.podsource.cache"


def fallbacks(metrics: Metrics, reason: str) -> float:
    value = metrics.registry.get_sample_value(
        "nri_plrm_pod_cache_fallbacks_total", {"reason": reason}
    )
    return value or 0.0


def gauge(metrics: Metrics) -> float | None:
    return metrics.registry.get_sample_value("nri_plrm_pod_cache_available")


async def eventually(check: Callable[[], bool], timeout: float = 5.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not check():
        if loop.time() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.01)


def watches_opened(fk: FakeKube, count: int) -> Callable[[], bool]:
    return lambda: len(fk.pod_requests(watch=True)) == count


@contextlib.asynccontextmanager
async def cache_for(
    tmp_path: Path,
    fk: FakeKube,
    metrics: Metrics | None = None,
    *,
    sync: bool = True,
    stable_watch: float = 10.0,
) -> AsyncIterator[KubePodCache]:
    path = tmp_path / "kubeconfig"
    path.write_text(kubeconfig_text(fk.url))
    cache = KubePodCache(
        new_pod_api(load_kube_config(str(path))),
        NODE,
        metrics=metrics,
        logger=logging.getLogger(LOGGER),
        server=fk.url,
        backoff=Backoff(0.01, 0.05),
        stable_watch=stable_watch,
    )
    cache.start()
    try:
        if sync:
            assert await cache.wait_synced(5)
        yield cache
    finally:
        await cache.stop()


def run(
    tmp_path: Path,
    body: Callable[[FakeKube], Awaitable[None]],
    *,
    start: bool = True,
) -> None:
    async def main() -> None:
        fk = FakeKube()
        if start:
            await fk.start()
        try:
            await body(fk)
        finally:
            await fk.stop()

    asyncio.run(main())


def test_initial_list_holds_only_this_nodes_pods(tmp_path: Path) -> None:
    metrics = Metrics()

    async def body(fk: FakeKube) -> None:
        fk.add(api_pod("mine", NODE))
        fk.add(api_pod("theirs", "node-b"))
        async with cache_for(tmp_path, fk, metrics) as cache:
            assert set(cache.specs()) == {"uid-mine"}
            assert cache.available
            assert gauge(metrics) == 1
            (listing,) = fk.pod_requests(watch=False)
            assert listing.query["fieldSelector"] == f"spec.nodeName={NODE}"
            assert cache.resource_version == str(fk.rv)
            spec = await cache.lookup("uid-mine", "default", "mine", 0.1)
            assert spec is not None and spec.containers[0].requests["cpu"] == 1000
            assert await cache.lookup("uid-theirs", "default", "theirs", 0.01) is None

    run(tmp_path, body)


def test_watch_add_modify_delete(tmp_path: Path) -> None:
    async def body(fk: FakeKube) -> None:
        async with cache_for(tmp_path, fk) as cache:
            listed = cache.resource_version
            await eventually(lambda: fk.watch_count() == 1)
            fk.add(api_pod("web", NODE, cpu="2", memory="2Gi"))
            fk.add(api_pod("elsewhere", "node-b"))
            await eventually(lambda: "uid-web" in cache.specs())
            assert cache.specs()["uid-web"].containers[0].limits["cpu"] == 2000
            fk.modify(api_pod("web", NODE, cpu="3", memory="2Gi"))
            await eventually(lambda: cache.specs()["uid-web"].containers[0].limits["cpu"] == 3000)
            deleted = fk.delete("default", "web")
            await eventually(lambda: "uid-web" not in cache.specs())
            assert "uid-elsewhere" not in cache.specs()
            assert cache.resource_version == deleted["metadata"]["resourceVersion"]
            (watch,) = fk.pod_requests(watch=True)
            assert watch.query["fieldSelector"] == f"spec.nodeName={NODE}"
            assert watch.query["resourceVersion"] == listed
            assert len(fk.pod_requests(watch=False)) == 1

    run(tmp_path, body)


def test_bookmark_advances_the_resource_version(tmp_path: Path) -> None:
    async def body(fk: FakeKube) -> None:
        async with cache_for(tmp_path, fk) as cache:
            await eventually(lambda: fk.watch_count() == 1)
            fk.bookmark()
            await eventually(lambda: cache.resource_version == str(fk.rv))
            assert cache.specs() == {}

    run(tmp_path, body)


def test_dropped_watch_resumes_from_the_last_resource_version(tmp_path: Path) -> None:
    metrics = Metrics()

    async def body(fk: FakeKube) -> None:
        async with cache_for(tmp_path, fk, metrics) as cache:
            await eventually(lambda: fk.watch_count() == 1)
            seen = fk.add(api_pod("first", NODE))["metadata"]["resourceVersion"]
            await eventually(lambda: "uid-first" in cache.specs())
            fk.drop_watches()
            fk.add(api_pod("during-drop", NODE))
            await eventually(lambda: "uid-during-drop" in cache.specs())
            watches = fk.pod_requests(watch=True)
            assert len(watches) == 2
            assert watches[1].query["resourceVersion"] == seen
            assert len(fk.pod_requests(watch=False)) == 1  # resumed, not relisted
            assert cache.available and gauge(metrics) == 1

    run(tmp_path, body)


def test_quiet_watches_cut_repeatedly_are_not_an_outage(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    metrics = Metrics()
    caplog.set_level(logging.DEBUG, logger=LOGGER)

    async def body(fk: FakeKube) -> None:
        async with cache_for(tmp_path, fk, metrics, stable_watch=0.05) as cache:
            for cut in range(1, 4):
                await eventually(lambda: fk.watch_count() == 1)
                await asyncio.sleep(0.1)  # a quiet watch, longer than stable_watch
                fk.drop_watches()
                await eventually(watches_opened(fk, cut + 1))
                assert cache.available
            assert gauge(metrics) == 1
        assert "unreachable" not in caplog.text
        assert caplog.text.count("request failed") == 3

    run(tmp_path, body)


def test_clean_end_of_watch_is_reopened_from_the_last_version(tmp_path: Path) -> None:
    async def body(fk: FakeKube) -> None:
        async with cache_for(tmp_path, fk) as cache:
            await eventually(lambda: fk.watch_count() == 1)
            seen = fk.add(api_pod("a", NODE))["metadata"]["resourceVersion"]
            await eventually(lambda: "uid-a" in cache.specs())
            fk.end_watches()
            await eventually(lambda: len(fk.pod_requests(watch=True)) == 2)
            assert fk.pod_requests(watch=True)[1].query["resourceVersion"] == seen
            fk.add(api_pod("b", NODE))
            await eventually(lambda: "uid-b" in cache.specs())

    run(tmp_path, body)


@pytest.mark.parametrize("as_event", [True, False], ids=["error-event", "http-status"])
def test_410_gone_relists_and_forgets_pods_deleted_meanwhile(
    tmp_path: Path, as_event: bool
) -> None:
    metrics = Metrics()

    async def body(fk: FakeKube) -> None:
        fk.gone_as_event = as_event
        fk.add(api_pod("stays", NODE))
        fk.add(api_pod("vanishes", NODE))
        async with cache_for(tmp_path, fk, metrics) as cache:
            await eventually(lambda: fk.watch_count() == 1)
            assert set(cache.specs()) == {"uid-stays", "uid-vanishes"}
            del fk.pods[("default", "vanishes")]  # its DELETED event was compacted away
            fk.add(api_pod("new", NODE))
            await eventually(lambda: "uid-new" in cache.specs())
            if as_event:
                fk.expire_watches()
            else:
                fk.compact()
                fk.drop_watches()
            await eventually(lambda: len(fk.pod_requests(watch=False)) == 2)
            await eventually(lambda: set(cache.specs()) == {"uid-stays", "uid-new"})
            assert cache.available
            relists = metrics.registry.get_sample_value("nri_plrm_pod_cache_relists_total")
            assert relists == 1
            await eventually(lambda: fk.watch_count() == 1)
            last = fk.pod_requests(watch=True)[-1]
            assert last.query["resourceVersion"] == cache.resource_version

    run(tmp_path, body)


def test_api_down_at_start_then_up(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    metrics = Metrics()
    caplog.set_level(logging.DEBUG, logger=LOGGER)

    async def body(fk: FakeKube) -> None:
        async with cache_for(tmp_path, fk, metrics, sync=False) as cache:
            await eventually(lambda: "unreachable" in caplog.text)
            await asyncio.sleep(0.2)  # several more retries
            assert not cache.available
            assert gauge(metrics) == 0
            assert await cache.lookup("uid-x", "default", "x", 1.0) is None
            assert fallbacks(metrics, "unavailable") == 1
            fk.add(api_pod("x", NODE))
            await fk.start()
            assert await cache.wait_synced(5)
            assert cache.available and gauge(metrics) == 1
            assert await cache.lookup("uid-x", "default", "x", 0.1) is not None
        warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
        assert len([m for m in warnings if "unreachable" in m]) == 1, warnings
        assert len([m for m in warnings if "reachable again" in m]) == 1, warnings
        failures = [r for r in caplog.records if "request failed" in r.getMessage()]
        assert failures and all(r.levelno == logging.DEBUG for r in failures)

    run(tmp_path, body, start=False)


def test_outage_after_sync_is_reported_once_and_recovers(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    metrics = Metrics()
    caplog.set_level(logging.INFO, logger=LOGGER)

    async def body(fk: FakeKube) -> None:
        fk.add(api_pod("a", NODE))
        async with cache_for(tmp_path, fk, metrics) as cache:
            await eventually(lambda: fk.watch_count() == 1)
            await fk.stop()
            await eventually(lambda: not cache.available)
            assert gauge(metrics) == 0
            await asyncio.sleep(0.2)
            fk.add(api_pod("b", NODE))
            await fk.start()
            await eventually(lambda: cache.available)
            await eventually(lambda: "uid-b" in cache.specs())
            assert gauge(metrics) == 1
        text = [r.getMessage() for r in caplog.records]
        assert len([m for m in text if "unreachable" in m]) == 1
        assert len([m for m in text if "reachable again" in m]) == 1

    run(tmp_path, body)


def test_lookup_waits_for_a_pod_not_seen_yet(tmp_path: Path) -> None:
    metrics = Metrics()

    async def body(fk: FakeKube) -> None:
        async with cache_for(tmp_path, fk, metrics) as cache:
            await eventually(lambda: fk.watch_count() == 1)
            waiting = asyncio.ensure_future(cache.lookup("uid-late", "default", "late", 5.0))
            await asyncio.sleep(0.05)
            assert not waiting.done()
            fk.add(api_pod("late", NODE))
            spec = await waiting
            assert spec is not None and spec.uid == "uid-late"
            assert fallbacks(metrics, "not_found") == 0

    run(tmp_path, body)


def test_lookup_times_out_and_counts_the_fallback(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    metrics = Metrics()
    caplog.set_level(logging.INFO, logger=LOGGER)

    async def body(fk: FakeKube) -> None:
        async with cache_for(tmp_path, fk, metrics) as cache:
            both = await asyncio.gather(
                cache.lookup("uid-never", "default", "never", 0.05),
                cache.lookup("uid-never", "default", "never", 0.05),
            )
            assert list(both) == [None, None]
            assert fallbacks(metrics, "not_found") == 2
            hints = [r for r in caplog.records if "kubernetes.node_name" in r.getMessage()]
            assert len(hints) == 1 and hints[0].levelno == logging.WARNING
            fk.add(api_pod("never", NODE))  # arrives after the lookups gave up
            await eventually(lambda: "uid-never" in cache.specs())
            assert await cache.lookup("uid-never", "default", "never", 0) is not None

    run(tmp_path, body)


def test_unusable_pod_object_falls_back_as_invalid(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    metrics = Metrics()
    caplog.set_level(logging.INFO, logger=LOGGER)

    async def body(fk: FakeKube) -> None:
        fk.add(api_pod("odd", NODE, cpu="lots"))
        async with cache_for(tmp_path, fk, metrics) as cache:
            assert await cache.lookup("uid-odd", "default", "odd", 1.0) is None
            assert fallbacks(metrics, "invalid") == 1
            assert any(
                "cpu" in r.getMessage() and "'lots'" in r.getMessage() for r in caplog.records
            )
            fk.modify(api_pod("odd", NODE, cpu="1"))
            await eventually(lambda: "uid-odd" in cache.specs())

    run(tmp_path, body)


def test_static_pod_mirror_is_found_by_the_runtime_uid(tmp_path: Path) -> None:
    async def body(fk: FakeKube) -> None:
        mirror = {"kubernetes.io/config.mirror": "static-hash"}
        fk.add(api_pod("etcd-node-a", NODE, uid="mirror-uid", annotations=mirror))
        async with cache_for(tmp_path, fk) as cache:
            spec = await cache.lookup("static-hash", "default", "etcd-node-a", 0.1)
            assert spec is not None and spec.uid == "static-hash"
            fk.delete("default", "etcd-node-a")
            await eventually(lambda: cache.specs() == {})

    run(tmp_path, body)


def test_kubeconfig_errors_name_the_source(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(KubeConfigError, match=r"kubernetes\.kubeconfig .*missing"):
        load_kube_config(str(tmp_path / "missing"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(KubeConfigError, match="KUBERNETES_SERVICE_HOST"):
        load_kube_config("")
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    with pytest.raises(KubeConfigError, match="automountServiceAccountToken"):
        load_kube_config("", str(tmp_path / "no-account"))


def test_in_cluster_config_uses_the_service_account(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    account = tmp_path / "sa"
    account.mkdir()
    (account / "token").write_text("sa-token")
    (account / "namespace").write_text("nri-plrm")
    (account / "ca.crt").write_text("")
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "fd00::1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "6443")
    config = load_kube_config("", str(account))
    current = config.get()
    assert current is not None
    assert current.cluster.server == "https://[fd00::1]:6443"
    assert current.user is not None and current.user.token == "sa-token"


def test_node_name_resolution(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NODE_NAME", "from-env")
    assert node_name(KubernetesSettings(node_name="configured")) == "configured"
    assert node_name(KubernetesSettings()) == "from-env"
    monkeypatch.delenv("NODE_NAME")
    assert node_name(KubernetesSettings())


def test_cache_needs_a_node_name(tmp_path: Path) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text(kubeconfig_text(f"http://127.0.0.1:{free_port()}"))
    with pytest.raises(ValueError, match="node_name"):
        KubePodCache(new_pod_api(load_kube_config(str(path))), "")


@given(
    initial=st.floats(0.001, 5),
    maximum=st.floats(0.01, 60),
    attempt=st.integers(1, 10_000),
    r=st.floats(0, 1),
)
def test_backoff_is_bounded(initial: float, maximum: float, attempt: int, r: float) -> None:
    backoff = Backoff(initial, max(initial, maximum))
    delay = backoff.delay(attempt, lambda: r)
    assert initial / 10 <= delay <= max(backoff.maximum, initial / 10)
    assert backoff.delay(attempt, lambda: 1.0) >= backoff.delay(max(1, attempt - 1), lambda: 1.0)
