"""The kubelet translation against the recorded CRI requests and NRI frames of the seed pods."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nrisim.capture import capture_dir

from nri_plrm.base.cpuset import CPUSet
from nri_plrm.engine.spec import (
    AssignmentType,
    ContainerAssignment,
    ContainerKind,
    ContainerSpec,
    PodSpec,
)
from nri_plrm.proto import nri_api_pb2 as api
from nri_plrm.translate.manifest_to_pod import load_manifests
from nri_plrm.translate.pod_to_cri import (
    CRIResources,
    assignment_update,
    assignment_updates,
    cgroup_parent,
    container_resources,
    creation_order,
    machine_page_sizes,
    milli_cpu_to_quota,
    milli_cpu_to_shares,
    nri_container,
    nri_pod_sandbox,
    page_size_name,
    pod_limits,
    pod_requests,
    qos_class,
    sandbox_resources,
)
from nri_plrm.ttrpc.codec import MuxDecoder
from nri_plrm.ttrpc.messages import decode_request

ROOT = Path(__file__).resolve().parents[2]
SEEDS = ["pod-scope-mixed", "empty-shared-pool", "container-scope-mixed"]
GI = 1 << 30


def _cri() -> Path:
    """The recorded CRI requests of the seed pods (skips the test when the capture is absent)."""
    return capture_dir() / "seed-pods" / "cri"


def _seed_pod(name: str) -> PodSpec:
    (pod,) = load_manifests([ROOT / "examples" / f"{name}.yaml"])
    meta = json.loads((_cri() / f"{name}.pod.json").read_text())["metadata"]
    return dataclasses.replace(pod, uid=meta["uid"], namespace=meta["namespace"])


@pytest.mark.parametrize("name", SEEDS)
def test_sandbox_matches_recorded_cri(name: str) -> None:
    pod = _seed_pod(name)
    recorded = json.loads((_cri() / f"{name}.pod.json").read_text())
    assert sandbox_resources(pod).to_cri_json() == recorded["linux"]["resources"]
    assert cgroup_parent(pod) == recorded["linux"]["cgroup_parent"]


@pytest.mark.parametrize("name", SEEDS)
def test_containers_match_recorded_cri(name: str) -> None:
    pod = _seed_pod(name)
    order = (_cri() / f"{name}.order").read_text().split()
    assert [c.name for c in creation_order(pod)] == order
    for c in creation_order(pod):
        recorded = json.loads((_cri() / f"{name}.{c.name}.ctr.json").read_text())
        assert container_resources(pod, c).to_cri_json() == recorded["linux"]["resources"], c.name


def _recorded_requests(folder: str) -> list[tuple[str, bytes]]:
    """(method, payload) of every runtime request; StateChange pod events become their event."""
    decoder = MuxDecoder()
    out = []
    for msg in decoder.feed((capture_dir() / folder / "trunk-rx.bin").read_bytes()):
        if msg.conn_id != 1 or msg.type != 1:
            continue
        req = decode_request(msg.data)
        if req.method == "StateChange":
            event = api.StateChangeEvent.FromString(req.payload)
            if event.event == api.RUN_POD_SANDBOX:
                payload = api.RunPodSandboxRequest(pod=event.pod).SerializeToString()
                out.append(("RunPodSandbox", payload))
            continue
        out.append((req.method, req.payload))
    return out


@pytest.mark.parametrize(
    ("folder", "seeds"),
    [
        ("seed-pods", SEEDS),
        ("seed-pods-containerd-2.1", ["pod-scope-mixed", "empty-shared-pool"]),
    ],
)
def test_nri_messages_match_recorded_frames(folder: str, seeds: list[str]) -> None:
    pods = {name: _seed_pod(name) for name in SEEDS}
    sandboxes = []
    created = []
    for method, payload in _recorded_requests(folder):
        if method == "RunPodSandbox":
            recorded = api.RunPodSandboxRequest.FromString(payload).pod
            ours = nri_pod_sandbox(pods[recorded.name])
            assert (ours.name, ours.uid, ours.namespace) == (
                recorded.name,
                recorded.uid,
                recorded.namespace,
            )
            assert ours.linux.pod_resources == recorded.linux.pod_resources
            assert ours.linux.cgroup_parent == recorded.linux.cgroup_parent
            assert ours.linux.cgroups_path == f"{ours.linux.cgroup_parent}/{ours.id}"
            assert recorded.linux.cgroups_path.startswith(recorded.linux.cgroup_parent + "/")
            for key in (
                "io.kubernetes.pod.name",
                "io.kubernetes.pod.namespace",
                "io.kubernetes.pod.uid",
                "io.cri-containerd.kind",
            ):
                assert ours.labels[key] == recorded.labels[key]
            for key, value in recorded.annotations.items():
                if key.startswith("io.kubernetes.cri.sandbox-") and not key.endswith("-id"):
                    assert ours.annotations[key] == value, key
            sandboxes.append(recorded.name)
        elif method == "CreateContainer":
            req = api.CreateContainerRequest.FromString(payload)
            pod = pods[req.pod.name]
            spec = pod.container(req.container.name)
            assert spec is not None
            ours = nri_container(pod, spec)
            assert ours.name == req.container.name
            assert ours.state == req.container.state
            assert ours.linux.resources == req.container.linux.resources, spec.name
            assert ours.pod_sandbox_id == nri_pod_sandbox(pod).id
            for key in ("io.kubernetes.container.name", "io.kubernetes.pod.uid"):
                assert ours.labels[key] == req.container.labels[key]
            for key in (
                "io.kubernetes.cri.container-name",
                "io.kubernetes.container.restartCount",
                "io.kubernetes.cri.sandbox-name",
                "io.kubernetes.cri.sandbox-uid",
            ):
                assert ours.annotations[key] == req.container.annotations[key]
            created.append((req.pod.name, req.container.name))
    assert sandboxes == seeds
    assert created == [(n, c.name) for n in seeds for c in creation_order(pods[n])]


def test_shares_and_quota_formulas() -> None:
    assert [milli_cpu_to_shares(m) for m in (0, 1, 2, 250, 1000, 4000, 10**6)] == [
        2,
        2,
        2,
        256,
        1024,
        4096,
        262144,
    ]
    assert [milli_cpu_to_quota(m) for m in (0, 1, 5, 10, 500, 4000)] == [
        0,
        1000,
        1000,
        1000,
        50000,
        400000,
    ]
    assert milli_cpu_to_quota(1500, 50_000) == 75_000


def test_page_sizes() -> None:
    assert page_size_name("hugepages-2Mi") == "2MB"
    assert page_size_name("hugepages-1Gi") == "1GB"
    assert page_size_name("hugepages-64Ki") == "64KB"
    assert machine_page_sizes(["memory", "hugepages-2Mi", "hugepages-1Gi"]) == (
        "hugepages-1Gi",
        "hugepages-2Mi",
    )


def _c(
    name: str,
    kind: ContainerKind = ContainerKind.APP,
    req: dict[str, int] | None = None,
    lim: dict[str, int] | None = None,
) -> ContainerSpec:
    return ContainerSpec(name, kind, req or {}, lim or {})


def test_classic_pod_aggregate_and_guaranteed() -> None:
    pod = PodSpec(
        uid="u1",
        name="classic",
        init_containers=(
            _c(
                "init", ContainerKind.INIT, {"cpu": 3000, "memory": GI}, {"cpu": 3000, "memory": GI}
            ),
        ),
        containers=(
            _c("web", req={"cpu": 2000, "memory": 2 * GI}, lim={"cpu": 2000, "memory": 2 * GI}),
            _c("cache", req={"cpu": 500, "memory": GI}, lim={"cpu": 500, "memory": GI}),
        ),
    )
    assert qos_class(pod) == "Guaranteed"
    assert pod_requests(pod) == {"cpu": 3000, "memory": 3 * GI}
    assert pod_limits(pod) == {"cpu": 3000, "memory": 3 * GI}
    assert sandbox_resources(pod) == CRIResources(100000, 300000, 3072, 3 * GI)
    assert cgroup_parent(pod) == "/kubepods/podu1"
    web = container_resources(pod, pod.containers[0], page_sizes=("hugepages-1Gi", "hugepages-2Mi"))
    assert web == CRIResources(100000, 200000, 2048, 2 * GI, (("1GB", 0), ("2MB", 0)))


def test_besteffort_and_burstable() -> None:
    be = PodSpec(uid="u2", containers=(_c("a"),))
    assert qos_class(be) == "BestEffort"
    assert cgroup_parent(be) == "/kubepods/besteffort/podu2"
    assert sandbox_resources(be) == CRIResources(100000, 0, 2, 0)
    ctr = nri_container(be, be.containers[0])
    assert not ctr.linux.resources.memory.HasField("limit")
    assert not ctr.linux.resources.cpu.HasField("quota")
    assert ctr.linux.resources.cpu.shares.value == 2
    bu = PodSpec(uid="u3", containers=(_c("a", req={"cpu": 250}),))
    assert qos_class(bu) == "Burstable"
    assert cgroup_parent(bu) == "/kubepods/burstable/podu3"
    assert sandbox_resources(bu) == CRIResources(100000, 0, 256, 0)
    limit_only = PodSpec(uid="u4", containers=(_c("a", lim={"cpu": 1500}),))
    assert sandbox_resources(limit_only).cpu_shares == 1536


def test_pod_level_inheritance_and_hugepages() -> None:
    pod = PodSpec(
        uid="u5",
        containers=(
            _c("shared"),
            _c("half", req={"cpu": 500}, lim={"cpu": 1000, "hugepages-2Mi": 4 << 20}),
        ),
        requests={"cpu": 4000, "memory": 4 * GI, "hugepages-2Mi": 8 << 20},
        limits={"cpu": 4000, "memory": 4 * GI, "hugepages-2Mi": 8 << 20},
    )
    sizes = ("hugepages-2Mi",)
    assert container_resources(pod, pod.containers[0], page_sizes=sizes) == CRIResources(
        100000, 400000, 4096, 4 * GI, (("2MB", 8 << 20),)
    )
    assert container_resources(pod, pod.containers[1], page_sizes=sizes) == CRIResources(
        100000, 100000, 512, 4 * GI, (("2MB", 4 << 20),)
    )
    ctr = nri_container(pod, pod.containers[0], page_sizes=sizes)
    assert [(h.page_size, h.limit) for h in ctr.linux.resources.hugepage_limits] == [
        ("2MB", 8 << 20)
    ]
    assert qos_class(pod) == "Guaranteed"
    burstable = dataclasses.replace(pod, requests={"cpu": 2000}, limits={"cpu": 4000})
    assert qos_class(burstable) == "Burstable"


@settings(max_examples=200, deadline=None)
@given(
    req=st.one_of(st.none(), st.integers(0, 64000)),
    lim=st.integers(0, 64000),
    mem=st.integers(0, 1 << 40),
)
def test_fuzz_container_translation_is_consistent(req: int | None, lim: int, mem: int) -> None:
    requests = {} if req is None else {"cpu": req}
    limits = {"cpu": lim, "memory": mem} if lim else {"memory": mem} if mem else {}
    pod = PodSpec(uid="f", containers=(_c("a", req=requests, lim=limits),))
    res = container_resources(pod, pod.containers[0])
    assert 2 <= res.cpu_shares <= 262144
    assert res.cpu_quota == 0 or res.cpu_quota >= 1000
    msg = nri_container(pod, pod.containers[0])
    back = api.Container.FromString(msg.SerializeToString())
    assert back.linux.resources.cpu.shares.value == res.cpu_shares
    assert back.linux.resources.memory.limit.value == res.memory_limit_in_bytes


def test_assignment_updates_equal_one_update_per_container() -> None:
    shared = ContainerAssignment(AssignmentType.NODE_SHARED, CPUSet.parse("0-3,8"), CPUSet())
    exclusive = ContainerAssignment(
        AssignmentType.NODE_EXCLUSIVE, CPUSet.parse("4-5"), CPUSet.parse("0")
    )
    targets = [("a", shared), ("b", exclusive), ("c", shared), ("d", dataclasses.replace(shared))]
    batch = assignment_updates(targets)
    assert [u.SerializeToString() for u in batch] == [
        assignment_update(cid, a).SerializeToString() for cid, a in targets
    ]
    batch[0].linux.resources.cpu.cpus = "9"
    assert batch[2].linux.resources.cpu.cpus == "0-3,8"
