"""API Pod objects to PodSpec: the manifest reader's rules, API-side adaptations, fuzzing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fakekube import api_pod, manifest_objects
from hypothesis import given, settings
from hypothesis import strategies as st

from nri_plrm.engine.spec import ContainerKind, PodSpec
from nri_plrm.podsource.convert import (
    MIRROR_ANNOTATION,
    PodObjectError,
    pod_key,
    pod_spec_from_api,
)
from nri_plrm.translate.manifest_to_pod import derived_uid, load_manifests

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.stem)
def test_api_objects_of_the_examples_equal_the_manifest_reading(path: Path) -> None:
    objects = manifest_objects(path.read_text(), "node-a", derived_uid)
    for obj in objects:
        del obj["kind"], obj["apiVersion"]  # list items carry neither
    assert [pod_spec_from_api(o) for o in objects] == load_manifests([path])


def test_list_item_without_kind_and_the_uid_kept() -> None:
    spec = pod_spec_from_api(api_pod("web", "node-a", namespace="shop", uid="u-1", cpu="2"))
    assert isinstance(spec, PodSpec)
    assert (spec.uid, spec.namespace, spec.name) == ("u-1", "shop", "web")
    assert spec.containers[0].requests == {"cpu": 2000, "memory": 1024**3}


def test_container_restart_fields_do_not_block_the_conversion() -> None:
    obj = api_pod("web", "node-a")
    obj["spec"]["containers"][0]["restartPolicy"] = "Never"
    obj["spec"]["containers"][0]["restartPolicyRules"] = [{"action": "Restart"}]
    obj["spec"]["initContainers"] = [{"name": "side", "restartPolicy": "Always"}]
    spec = pod_spec_from_api(obj)
    assert spec.containers[0].kind is ContainerKind.APP
    assert spec.init_containers[0].kind is ContainerKind.SIDECAR


def test_mirror_pod_is_keyed_by_the_static_pod_uid() -> None:
    obj = api_pod("etcd", "node-a", uid="mirror", annotations={MIRROR_ANNOTATION: "hash"})
    assert pod_key(obj) == "hash"
    assert pod_spec_from_api(obj).uid == "hash"


def test_errors_name_the_pod_field_value_and_rule() -> None:
    obj = api_pod("web", "node-a", namespace="shop", cpu="lots")
    with pytest.raises(PodObjectError) as err:
        pod_spec_from_api(obj)
    text = str(err.value)
    assert "pod shop/web" in text
    assert "spec.containers[0].resources.requests.cpu" in text
    assert "'lots'" in text
    missing = api_pod("web", "node-a")
    del missing["metadata"]["uid"]
    with pytest.raises(PodObjectError, match=r"metadata\.uid: missing"):
        pod_spec_from_api(missing)


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)
QUANTITY = st.one_of(
    st.sampled_from(["1", "500m", "2Gi", "-1", "1e3", "0.5", "lots", "", "1Ki", "9" * 30]),
    st.integers(-5, 10**12),
    st.floats(allow_nan=True, allow_infinity=True),
    JSON,
)
RESOURCES = st.dictionaries(
    st.sampled_from(["cpu", "memory", "hugepages-2Mi", "hugepages-x", "nvidia.com/gpu", "pods"]),
    QUANTITY,
    max_size=3,
)
CONTAINER = st.fixed_dictionaries(
    {"name": st.sampled_from(["a", "b", "c", "Bad_Name", ""])},
    optional={
        "resources": st.fixed_dictionaries(
            {}, optional={"requests": RESOURCES, "limits": RESOURCES, "claims": JSON}
        )
        | JSON,
        "restartPolicy": st.sampled_from(["Always", "Never", "OnFailure"]) | JSON,
    },
)
POD = st.fixed_dictionaries(
    {
        "metadata": st.fixed_dictionaries(
            {"name": st.sampled_from(["p", "web-1", "Bad"]), "uid": st.text(max_size=6)},
            optional={
                "namespace": st.sampled_from(["default", "ns", "BAD"]) | JSON,
                "annotations": st.dictionaries(
                    st.sampled_from([MIRROR_ANNOTATION, "x"]), st.text(max_size=4) | JSON
                ),
            },
        ),
        "spec": st.fixed_dictionaries(
            {"containers": st.lists(CONTAINER, max_size=3) | JSON},
            optional={
                "initContainers": st.lists(CONTAINER, max_size=3) | JSON,
                "resources": st.fixed_dictionaries(
                    {}, optional={"requests": RESOURCES, "limits": RESOURCES}
                )
                | JSON,
            },
        ),
    },
    optional={"kind": st.sampled_from(["Pod", "Node"]) | JSON, "apiVersion": JSON},
)


def _decode(obj: Any) -> None:
    try:
        spec = pod_spec_from_api(obj)
    except PodObjectError as exc:
        assert str(exc).startswith("pod ")
        return
    assert isinstance(spec, PodSpec)
    assert spec.uid == pod_key(obj) != ""
    assert spec.containers


@settings(max_examples=300, deadline=None)
@given(POD)
def test_fuzz_pod_shaped_objects_decode_or_fail_cleanly(obj: dict[str, Any]) -> None:
    _decode(obj)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(["metadata", "spec", "kind", "apiVersion"]), JSON))
def test_fuzz_arbitrary_objects_decode_or_fail_cleanly(obj: dict[str, Any]) -> None:
    _decode(obj)
