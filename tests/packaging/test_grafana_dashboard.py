"""packaging/grafana/nri-plrm.json: well-formed, and built only on documented, exported metrics."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from nri_plrm.metrics import Metrics

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "packaging" / "grafana" / "nri-plrm.json"
_METRIC = re.compile(r"\b([a-z_]+_[a-z_]+)(?=\{)")
_HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")


def load() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return data


def expressions(dashboard: dict[str, Any]) -> list[str]:
    return [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]


def exported_names() -> set[str]:
    """Every sample name the plugin's registry exposes, even before any event."""
    metrics = Metrics()
    names: set[str] = set()
    for family in text_string_to_metric_families(metrics.exposition().decode()):
        names.add(family.name)
        if family.type == "counter":
            names.add(family.name + "_total")
        if family.type == "histogram":
            names.update(family.name + suffix for suffix in _HISTOGRAM_SUFFIXES)
    return names


def test_dashboard_structure() -> None:
    dashboard = load()
    assert dashboard["uid"] == "nri-plrm"
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for panel in dashboard["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24, panel["title"]
        if panel["type"] != "row":
            assert panel["targets"], panel["title"]
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    assert variables == {"datasource", "instance"}
    for expr in expressions(dashboard):
        assert 'instance=~"$instance"' in expr, expr
        assert expr.count("(") == expr.count(")"), expr


def test_every_metric_is_exported_and_documented() -> None:
    documented = (REPO / "docs" / "metrics.md").read_text()
    exported = exported_names()
    used = {name for expr in expressions(load()) for name in _METRIC.findall(expr)}
    assert len(used) >= 20
    for name in sorted(used):
        base = name.removesuffix("_bucket")
        assert name in exported, f"{name}: not exported by nri_plrm.metrics.Metrics"
        assert f"`{base}`" in documented, f"{base}: not documented in docs/metrics.md"


def test_the_seed_metrics_have_panels() -> None:
    used = " ".join(expressions(load()))
    for name in (
        "resource_manager_allocations_total",
        "resource_manager_allocation_errors_total",
        "resource_manager_container_assignments",
    ):
        assert name + "{" in used, name
