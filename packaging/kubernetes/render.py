"""Render the Helm chart (packaging/helm/nri-plrm) with Helm's own template engine.

``python packaging/kubernetes/render.py`` rewrites ``packaging/kubernetes/nri-plrm.yaml``, the
plain manifest for ``kubectl apply``: the chart with its default values, release ``nri-plrm``
in namespace ``nri-plrm``, plus the Namespace; and ``noderesourcetopologies-crd.yaml``, the
chart's optional CRD (``crds/``), for clusters that lack it. ``--check`` only compares and
exits 1 when a file is stale. Rendering uses helm-python-sdk, which embeds the Helm SDK (no
helm binary).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import helm_python

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "packaging" / "helm" / "nri-plrm"
MANIFEST = REPO / "packaging" / "kubernetes" / "nri-plrm.yaml"
CRD_MANIFEST = REPO / "packaging" / "kubernetes" / "noderesourcetopologies-crd.yaml"
RELEASE = "nri-plrm"
NAMESPACE = "nri-plrm"
STATIC_VALUES: dict[str, Any] = {"namespace": {"create": True}, "managedBy": "kubectl"}

# The order kubectl should create things in (Helm's install order for these kinds).
_TEMPLATE_ORDER = [
    "namespace.yaml",
    "serviceaccount.yaml",
    "rbac.yaml",
    "configmap.yaml",
    "daemonset.yaml",
    "scheduler-extender.yaml",
]


def render(
    values: dict[str, Any] | None = None, *, name: str = RELEASE, namespace: str = NAMESPACE
) -> dict[str, str]:
    """The chart's rendered templates, ``{template file name: YAML text}``."""
    with helm_python.Chart.load(str(CHART)) as chart:
        rendered = chart.render(values or {}, name=name, namespace=namespace)
    return {path.rsplit("/", 1)[-1]: text for path, text in rendered.items()}


def static_manifest() -> str:
    """The text of packaging/kubernetes/nri-plrm.yaml."""
    templates = render(STATIC_VALUES)
    unknown = sorted(set(templates) - set(_TEMPLATE_ORDER) - {"_helpers.tpl"})
    if unknown:
        raise RuntimeError(f"chart templates {unknown}: not placed in the manifest order")
    header = (
        "# nri-plrm DaemonSet: kubectl apply -f packaging/kubernetes/nri-plrm.yaml\n"
        "# Generated from packaging/helm/nri-plrm (default values) by\n"
        "# packaging/kubernetes/render.py: edit the chart, then re-run it.\n"
    )
    documents = []
    for template in _TEMPLATE_ORDER:
        for document in templates.get(template, "").split("\n---\n"):
            body = "\n".join(line.rstrip() for line in document.strip("\n").splitlines()).strip(
                "\n"
            )
            if any(line and not line.startswith("#") for line in body.splitlines()):
                documents.append(body + "\n")
    return header + "---\n" + "---\n".join(documents)


def crd_manifest() -> str:
    """The text of packaging/kubernetes/noderesourcetopologies-crd.yaml."""
    with helm_python.Chart.load(str(CHART)) as chart:
        (crd,) = chart.crds
    header = (
        "# NodeResourceTopology CRD, only for clusters that lack it (NFD's topology-updater and\n"
        "# scheduler-plugins install the same API): kubectl create -f this file.\n"
        "# Copied from packaging/helm/nri-plrm/crds/ by packaging/kubernetes/render.py.\n"
    )
    return header + crd["data"]


def main(argv: list[str] | None = None) -> int:
    """Write (or with --check, verify) the plain manifests."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a file is stale")
    args = parser.parse_args(argv)
    outputs = {MANIFEST: static_manifest(), CRD_MANIFEST: crd_manifest()}
    if args.check:
        stale = [path for path, text in outputs.items() if path.read_text() != text]
        for path in stale:
            print(f"{path}: stale; run python {Path(__file__).name}", file=sys.stderr)
        return 1 if stale else 0
    for path, text in outputs.items():
        path.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
