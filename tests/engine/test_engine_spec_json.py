"""The one JSON form of pod and container specs (engine snapshot, intents, decision journal)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nri_plrm.engine.spec import ContainerKind, ContainerSpec, PodSpec
from nri_plrm.engine.spec_json import (
    KeptForms,
    container_from_dict,
    container_to_dict,
    spec_from_dict,
    spec_to_dict,
)

_names = st.text(st.characters(codec="utf-8"), max_size=12)
_resources = st.dictionaries(
    st.sampled_from(["cpu", "memory", "hugepages-2Mi", "hugepages-1Gi"]),
    st.integers(min_value=0, max_value=2**62),
    max_size=4,
)
_containers = st.builds(
    ContainerSpec,
    name=_names,
    kind=st.sampled_from(list(ContainerKind)),
    requests=_resources,
    limits=_resources,
)
_pods = st.builds(
    PodSpec,
    uid=_names,
    namespace=_names,
    name=_names,
    init_containers=st.lists(_containers, max_size=3).map(tuple),
    containers=st.lists(_containers, max_size=3).map(tuple),
    requests=st.none() | _resources,
    limits=st.none() | _resources,
)


@settings(max_examples=150, deadline=None)
@given(_pods, st.sampled_from(["init_containers", "initContainers"]))
def test_pod_round_trips_through_json(pod: PodSpec, init_key: str) -> None:
    text = json.dumps(spec_to_dict(pod, init_key))
    assert spec_from_dict(json.loads(text), init_key) == pod


@settings(max_examples=100, deadline=None)
@given(_containers)
def test_container_round_trips_through_json(c: ContainerSpec) -> None:
    assert container_from_dict(json.loads(json.dumps(container_to_dict(c)))) == c


def test_init_containers_are_stored_under_the_key_given() -> None:
    pod = PodSpec(uid="u", init_containers=(ContainerSpec("i", kind=ContainerKind.INIT),))
    assert spec_to_dict(pod)["init_containers"][0]["name"] == "i"
    assert spec_to_dict(pod, "initContainers")["initContainers"][0]["kind"] == "init"
    assert spec_from_dict(spec_to_dict(pod, "initContainers")).init_containers == ()


def test_missing_optional_keys_take_defaults() -> None:
    pod = spec_from_dict({"uid": "u", "containers": [{"name": "c"}]})
    assert pod == PodSpec(uid="u", containers=(ContainerSpec("c"),))


@pytest.mark.parametrize(
    "data",
    [
        {"name": "c", "kind": "bogus"},
        {"name": "c", "requests": {"cpu": "two"}},
        {"kind": "app"},
    ],
)
def test_malformed_container_is_refused(data: dict[str, Any]) -> None:
    with pytest.raises((ValueError, KeyError)):
        container_from_dict(data)


def test_kept_forms_convert_an_object_once_while_snapshots_use_it() -> None:
    calls: list[str] = []

    def convert(c: ContainerSpec) -> dict[str, Any]:
        calls.append(c.name)
        return container_to_dict(c)

    forms = KeptForms()
    a, b = ContainerSpec("a"), ContainerSpec("b")
    first = forms.form(a, convert)
    forms.form(b, convert)
    forms.done()
    assert forms.form(a, convert) is first  # the same frozen object: its form is shared
    assert forms.form(ContainerSpec("a"), convert) == first  # an equal one is converted
    forms.done()  # b was not used by this snapshot: forgotten
    forms.form(b, convert)
    assert calls == ["a", "b", "a", "b"]
