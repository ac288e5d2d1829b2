"""packaging/grafana/nri-plrm.json: well-formed, built only on the metric names and labels the code
registers, every documented metric on a panel (or its reason for none in docs/metrics.md), and
every panel explained in docs/operations.md (issue 31 item 5)."""

from __future__ import annotations

import json
import os
import re
import threading
from pathlib import Path
from typing import Any

from nri_plrm.checkpoint.store import CheckpointStore
from nri_plrm.daemon.hotplug.monitor import HotplugMonitor
from nri_plrm.observability.metrics import Metrics
from nri_plrm.topology.machines import load_topology
from nri_plrm.topology.synthetic import DEFAULT_SPEC

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "packaging" / "grafana" / "nri-plrm.json"
_METRIC = re.compile(r"\b([a-z_]+_[a-z_]+)(?=\{)")
_HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")


def load() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return data


def expressions(dashboard: dict[str, Any]) -> list[str]:
    return [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]


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
    exported = set(registered())
    used = {name for expr in expressions(load()) for name in _METRIC.findall(expr)}
    assert len(used) >= 20
    for name in sorted(used):
        base = family(name)
        assert name in exported, f"{name}: not registered by the code"
        assert f"`{base}`" in documented, f"{base}: not documented in docs/metrics.md"


def test_the_seed_metrics_have_panels() -> None:
    used = " ".join(expressions(load()))
    for name in (
        "resource_manager_allocations_total",
        "resource_manager_allocation_errors_total",
        "resource_manager_container_assignments",
    ):
        assert name + "{" in used, name


HISTOGRAMS = frozenset(f.name for f in Metrics().registry.collect() if f.type == "histogram")


def family(name: str) -> str:
    """The documented name of a sample name (a histogram's ``_bucket``/``_sum``/``_count``
    samples are documented under the histogram's name)."""
    for suffix in _HISTOGRAM_SUFFIXES:
        base = name.removesuffix(suffix)
        if base != name and base in HISTOGRAMS:
            return base
    return name


TARGET_LABELS = frozenset({"instance", "job"})
"""Labels Prometheus adds to every scraped series."""


def registered() -> dict[str, frozenset[str]]:
    """Every sample name the running plugin can expose (the Metrics registry plus the hotplug
    gauges registered on it once uevents can be received), with its label names."""
    metrics = Metrics()
    monitor = HotplugMonitor(lambda: [], load_topology(DEFAULT_SPEC), "/nonexistent")
    monitor.register(metrics.registry)
    out: dict[str, frozenset[str]] = {}
    for family in metrics.registry.collect():
        names = {family.name}
        if family.type == "counter":
            names.add(family.name + "_total")
        if family.type == "histogram":
            names.update(family.name + suffix for suffix in _HISTOGRAM_SUFFIXES)
        for name in names:
            out[name] = frozenset()
    for wrapper in vars(metrics).values():
        labelnames = getattr(wrapper, "_labelnames", None)  # prometheus-client's wrappers
        if labelnames is None:
            continue
        for family in wrapper.describe():
            for name in [n for n in out if n == family.name or n.startswith(family.name + "_")]:
                extra = {"le"} if name.endswith("_bucket") else set()
                out[name] = frozenset(labelnames) | extra
    return out


def _labels_used(expr: str) -> set[str]:
    used: set[str] = set()
    for group in re.findall(r"\bby \(([^)]*)\)", expr):
        used.update(label.strip() for label in group.split(",") if label.strip())
    for selector in re.findall(r"\{([^}]*)\}", expr):
        used.update(re.findall(r"(\w+)\s*(?:=~|!~|!=|=)", selector))
    return used


def test_every_query_uses_registered_names_and_labels() -> None:
    known = registered()
    assert "nri_plrm_cpus_offline" in known
    assert known["nri_plrm_kubernetes_events_total"] == {"result"}
    for expr in expressions(load()):
        names = _METRIC.findall(expr)
        assert names, expr
        labels: set[str] = set(TARGET_LABELS)
        for name in names:
            assert name in known, f"{name}: not registered by the code ({expr})"
            labels |= known[name]
        unknown = _labels_used(expr) - labels
        assert not unknown, f"{expr}: labels {sorted(unknown)} not on {names}"


def _documented_metrics() -> list[str]:
    text = (REPO / "docs" / "metrics.md").read_text()
    return re.findall(r"^\| `([a-z_]+)(?:\{[^`]*\})?` \|", text, flags=re.M)


def _no_panel_reasons() -> dict[str, str]:
    text = (REPO / "docs" / "metrics.md").read_text()
    section = text.split("\n### Metrics without a panel\n", 1)[1].split("\n#", 1)[0]
    return dict(re.findall(r"^- `([a-z_]+)`: (.+)$", section, flags=re.M))


def test_every_documented_metric_has_a_panel_or_a_stated_reason() -> None:
    documented = _documented_metrics()
    assert len(documented) >= 39
    used = {family(n) for e in expressions(load()) for n in _METRIC.findall(e)}
    reasons = _no_panel_reasons()
    for name in documented:
        if name in reasons:
            assert name not in used, f"{name}: has a panel; drop its reason in docs/metrics.md"
            assert len(reasons[name]) > 20, name
        else:
            assert name in used, f"{name}: no panel and no reason in docs/metrics.md"
    assert set(reasons) <= set(documented)


def test_checkpoint_latency_panel_and_doc_agree_that_fsyncs_are_excluded() -> None:
    (panel,) = [
        p
        for p in load()["panels"]
        if any(
            "nri_plrm_checkpoint_write_duration_seconds" in t["expr"] for t in p.get("targets", [])
        )
    ]
    assert "fsync in background" in panel["title"] and "with fsync" not in panel["title"]
    doc = (REPO / "docs" / "metrics.md").read_text()
    (row,) = [
        line for line in doc.splitlines() if "`nri_plrm_checkpoint_write_duration_seconds`" in line
    ]
    assert "not included" in row


def test_checkpoint_writes_leave_fsync_to_the_background(tmp_path: Path, monkeypatch: Any) -> None:
    """What the panel and the doc say: a checkpoint write returns before any fsync of it."""
    caller = threading.get_ident()
    synced_by_caller: list[int] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        if threading.get_ident() == caller:
            synced_by_caller.append(fd)
        real_fsync(fd)

    store = CheckpointStore(str(tmp_path / "state"))
    monkeypatch.setattr(os, "fsync", fsync)
    store.write(b'{"pods": {}}')
    assert synced_by_caller == []
    store.close()


def _panels_by_row() -> list[tuple[str, list[str]]]:
    rows: list[tuple[str, list[str]]] = []
    for panel in load()["panels"]:
        if panel["type"] == "row":
            rows.append((panel["title"], []))
        else:
            rows[-1][1].append(panel["title"])
    return rows


def test_operations_doc_reads_the_dashboard_panel_by_panel() -> None:
    text = (REPO / "docs" / "operations.md").read_text()
    section = text.split("\n## The dashboard, panel by panel\n", 1)[1].split("\n## ", 1)[0]
    assert "/usr/share/nri-plrm/grafana/nri-plrm.json" in section and "Import" in section
    documented: list[tuple[str, list[str]]] = []
    for heading, body in re.findall(r"^### ([^\n]+)\n(.*?)(?=^### |\Z)", section, re.M | re.S):
        documented.append((heading, re.findall(r"^- \*\*(.+?)\*\*", body, re.M)))
    assert documented == _panels_by_row()
