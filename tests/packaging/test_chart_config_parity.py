"""The chart, its values schema and packaging/config.toml against the plugin's configuration
schema (the dataclasses of nri_plrm.config.settings): every key of every table, generated from the
dataclasses, so a key added to the plugin fails here until the chart and the example carry it
(issue 31 item 2)."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from nri_plrm.config.file import parse_config
from nri_plrm.config.settings import Config

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

if os.environ.get("NRI_PLRM_REQUIRE_HELM") != "1":
    pytest.importorskip("helm_python", reason="helm-python-sdk renders the chart")

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "packaging" / "helm" / "nri-plrm"
EXAMPLE = REPO / "packaging" / "config.toml"

TOML_PATHS = {
    "topology_manager.prefer_closest_numa_nodes": (
        "topology_manager",
        "options",
        "prefer-closest-numa-nodes",
    ),
    "topology_manager.max_allowable_numa_nodes": (
        "topology_manager",
        "options",
        "max-allowable-numa-nodes",
    ),
}
"""Settings whose TOML key is not ``table.field`` (the kubelet's option names)."""

SAMPLES: dict[str, Any] = {
    "nri.plugin_index": "51",
    "pod_resources.mode": "0660",
    "pod_resources.group": "nri-plrm",
    "metrics.address": "0.0.0.0:9741",
    "log.level": "debug",
    "log.format": "json",
    "topology.kubepods_cgroup": "kubepods-alt",
    "kubernetes.node_name": "node-1",
    "topology_manager.policy": "restricted",
    "topology_manager.scope": "container",
    "topology_manager.kubelet_policy": "best-effort",
    "cpu_manager.reserved_cpus": "0-1",
    "cpu_manager.reserved_cpu_count": 2,
    "cpu_manager.options": {"full-pcpus-only": True},
    "memory_manager.reserved_memory": [
        {"numa_node": 0, "memory": "1Gi"},
        {"numa_node": 1, "memory": "256Mi", "hugepages-2Mi": "0"},
    ],
}
"""Non-default TOML values for the settings the type of their default cannot give one for; a
new setting with a rule of its own (a choice, a format) needs an entry here."""


def settings() -> list[tuple[str, object]]:
    """Every setting of the plugin as (``table.field``, default), from the dataclasses."""
    out: list[tuple[str, object]] = []
    for table in dataclasses.fields(Config):
        if table.name == "source":
            continue
        defaults = getattr(Config(), table.name)
        for key in dataclasses.fields(defaults):
            out.append((f"{table.name}.{key.name}", getattr(defaults, key.name)))
    return out


def toml_path(name: str) -> tuple[str, ...]:
    return TOML_PATHS.get(name, tuple(name.split(".")))


def sample(name: str, default: object) -> object:
    """A valid value for the setting ``name`` that differs from its default."""
    if name in SAMPLES:
        return SAMPLES[name]
    if isinstance(default, bool):
        return not default
    if isinstance(default, int):
        return default + 1
    if isinstance(default, float):
        return default * 2
    if isinstance(default, str):
        if default == "":
            return f"/alt/{name.replace('.', '/')}"
        return default + "-alt"
    raise AssertionError(f"{name}: default {default!r}: add a sample value to SAMPLES")


def every_key_set() -> dict[str, Any]:
    """The ``config`` values with every setting of the plugin set to a non-default value."""
    values: dict[str, Any] = {}
    for name, default in settings():
        *tables, key = toml_path(name)
        node = values
        for table in tables:
            node = node.setdefault(table, {})
        node[key] = sample(name, default)
    return values


def toml_text(values: dict[str, Any]) -> str:
    """``values`` as TOML (JSON scalars are TOML scalars; tables as inline tables)."""

    def value(v: Any) -> str:
        if isinstance(v, dict):
            return "{ " + ", ".join(f"{json.dumps(k)} = {value(x)}" for k, x in v.items()) + " }"
        if isinstance(v, list):
            return "[" + ", ".join(value(x) for x in v) + "]"
        return json.dumps(v)

    return "".join(
        f"[{table}]\n" + "".join(f"{json.dumps(k)} = {value(v)}\n" for k, v in keys.items())
        for table, keys in values.items()
    )


def _render(values: dict[str, Any]) -> str:
    spec = importlib.util.spec_from_file_location(
        "nri_plrm_render_parity", REPO / "packaging" / "kubernetes" / "render.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for doc in yaml.safe_load_all(module.render(values)["configmap.yaml"]):
        if doc:
            return str(doc["data"]["config.toml"])
    raise AssertionError("no ConfigMap rendered")


def test_the_sample_sets_every_setting_to_something_else() -> None:
    expected = parse_config(toml_text(every_key_set()), "sample").flat()
    defaults = Config().flat()
    assert set(expected) == {name for name, _ in settings()}
    same = sorted(k for k in defaults if expected[k] == defaults[k])
    assert not same, f"the sample leaves {same} at their defaults: fix SAMPLES"


def test_chart_renders_every_config_key_to_the_plugin() -> None:
    """Every setting, set through the chart's values, reaches the plugin's parsed config."""
    values = every_key_set()
    rendered = parse_config(_render({"config": values}), "configmap").flat()
    expected = parse_config(toml_text(values), "sample").flat()
    differ = {k: (rendered[k], expected[k]) for k in expected if rendered[k] != expected[k]}
    assert not differ, f"(rendered, set) differ: {differ}"


def test_schema_values_and_example_name_every_table() -> None:
    tables = {f.name for f in dataclasses.fields(Config) if f.name != "source"}
    schema = json.loads((CHART / "values.schema.json").read_text())
    assert set(schema["properties"]["config"]["properties"]) == tables
    assert set(yaml.safe_load((CHART / "values.yaml").read_text())["config"]) == tables
    assert set(tomllib.loads(EXAMPLE.read_text())) == tables


def _has(document: dict[str, Any], path: tuple[str, ...]) -> bool:
    node: Any = document
    for part in path:
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


@pytest.mark.parametrize("where", ["packaging/config.toml", "values.yaml"])
def test_every_key_is_written_out_with_its_default(where: str) -> None:
    """The example config and the chart's values carry every key (a key without a TOML default,
    such as reserved_cpu_count, in a comment); the example's values are the defaults."""
    if where == "values.yaml":
        text = (CHART / "values.yaml").read_text()
        document = yaml.safe_load(text)["config"]
    else:
        text = EXAMPLE.read_text()
        document = tomllib.loads(text)
        assert parse_config(text, where).flat() == Config().flat()
    for name, default in settings():
        path = toml_path(name)
        if default is None:
            assert f"{path[-1]}" in text, f"{where}: {name} not even mentioned"
        else:
            assert _has(document, path), f"{where}: {'.'.join(path)} missing"
