"""Intent inference: NRI resources -> PodSpec/ContainerSpec (feature.md §8)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from seed_pods import pod_scope_mixed

from nri_plrm.engine.spec import ContainerSpec, PodSpec
from nri_plrm.proto import nri_api_pb2 as api
from nri_plrm.translate.nri_to_pod import (
    IntentError,
    PodMode,
    QOSClass,
    ResourceValues,
    container_spec,
    hugepage_resource,
    pod_intent,
)
from nri_plrm.translate.pod_to_cri import milli_cpu_to_quota as quota
from nri_plrm.translate.pod_to_cri import milli_cpu_to_shares as shares
from nri_plrm.translate.pod_to_cri import nri_container as container
from nri_plrm.translate.pod_to_cri import nri_pod_sandbox as sandbox

GI = 1 << 30
SEED_UID = "5eed0000-0000-4000-8000-000000000001"

POD_SCOPE_MIXED = pod_scope_mixed(SEED_UID, "plrm-tutorial")


def test_pod_scope_mixed_budget_and_containers() -> None:
    intent = pod_intent(sandbox(POD_SCOPE_MIXED))
    assert intent.mode is PodMode.BUDGET
    assert intent.qos is QOSClass.GUARANTEED
    assert intent.budget_cpus == 4
    assert intent.spec.requests == {"cpu": 4000, "memory": 4 * GI}
    assert intent.spec.limits == {"cpu": 4000, "memory": 4 * GI}
    assert (intent.spec.uid, intent.spec.namespace, intent.spec.name) == (
        SEED_UID,
        "plrm-tutorial",
        "pod-scope-mixed",
    )
    sidecar = container_spec(intent, container(POD_SCOPE_MIXED, POD_SCOPE_MIXED.init_containers[0]))
    assert sidecar == ContainerSpec("metrics-sidecar")
    main = container_spec(intent, container(POD_SCOPE_MIXED, POD_SCOPE_MIXED.containers[0]))
    assert main.requests == {"cpu": 2000, "memory": 2 * GI}
    assert main.limits == {"cpu": 2000, "memory": 2 * GI}


def test_capture_values_match_the_translation() -> None:
    """The recorded seed-pods CRI values (README of nri-capture): 4096 / 400000 / 100000 / 4Gi."""
    msg = sandbox(POD_SCOPE_MIXED)
    cpu = msg.linux.pod_resources.cpu
    assert (cpu.shares.value, cpu.quota.value, cpu.period.value) == (4096, 400000, 100000)
    assert msg.linux.pod_resources.memory.limit.value == 4 * GI


def test_best_effort_and_burstable_pods_are_classic() -> None:
    be = PodSpec(uid="be", containers=(ContainerSpec("c"),))
    intent = pod_intent(sandbox(be))
    assert (intent.mode, intent.qos, intent.budget_cpus) == (
        PodMode.CLASSIC,
        QOSClass.BEST_EFFORT,
        0,
    )
    assert intent.spec.requests is None
    burst = PodSpec(uid="b", containers=(ContainerSpec("c", requests={"cpu": 1000}),))
    assert pod_intent(sandbox(burst)).qos is QOSClass.BURSTABLE
    ctr = container_spec(pod_intent(sandbox(burst)), container(burst, burst.containers[0]))
    assert ctr.requests == {"cpu": 1000}
    assert ctr.limits == {}


def test_classic_guaranteed_integral_aggregate_is_a_budget() -> None:
    two = {"cpu": 2000, "memory": GI}
    pod = PodSpec(
        uid="g",
        containers=(
            ContainerSpec("a", requests=two, limits=two),
            ContainerSpec("b", requests=two, limits=two),
        ),
    )
    intent = pod_intent(sandbox(pod))
    assert intent.mode is PodMode.BUDGET
    assert intent.budget_cpus == 4
    assert container_spec(intent, container(pod, pod.containers[0])).requests == two


def test_classic_guaranteed_non_integral_aggregate_is_classic() -> None:
    half = {"cpu": 1500, "memory": GI}
    pod = PodSpec(uid="h", containers=(ContainerSpec("a", requests=half, limits=half),))
    intent = pod_intent(sandbox(pod))
    assert intent.qos is QOSClass.GUARANTEED
    assert intent.mode is PodMode.CLASSIC
    spec = container_spec(intent, container(pod, pod.containers[0]))
    assert spec.requests == half and spec.limits == half


def test_container_without_memory_limit_is_not_exclusive() -> None:
    values = ResourceValues(cpu_shares=2048, cpu_quota=200000, cpu_period=100000)
    assert values.integral_cpus == 2
    assert values.exclusive_cpus() == 0
    assert values.qos() is QOSClass.BURSTABLE


def test_unset_wrappers_and_missing_linux_read_as_zero() -> None:
    assert ResourceValues.from_nri(None) == ResourceValues()
    assert ResourceValues.from_nri(api.LinuxResources()) == ResourceValues()
    intent = pod_intent(api.PodSandbox(id="sb", name="p", namespace=""))
    assert intent.spec.uid == "sb" and intent.spec.namespace == "default"
    assert intent.qos is QOSClass.BEST_EFFORT


def test_hugepages() -> None:
    assert hugepage_resource("2MB") == "hugepages-2Mi"
    assert hugepage_resource("1GB") == "hugepages-1Gi"
    assert hugepage_resource("64KB") == "hugepages-64Ki"
    for bad in ("", "2Mi", "0MB", "MB", "2 MB"):
        with pytest.raises(IntentError, match="page_size"):
            hugepage_resource(bad)
    res = api.LinuxResources()
    res.cpu.shares.value = 2048
    res.cpu.quota.value = 200_000
    res.cpu.period.value = 100_000
    res.memory.limit.value = GI
    res.hugepage_limits.append(api.HugepageLimit(page_size="2MB", limit=4 << 20))
    res.hugepage_limits.append(api.HugepageLimit(page_size="1GB", limit=0))
    values = ResourceValues.from_nri(res)
    assert values.hugepage_limits == {"hugepages-2Mi": 4 << 20}
    requests, limits = values.requests_and_limits()
    assert requests["hugepages-2Mi"] == limits["hugepages-2Mi"] == 4 << 20


@given(st.integers(min_value=3, max_value=1_000_000))
def test_cpu_request_inverts_the_kubelet_shares(millis: int) -> None:
    values = ResourceValues(cpu_shares=shares(millis))
    if millis * 1024 // 1000 <= 262144:
        assert values.cpu_request_millis == millis


@given(st.integers(min_value=1, max_value=1_000_000), st.sampled_from([100_000, 50_000, 10_000]))
def test_cpu_limit_inverts_the_kubelet_quota(millis: int, period: int) -> None:
    values = ResourceValues(cpu_quota=quota(millis, period), cpu_period=period)
    if millis * period // 1000 >= 1000:
        assert values.cpu_limit_millis == millis


@given(st.integers(min_value=1, max_value=512))
def test_integral_cpus(n: int) -> None:
    values = ResourceValues(
        cpu_shares=n * 1024, cpu_quota=n * 100_000, cpu_period=100_000, memory_limit=GI
    )
    assert values.integral_cpus == n == values.exclusive_cpus()
    assert values.qos() is QOSClass.GUARANTEED
    off = ResourceValues(cpu_shares=n * 1024, cpu_quota=n * 100_000 + 1, cpu_period=100_000)
    assert off.integral_cpus == 0


_optional_u64 = st.one_of(st.none(), st.integers(min_value=0, max_value=2**64 - 1))
_optional_i64 = st.one_of(st.none(), st.integers(min_value=-(2**63), max_value=2**63 - 1))


@given(
    _optional_u64,
    _optional_i64,
    _optional_u64,
    _optional_i64,
    st.lists(st.tuples(st.text(max_size=8), st.integers(min_value=0, max_value=2**64 - 1))),
)
def test_fuzz_decoder_never_crashes_unexpectedly(
    shares_v: int | None,
    quota_v: int | None,
    period_v: int | None,
    limit_v: int | None,
    pages: list[tuple[str, int]],
) -> None:
    cpu = api.LinuxCPU()
    if shares_v is not None:
        cpu.shares.value = shares_v
    if quota_v is not None:
        cpu.quota.value = quota_v
    if period_v is not None:
        cpu.period.value = period_v
    res = api.LinuxResources(cpu=cpu)
    if limit_v is not None:
        res.memory.limit.value = limit_v
    for size, limit in pages:
        res.hugepage_limits.append(api.HugepageLimit(page_size=size, limit=limit))
    wire = api.LinuxResources.FromString(res.SerializeToString())
    try:
        values = ResourceValues.from_nri(wire)
    except IntentError as err:
        assert "page_size" in str(err)
        return
    assert values.cpu_request_millis >= 0
    assert values.cpu_limit_millis >= 0
    assert values.integral_cpus >= 0
    values.qos()
    values.requests_and_limits()
    pod = api.PodSandbox(id="x")
    pod.linux.pod_resources.CopyFrom(wire)
    intent = pod_intent(pod)
    ctr = api.Container(id="c", name="c")
    ctr.linux.resources.CopyFrom(wire)
    spec = container_spec(intent, ctr)
    assert spec.name == "c"


def test_quota_minus_one_is_read_back_as_the_exclusive_request() -> None:
    from nri_plrm.translate.nri_to_pod import container_resources

    ctr = api.Container(id="c", name="db")
    res = ctr.linux.resources
    res.cpu.shares.value = 6 * 1024
    res.cpu.quota.value = -1
    res.cpu.period.value = 100_000
    res.memory.limit.value = 12 * GI
    values = container_resources(ctr)
    assert values.exclusive_cpus() == 6
    res.cpu.shares.value = 1536
    assert container_resources(ctr).exclusive_cpus() == 0
    assert container_resources(api.Container(id="x")) == ResourceValues()
