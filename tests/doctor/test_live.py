"""doctor's probes of a running plugin: /healthz and the PodResources socket, up, down, hung."""

from __future__ import annotations

import dataclasses
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from static_view import StaticView

from nri_plrm.base.cpuset import CPUSet
from nri_plrm.config.settings import Config, MetricsSettings, PodResourcesSettings
from nri_plrm.doctor import live
from nri_plrm.doctor.result import Status
from nri_plrm.ledger.view import ContainerView, PodView
from nri_plrm.observability.metrics import Metrics
from nri_plrm.observability.metrics_server import MetricsServer
from nri_plrm.podresources.server import PodResourcesServer, PodResourcesService


def with_metrics(address: str) -> Config:
    return dataclasses.replace(Config(), metrics=MetricsSettings(address))


def with_pod_resources(**settings: object) -> Config:
    pr = dataclasses.replace(PodResourcesSettings(), **settings)
    return dataclasses.replace(Config(), pod_resources=pr)


@pytest.fixture
def healthz() -> Iterator[Callable[[bool, str], str]]:
    """Start the plugin's own metrics server with a given health; yields its address."""
    servers: list[MetricsServer] = []

    def start(healthy: bool, why: str) -> str:
        server = MetricsServer(Metrics(), "127.0.0.1:0", health=lambda: (healthy, why))
        server.start()
        servers.append(server)
        return f"127.0.0.1:{server.port}"

    yield start
    for server in servers:
        server.stop()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_registered_plugin(healthz: Callable[[bool, str], str]) -> None:
    check = live.check_healthz(with_metrics(healthz(True, "ok")))
    assert check.status is Status.OK and "200 ok" in check.message


def test_unsynchronized_plugin(healthz: Callable[[bool, str], str]) -> None:
    address = healthz(False, "connected to NRI, waiting for Synchronize")
    check = live.check_healthz(with_metrics(address))
    assert check.status is Status.FAIL
    assert check.message.endswith("503 connected to NRI, waiting for Synchronize")
    assert "journalctl -u nri-plrm" in check.fix


def test_plugin_down() -> None:
    check = live.check_healthz(with_metrics(f"127.0.0.1:{free_port()}"))
    assert check.status is Status.FAIL and "refused" in check.message
    assert "systemctl start nri-plrm" in check.fix


def test_hung_listener_is_cut_off() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        address = f"127.0.0.1:{listener.getsockname()[1]}"
        started = time.monotonic()
        check = live.check_healthz(with_metrics(address), timeout=0.3)
        assert time.monotonic() - started < 5
    assert check.status is Status.FAIL and "timed out" in check.message


def test_metrics_off_warns() -> None:
    check = live.check_healthz(with_metrics(""))
    assert check.status is Status.WARN and "[metrics] address" in check.fix


@pytest.fixture
def pod_resources(tmp_path: Path) -> Iterator[str]:
    view = StaticView(
        (PodView("u", "prod", "db", (ContainerView("main"),), CPUSet([2, 3])),),
        cpus=CPUSet(range(8)),
    )
    path = str(tmp_path / "pod-resources.sock")
    server = PodResourcesServer(PodResourcesService(view), path)
    server.start()
    try:
        yield path
    finally:
        server.stop(None)


def test_pod_resources_answers(pod_resources: str) -> None:
    (check,) = live.check_pod_resources(with_pod_resources(socket=pod_resources))
    assert check.status is Status.OK
    assert check.message == f"{pod_resources}: List answered (1 pods)"


def test_kubelet_socket_checked_too(pod_resources: str, tmp_path: Path) -> None:
    config = with_pod_resources(socket=pod_resources, kubelet_socket=str(tmp_path / "k.sock"))
    ours, kubelets = live.check_pod_resources(config)
    assert ours.status is Status.OK
    assert kubelets.name == "kubelet-pod-resources" and kubelets.status is Status.FAIL


def test_pod_resources_missing_or_not_a_socket(tmp_path: Path) -> None:
    path = tmp_path / "pod-resources.sock"
    (check,) = live.check_pod_resources(with_pod_resources(socket=str(path)))
    assert check.status is Status.FAIL and "no such socket" in check.message
    path.write_text("")
    (check,) = live.check_pod_resources(with_pod_resources(socket=str(path)))
    assert check.status is Status.FAIL and "not a socket" in check.message


def test_silent_socket_is_cut_off(tmp_path: Path) -> None:
    path = str(tmp_path / "silent.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(path)
        listener.listen(1)
        started = time.monotonic()
        (check,) = live.check_pod_resources(with_pod_resources(socket=path), timeout=0.5)
        assert time.monotonic() - started < 5
    assert check.status is Status.FAIL and "List failed: DEADLINE_EXCEEDED" in check.message


def test_pod_resources_disabled() -> None:
    (check,) = live.check_pod_resources(with_pod_resources(enabled=False))
    assert check.status is Status.OK and "enabled = false" in check.message
