"""Pod manifests to PodSpec: the examples, defaulting, multi-document input and every error."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from seed_pods import pod_scope_mixed

from nri_plrm.engine.spec import ContainerKind, ContainerSpec
from nri_plrm.translate.manifest_to_pod import (
    ManifestError,
    aggregate_requests,
    derived_uid,
    load_manifests,
    parse_manifests,
)

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
GI = 1 << 30


def test_pod_scope_mixed_example() -> None:
    (pod,) = load_manifests([EXAMPLES / "pod-scope-mixed.yaml"])
    assert pod == pod_scope_mixed(derived_uid("plrm-tutorial", "pod-scope-mixed"), "plrm-tutorial")
    assert pod.has_pod_level_resources


def test_all_examples_parse() -> None:
    pods = load_manifests(sorted(EXAMPLES.glob("*.yaml")))
    names = [p.name for p in pods]
    assert names == [
        "besteffort",
        "classic-guaranteed",
        "container-scope-mixed",
        "empty-shared-pool",
        "ml-workload",
        "pod-scope-mixed",
        "tightly-coupled-database",
    ]
    classic = pods[1]
    assert classic.requests is None and classic.limits is None
    assert classic.init_containers[0].kind is ContainerKind.INIT
    assert classic.init_containers[0].requests == {"cpu": 2000, "memory": GI}
    assert pods[0].containers[0].requests == {} and pods[0].namespace == "default"


def test_multi_document_list_and_json() -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "a", "uid": "u-a"},
        "spec": {"containers": [{"name": "c"}]},
    }
    other = dict(pod, metadata={"name": "b", "namespace": "ns"})
    lst = {"apiVersion": "v1", "kind": "List", "items": [pod, other]}
    text = (
        "---\n" + json.dumps(lst) + "\n---\n\n---\n" + json.dumps(dict(pod, metadata={"name": "c"}))
    )
    pods = parse_manifests(text, "x.yaml")
    assert [(p.namespace, p.name, p.uid) for p in pods] == [
        ("default", "a", "u-a"),
        ("ns", "b", derived_uid("ns", "b")),
        ("default", "c", derived_uid("default", "c")),
    ]
    assert parse_manifests(json.dumps(pod), "p.json")[0].uid == "u-a"


def test_derived_uid_is_stable_and_distinct() -> None:
    assert derived_uid("a", "b") == derived_uid("a", "b")
    assert derived_uid("a", "b") != derived_uid("b", "a")


def _pod(spec: str, meta: str = "name: p") -> str:
    return f"apiVersion: v1\nkind: Pod\nmetadata:\n  {meta}\nspec:\n{spec}"


def _res(resources: str) -> str:
    """A pod with one container ``a`` whose resources are ``{resources``."""
    return _pod("  containers: [{name: a, resources: " + resources)


def test_limits_default_requests_for_containers_and_pod() -> None:
    text = _pod(
        "  resources:\n    limits: {cpu: 3, memory: 3Gi}\n"
        "  containers:\n  - name: a\n    resources:\n"
        "      limits: {cpu: 1500m, hugepages-2Mi: 4Mi}\n"
        "  - name: b\n    resources:\n"
        "      requests: {hugepages-2Mi: 2Mi}\n      limits: {hugepages-2Mi: 2Mi}\n"
    )
    (pod,) = parse_manifests(text)
    assert pod.containers[0].requests == {"cpu": 1500, "hugepages-2Mi": 4 << 20}
    assert pod.requests == {"cpu": 3000, "memory": 3 * GI, "hugepages-2Mi": 6 << 20}
    assert pod.limits == {"cpu": 3000, "memory": 3 * GI}


def test_aggregate_requests_with_sidecars_and_init() -> None:
    init = (
        ContainerSpec("s1", ContainerKind.SIDECAR, {"cpu": 1000}),
        ContainerSpec("i1", ContainerKind.INIT, {"cpu": 5000}),
        ContainerSpec("s2", ContainerKind.SIDECAR, {"cpu": 500}),
    )
    apps = (ContainerSpec("a", ContainerKind.APP, {"cpu": 2000, "memory": 10}),)
    assert aggregate_requests(init, apps) == {"cpu": 6000, "memory": 10}
    assert aggregate_requests((), apps, limits=True) == {}


def test_extended_resources_are_kept_as_device_counts() -> None:
    (pod,) = parse_manifests(
        _pod(
            "  containers:\n  - name: a\n    resources:\n"
            "      limits: {nvidia.com/gpu: 1, cpu: 1, ephemeral-storage: 1Gi}\n"
        )
    )
    assert pod.containers[0].limits == {"cpu": 1000, "nvidia.com/gpu": 1}
    assert pod.containers[0].requests == {"cpu": 1000, "nvidia.com/gpu": 1}
    for limits, rule in (
        ("{nvidia.com/gpu: 500m}", "whole number of devices"),
        ("{example.com/nic: -1}", "whole number of devices"),
    ):
        with pytest.raises(ManifestError, match=rule):
            parse_manifests(
                _pod(f"  containers:\n  - name: a\n    resources:\n      limits: {limits}\n")
            )
    with pytest.raises(ManifestError, match="request must equal the limit"):
        parse_manifests(
            _pod(
                "  containers:\n  - name: a\n    resources:\n"
                "      requests: {nvidia.com/gpu: 1}\n      limits: {nvidia.com/gpu: 2}\n"
            )
        )


C0 = "spec.containers[0].resources"
BAD = [
    ("[1, 2]", "(document)", "must be a Pod, or a kind: List with Pods in items"),
    ("42", "(document)", "must be a Pod object"),
    ("kind: Deployment\napiVersion: apps/v1", "kind", "must be Pod"),
    (
        "kind: Pod\napiVersion: v2\nmetadata: {name: a}\nspec: {containers: [{name: a}]}",
        "apiVersion",
        "must be v1",
    ),
    ("kind: Pod\nspec: {}", "metadata", "must be an object"),
    (_pod("  containers: [{name: a}]", "name: Bad_Name"), "metadata.name", "DNS subdomain"),
    (
        _pod("  containers: [{name: a}]", "{name: a, namespace: 'x y'}"),
        "metadata.namespace",
        "DNS label",
    ),
    (_pod("  containers: [{name: a}]", "{name: a, uid: ''}"), "metadata.uid", "non-empty"),
    ("kind: Pod\nmetadata: {name: a}\nspec: 3", "spec", "must be an object"),
    (_pod("  containers: []"), "spec.containers", "at least one container"),
    (
        _pod("  initContainers: {}\n  containers: [{name: a}]"),
        "spec.initContainers",
        "must be a list",
    ),
    (_pod("  containers: [3]"), "spec.containers[0]", "container object"),
    (_pod("  containers: [{name: A}]"), "spec.containers[0].name", "DNS label"),
    (
        _pod("  initContainers: [{name: a}]\n  containers: [{name: a}]"),
        "spec.containers[0].name",
        "duplicate",
    ),
    (
        _pod("  initContainers: [{name: i, restartPolicy: Never}]\n  containers: [{name: a}]"),
        "spec.initContainers[0].restartPolicy",
        "only Always",
    ),
    (
        _pod("  containers: [{name: a, restartPolicy: Always}]"),
        "spec.containers[0].restartPolicy",
        "only init",
    ),
    (
        _res("[]}]"),
        C0 + "",
        "requests and/or limits",
    ),
    (
        _res("{limit: {}}}]"),
        C0 + ".limit",
        "unknown field",
    ),
    (
        _res("{limits: [1]}}]"),
        C0 + ".limits",
        "map of resource",
    ),
    (
        _res("{limits: {cpu: 2x}}}]"),
        C0 + ".limits.cpu",
        "unknown suffix",
    ),
    (
        _res("{limits: {cpu: abc}}}]"),
        C0 + ".limits.cpu",
        "not a Kubernetes quantity",
    ),
    (
        _res("{limits: {cpu: true}}}]"),
        C0 + ".limits.cpu",
        "must be a quantity",
    ),
    (
        _res("{limits: {memory: -1}}}]"),
        C0 + ".limits.memory",
        "greater than or equal to 0",
    ),
    (
        _res("{limits: {hugepages-x: 1}}}]"),
        C0 + ".limits.hugepages-x",
        "hugepages-<size>",
    ),
    (
        _res("{requests: {cpu: 2}, limits: {cpu: 1}}}]"),
        C0 + ".requests.cpu",
        "less than or equal to the cpu limit 1000",
    ),
    (
        _pod(
            "  containers: [{name: a, resources: "
            "{requests: {hugepages-2Mi: 2Mi}, limits: {hugepages-2Mi: 4Mi}}}]"
        ),
        C0 + ".requests.hugepages-2Mi",
        "must equal limits",
    ),
    (
        _pod("  resources: {limits: {ephemeral-storage: 1Gi}}\n  containers: [{name: a}]"),
        "spec.resources.limits.ephemeral-storage",
        "only cpu, memory and hugepages",
    ),
    (
        _pod("  resources: {requests: {cpu: 2}, limits: {cpu: 1}}\n  containers: [{name: a}]"),
        "spec.resources.requests.cpu",
        "less than or equal to the cpu limit",
    ),
    (
        _pod(
            "  resources: {requests: {cpu: 1}}\n"
            "  containers: [{name: a, resources: {requests: {cpu: 2}}}]"
        ),
        "spec.resources.requests.cpu",
        "aggregate cpu request 2000",
    ),
    (
        _pod(
            "  resources: {limits: {cpu: 4}}\n"
            "  containers: [{name: a, resources: {requests: {cpu: 1}, limits: {cpu: 5}}}]"
        ),
        "spec.resources.limits.cpu",
        "container a's cpu limit 5000",
    ),
    ("kind: List\nitems: 3", "items", "must have an items list"),
    ("a: [unclosed", "(document)", "not YAML or JSON"),
]


@pytest.mark.parametrize(("text", "path", "rule"), BAD)
def test_bad_manifests(text: str, path: str, rule: str) -> None:
    with pytest.raises(ManifestError) as info:
        parse_manifests(text, "bad.yaml")
    err = info.value
    assert err.path == path
    assert rule in err.rule
    assert str(err).startswith("bad.yaml")
    assert path in str(err)


def test_error_names_document_index_and_list_item() -> None:
    good = _pod("  containers: [{name: a}]")
    bad_item = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "z"},
        "spec": {"containers": []},
    }
    text = good + "\n---\n" + json.dumps({"kind": "List", "items": [bad_item]})
    with pytest.raises(ManifestError) as info:
        parse_manifests(text, "f.yaml")
    assert info.value.index == 1
    assert info.value.path == "items[0].spec.containers"
    assert str(info.value).startswith("f.yaml: document 1: items[0].spec.containers: []")


def test_duplicates_across_documents() -> None:
    good = _pod("  containers: [{name: a}]")
    with pytest.raises(ManifestError, match="duplicate pod default/p"):
        parse_manifests(good + "\n---\n" + good)
    other = _pod("  containers: [{name: a}]", "{name: q, uid: same}")
    first = _pod("  containers: [{name: a}]", "{name: p, uid: same}")
    with pytest.raises(ManifestError, match="duplicate uid"):
        parse_manifests(first + "\n---\n" + other)


def test_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(ManifestError) as err:
        load_manifests([tmp_path / "missing.yaml"])
    assert str(err.value) == f"{tmp_path}/missing.yaml: no such manifest file"
    (tmp_path / "bin.yaml").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(ManifestError) as err:
        load_manifests([tmp_path / "bin.yaml"])
    assert str(err.value).startswith(f"{tmp_path}/bin.yaml: not UTF-8 text: ")


quantities = st.one_of(
    st.integers(-3, 10**6),
    st.sampled_from(["1", "500m", "2Gi", "1.5", "0", "1e3", "-1", "x", "", "1Z", "3Mi", ".5"]),
    st.text(max_size=6),
)
resource_names = st.sampled_from(
    ["cpu", "memory", "hugepages-2Mi", "hugepages-1Gi", "hugepages-", "gpu", "x/y"]
)
resources = st.dictionaries(
    st.sampled_from(["requests", "limits", "claims", "other"]),
    st.dictionaries(resource_names, quantities, max_size=3) | st.none() | st.integers(),
    max_size=2,
)
containers = st.lists(
    st.fixed_dictionaries(
        {"name": st.sampled_from(["a", "b", "c", "Bad", ""])},
        optional={
            "resources": resources,
            "restartPolicy": st.sampled_from(["Always", "Never", None]),
        },
    ),
    max_size=3,
)


@settings(max_examples=400, deadline=None)
@given(
    init=containers,
    apps=containers,
    pod_resources=resources | st.none(),
    name=st.sampled_from(["p", "P", "", "ok-name"]),
)
def test_fuzz_manifests_only_raise_manifest_errors(
    init: list[dict[str, object]],
    apps: list[dict[str, object]],
    pod_resources: object,
    name: str,
) -> None:
    spec: dict[str, object] = {"initContainers": init, "containers": apps}
    if pod_resources is not None:
        spec["resources"] = pod_resources
    doc = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}
    try:
        pods = parse_manifests(json.dumps(doc), "fuzz.json")
    except ManifestError as err:
        assert str(err).startswith("fuzz.json: document 0: ")
        return
    (pod,) = pods
    for c in pod.all_containers():
        for rname, amount in c.requests.items():
            assert amount >= 0
            assert rname not in c.limits or amount <= c.limits[rname]
    if pod.requests is not None and pod.limits is not None:
        for rname, amount in pod.requests.items():
            assert rname not in pod.limits or amount <= pod.limits[rname]


@settings(max_examples=300, deadline=None)
@given(text=st.text(max_size=200))
def test_fuzz_arbitrary_text(text: str) -> None:
    with contextlib.suppress(ManifestError):
        parse_manifests(text, "t")
