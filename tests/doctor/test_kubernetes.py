"""doctor's Kubernetes checks: the kubeconfig, the API server within a deadline, this node's
Node object; against the fake API server (real HTTP on 127.0.0.1) run on its own thread."""

from __future__ import annotations

import asyncio
import dataclasses
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakekube import FakeKube, free_port, kubeconfig_text

from nri_plrm.config.settings import Config, KubernetesSettings
from nri_plrm.doctor.kubernetes import check_kubernetes
from nri_plrm.doctor.result import Check, Status

NODE = "worker-1"


def with_kubernetes(tmp_path: Path, kubeconfig: str | None, **settings: object) -> Config:
    """A config with the API enabled; ``kubeconfig`` None writes none and names a missing file."""
    path = str(tmp_path / "kubeconfig")
    if kubeconfig is not None:
        Path(path).write_text(kubeconfig)
    kube = KubernetesSettings(enabled=True, kubeconfig=path, node_name=NODE)
    return dataclasses.replace(
        Config(), kubernetes=dataclasses.replace(kube, **settings), source="/etc/x.toml"
    )


def by_name(checks: list[Check]) -> dict[str, Check]:
    assert all(c.area == "kubernetes" for c in checks)
    return {c.name: c for c in checks}


@pytest.fixture
def fake_kube() -> Iterator[FakeKube]:
    """The fake API server, serving from a loop on its own thread."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    fk = asyncio.run_coroutine_threadsafe(FakeKube().start(), loop).result(10)
    yield fk
    asyncio.run_coroutine_threadsafe(fk.stop(), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)
    loop.close()


def test_disabled_api_is_not_checked() -> None:
    assert check_kubernetes(Config()) == []


def test_missing_kubeconfig_fails_with_the_file_and_the_key(tmp_path: Path) -> None:
    (check,) = check_kubernetes(with_kubernetes(tmp_path, None))
    assert (check.name, check.status) == ("kubeconfig", Status.FAIL)
    assert check.message == (
        f"{tmp_path}/kubeconfig: cannot read the kubeconfig: No such file or directory"
    )
    assert "[kubernetes] kubeconfig in /etc/x.toml" in check.fix


def test_in_cluster_mode_outside_a_pod_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    in_cluster = KubernetesSettings(enabled=True, node_name=NODE)
    config = dataclasses.replace(Config(), kubernetes=in_cluster)
    (check,) = check_kubernetes(config, service_account_dir=str(tmp_path))
    assert (check.name, check.status) == ("kubeconfig", Status.FAIL)
    assert "KUBERNETES_SERVICE_HOST" in check.message


def test_reachable_api_with_this_node_is_ok(tmp_path: Path, fake_kube: FakeKube) -> None:
    fake_kube.add_node(NODE)
    checks = by_name(check_kubernetes(with_kubernetes(tmp_path, kubeconfig_text(fake_kube.url))))
    assert [c.status for c in checks.values()] == [Status.OK] * 3, checks
    assert checks["api"].message == f"{fake_kube.url}: reachable"
    assert checks["node"].message == f"Node {NODE!r} found"


def test_unknown_node_name_fails_the_node_check(tmp_path: Path, fake_kube: FakeKube) -> None:
    fake_kube.add_node("another-node")
    checks = by_name(check_kubernetes(with_kubernetes(tmp_path, kubeconfig_text(fake_kube.url))))
    assert checks["api"].status is Status.OK
    assert checks["node"].status is Status.FAIL
    assert checks["node"].message.startswith(f"no Node named {NODE!r} at {fake_kube.url}")
    assert "node_name" in checks["node"].fix


def test_refused_connection_fails_the_api_check(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    checks = by_name(check_kubernetes(with_kubernetes(tmp_path, kubeconfig_text(url))))
    assert checks["kubeconfig"].status is Status.OK
    assert checks["api"].status is Status.FAIL and "unreachable" in checks["api"].message
    assert "node" not in checks


def test_a_server_that_never_answers_fails_within_the_deadline(tmp_path: Path) -> None:
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)  # accepts connections, never answers
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        config = with_kubernetes(tmp_path, kubeconfig_text(url))
        started = time.monotonic()
        checks = by_name(check_kubernetes(config, timeout=0.3))
        assert time.monotonic() - started < 10
    assert checks["api"].status is Status.FAIL
    assert checks["api"].message.startswith(f"{url}: no answer within 0.3 s")
