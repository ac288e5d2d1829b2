"""Metrics: names, labels and values as scraped over HTTP and parsed by prometheus-client."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from counted_steps import run_counted
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from static_view import StaticView

from nri_plrm.base.cpuset import CPUSet
from nri_plrm.engine.spec import (
    EMPTY_POD_SHARED_POOL_ERROR,
    TOPOLOGY_AFFINITY_ERROR,
    AssignmentType,
    ContainerAssignment,
    MemoryBlock,
)
from nri_plrm.ledger.view import ContainerView, PodView
from nri_plrm.observability import metrics_server as server_module
from nri_plrm.observability.metrics import Metrics
from nri_plrm.observability.metrics_server import MetricsServer, parse_address
from nri_plrm.topology.model import CPUInfo, Topology
from nri_plrm.util.steps import beside_loop

GI = 1024**3


@pytest.fixture
def server() -> Iterator[MetricsServer]:
    s = MetricsServer(Metrics(request_timeout=2.0), "127.0.0.1:0")
    s.start()
    yield s
    s.stop()


def fetch(server: MetricsServer, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}{path}", timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(text: str, name: str, **labels: str) -> float:
    return samples(text)[(name, frozenset(labels.items()))]


def test_seed_metric_names_and_labels(server: MetricsServer) -> None:
    m = server.metrics
    pod_exclusive = ContainerAssignment(
        AssignmentType.POD_EXCLUSIVE,
        CPUSet([1, 2]),
        CPUSet([0]),
        (MemoryBlock((0,), "memory", 2 * GI),),
    )
    m.record_placement(pod_exclusive)
    m.record_placement(ContainerAssignment(AssignmentType.POD_SHARED, CPUSet([3]), CPUSet()))
    node_exclusive = ContainerAssignment(AssignmentType.NODE_EXCLUSIVE, CPUSet([4]), CPUSet())
    m.record_placement(node_exclusive)
    m.record_placement(node_exclusive)
    m.record_placement_error(EMPTY_POD_SHARED_POOL_ERROR)
    m.record_admission(TOPOLOGY_AFFINITY_ERROR)
    m.record_admission(None)
    status, text = fetch(server, "/metrics")
    assert status == 200
    assert value(text, "resource_manager_allocations_total", resource_name="cpu", source="pod") == 2
    assert (
        value(text, "resource_manager_allocations_total", resource_name="cpu", source="node") == 2
    )
    assert (
        value(text, "resource_manager_allocations_total", resource_name="memory", source="pod") == 1
    )
    assert (
        value(text, "resource_manager_allocation_errors_total", resource_name="cpu", source="pod")
        == 1
    )
    assert (
        value(text, "resource_manager_allocation_errors_total", resource_name="cpu", source="node")
        == 0
    )
    assert value(text, "topology_manager_admission_requests_total") == 2
    assert (
        value(text, "topology_manager_admission_errors_total", reason="TopologyAffinityError") == 1
    )
    assert value(text, "resource_manager_pinning_requests_total", resource_name="cpu") == 5
    assert value(text, "resource_manager_pinning_requests_total", resource_name="memory") == 1
    assert value(text, "resource_manager_pinning_errors_total", resource_name="cpu") == 1
    names = {name for name, _ in samples(text)}
    assert "resource_manager_container_assignments" in names
    assert "resource_manager_allocations" not in names


def _machine() -> Topology:
    return Topology.build(
        [CPUInfo(c, c, 0, c // 4, 0) for c in range(8)], {0: {"memory": GI}, 1: {"memory": GI}}
    )


def test_view_derived_gauges(server: MetricsServer) -> None:
    def a(kind: AssignmentType, cpus: str) -> ContainerAssignment:
        return ContainerAssignment(kind, CPUSet.parse(cpus), CPUSet())

    pod = PodView(
        "u1",
        "ns",
        "p",
        (
            ContainerView("main", a(AssignmentType.POD_EXCLUSIVE, "4-5")),
            ContainerView("side1", a(AssignmentType.POD_SHARED, "6-7")),
            ContainerView("side2", a(AssignmentType.POD_SHARED, "6-7")),
        ),
        cpus=CPUSet.parse("4-7"),
    )
    classic = PodView(
        "u2",
        "ns",
        "q",
        (
            ContainerView("x", a(AssignmentType.NODE_EXCLUSIVE, "1")),
            ContainerView("y", a(AssignmentType.NODE_SHARED, "0,2-3")),
        ),
    )
    server.metrics.attach_view(StaticView((pod, classic)), _machine())
    _, text = fetch(server, "/metrics")
    ca = "resource_manager_container_assignments"
    assert value(text, ca, resource_name="cpu", assignment_type="pod_exclusive") == 1
    assert value(text, ca, resource_name="cpu", assignment_type="pod_shared") == 2
    assert value(text, ca, resource_name="cpu", assignment_type="node_exclusive") == 1
    assert value(text, "cpu_manager_shared_pool_size_millicores") == 3000
    assert value(text, "nri_plrm_pod_shared_pool_size_millicores") == 2000
    assert value(text, "nri_plrm_pod_shared_pools") == 1
    assert value(text, "cpu_manager_exclusive_cpu_allocation_count") == 5
    assert value(text, "cpu_manager_allocation_per_numa", numa_node="0") == 1
    assert value(text, "cpu_manager_allocation_per_numa", numa_node="1") == 4


def _two_pods() -> StaticView:
    def a(kind: AssignmentType, cpus: str) -> ContainerAssignment:
        return ContainerAssignment(kind, CPUSet.parse(cpus), CPUSet())

    pods = [
        PodView(
            f"u{n}",
            "ns",
            f"p{n}",
            (ContainerView("c", a(AssignmentType.NODE_EXCLUSIVE, str(n))),),
        )
        for n in range(2)
    ]
    return StaticView(tuple(pods))


def test_the_exposition_is_built_in_steps_that_give_the_whole_text() -> None:
    """One step per pod of the view and per metric family; the text is what
    ``generate_latest`` writes at once."""
    metrics = Metrics()
    metrics.attach_view(_two_pods(), _machine())
    metrics.on_request("CreateContainer", 0.001, ok=True)
    text, pieces = run_counted(metrics.exposition_steps())
    families = list(metrics.registry.collect())
    assert pieces == 2 + len(families)
    assert text == generate_latest(metrics.registry) == metrics.exposition()


def test_the_server_builds_the_exposition_beside_the_loop(
    server: MetricsServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs: list[int] = []

    def counted(steps: Any, *args: Any) -> Any:
        runs.append(1)
        return beside_loop(steps, *args)

    monkeypatch.setattr(server_module, "beside_loop", counted)
    server.metrics.attach_view(_two_pods(), _machine())
    status, text = fetch(server, "/metrics")
    assert status == 200 and value(text, "cpu_manager_exclusive_cpu_allocation_count") == 2
    assert runs == [1]


def test_healthz_follows_nri_state(server: MetricsServer) -> None:
    m = server.metrics
    assert fetch(server, "/healthz") == (503, "not connected to the runtime's NRI socket\n")
    m.on_connect()
    assert fetch(server, "/healthz") == (503, "connected to NRI, waiting for Synchronize\n")
    m.set_synchronized()
    assert fetch(server, "/healthz") == (200, "ok\n")
    m.on_disconnect()
    assert fetch(server, "/healthz")[0] == 503
    m.on_connect()
    m.set_synchronized()
    _, text = fetch(server, "/metrics")
    assert value(text, "nri_plrm_nri_reconnects_total") == 1
    assert value(text, "nri_plrm_nri_connected") == 1
    assert value(text, "nri_plrm_nri_synchronized") == 1


def test_unknown_path(server: MetricsServer) -> None:
    assert fetch(server, "/nope")[0] == 404


def test_request_latency_and_near_timeout(server: MetricsServer) -> None:
    m = server.metrics
    m.on_request("CreateContainer", 0.002, True)
    m.on_request("CreateContainer", 1.5, False)
    m.on_request("Synchronize", 0.9, True)
    _, text = fetch(server, "/metrics")
    assert value(text, "nri_plrm_nri_request_duration_seconds_count", event="CreateContainer") == 2
    assert (
        value(
            text,
            "nri_plrm_nri_request_duration_seconds_bucket",
            event="CreateContainer",
            le="0.0025",
        )
        == 1
    )
    assert value(text, "nri_plrm_nri_requests_near_timeout_total", event="CreateContainer") == 1
    assert (
        "nri_plrm_nri_requests_near_timeout_total",
        frozenset({("event", "Synchronize")}),
    ) not in (samples(text))
    assert value(text, "nri_plrm_nri_request_failures_total", event="CreateContainer") == 1


def test_state_metrics(server: MetricsServer) -> None:
    m = server.metrics
    m.record_checkpoint_write(0.001, ok=True)
    m.record_checkpoint_write(0.002, ok=False)
    m.record_corrupt_checkpoint("checksum-mismatch")
    for action in ("adopted", "corrected", "released"):
        m.record_reconcile(action)
    m.record_checkpoint_sync_failure()
    m.set_pod_cache_available(False)
    m.observe_podresources("List", "OK")
    _, text = fetch(server, "/metrics")
    assert value(text, "nri_plrm_checkpoint_writes_total") == 1
    assert value(text, "nri_plrm_checkpoint_write_failures_total") == 1
    assert value(text, "nri_plrm_checkpoint_write_duration_seconds_count") == 2
    assert value(text, "nri_plrm_checkpoint_corrupt_total", kind="checksum-mismatch") == 1
    assert value(text, "nri_plrm_checkpoint_corrupt_total", kind="journal") == 0
    assert value(text, "nri_plrm_checkpoint_sync_failures_total") == 1
    for action in ("adopted", "corrected", "released"):
        assert value(text, "nri_plrm_reconciled_containers_total", action=action) == 1
    assert value(text, "nri_plrm_pod_cache_available") == 0
    assert value(text, "nri_plrm_podresources_requests_total", method="List", code="OK") == 1
    assert value(text, "nri_plrm_build_info", version="0.1.0") == 1


def test_no_pod_name_labels(server: MetricsServer) -> None:
    _, text = fetch(server, "/metrics")
    labels = {k for _, ls in samples(text) for k, _ in ls}
    assert labels <= {
        "resource_name",
        "source",
        "assignment_type",
        "reason",
        "numa_node",
        "event",
        "le",
        "action",
        "method",
        "code",
        "version",
        "result",
        "kind",
    }


def test_bad_labels_are_refused() -> None:
    m = Metrics()
    with pytest.raises(ValueError, match="source='cluster'"):
        m.record_allocation("cpu", "cluster")
    with pytest.raises(ValueError, match="action='lost'"):
        m.record_reconcile("lost")


def test_parse_address() -> None:
    assert parse_address("127.0.0.1:9740") == ("127.0.0.1", 9740)
    assert parse_address("[::1]:9740") == ("::1", 9740)
    with pytest.raises(ValueError, match="host:port"):
        parse_address("9740")


def test_private_registries_do_not_clash() -> None:
    a, b = Metrics(), Metrics()
    a.record_allocation("cpu", "pod")
    assert b'source="pod"} 0.0' in b.exposition()


def test_all_interfaces_address() -> None:
    server = MetricsServer(Metrics(), ":0")
    server.start()
    try:
        assert fetch(server, "/healthz")[0] == 503
    finally:
        server.stop()
