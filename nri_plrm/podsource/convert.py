"""A Pod object from the Kubernetes API to the ``PodSpec`` the engine decides on.

The conversion is the manifest reader's (``nri_plrm.translate.manifest_to_pod.pod_from_object``);
this module only adapts API objects to it: list items carry no ``kind``/``apiVersion``, fields that
do not change resource decisions but that the manifest reader refuses (a regular container's
``restartPolicy``, container restart rules) are dropped, and a static pod's mirror is keyed by the
uid the kubelet gives the real pod (the ``kubernetes.io/config.mirror`` annotation), which is the
uid the runtime reports in ``RunPodSandbox``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from nri_plrm.engine.spec import PodSpec
from nri_plrm.translate.manifest_to_pod import ManifestError, pod_from_object

MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
"""On a static pod's mirror: the uid of the static pod the kubelet runs."""
_RESTART_FIELDS = ("restartPolicy", "restartPolicyRules")


class PodObjectError(ValueError):
    """An API Pod object the cache cannot use: which pod, which field, the value and the rule."""


def pod_key(obj: Mapping[str, Any]) -> str:
    """The uid the runtime knows the pod by (the mirror annotation, else ``metadata.uid``);
    empty when the object has neither."""
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping):
        return ""
    annotations = meta.get("annotations")
    if isinstance(annotations, Mapping):
        mirror = annotations.get(MIRROR_ANNOTATION)
        if isinstance(mirror, str) and mirror:
            return mirror
    uid = meta.get("uid")
    return uid if isinstance(uid, str) else ""


def pod_spec_from_api(obj: Mapping[str, Any]) -> PodSpec:
    """The defaulted, validated ``PodSpec`` of one API Pod object; raises PodObjectError."""
    key = pod_key(obj)
    if not key:
        raise PodObjectError(f"pod object {_label(obj)}: metadata.uid: missing: a pod has a uid")
    doc = dict(obj)
    doc.setdefault("kind", "Pod")
    doc.setdefault("apiVersion", "v1")
    spec = doc.get("spec")
    if isinstance(spec, Mapping) and isinstance(spec.get("containers"), list):
        spec = dict(spec)
        spec["containers"] = [
            {k: v for k, v in c.items() if k not in _RESTART_FIELDS} if isinstance(c, dict) else c
            for c in spec["containers"]
        ]
        doc["spec"] = spec
    try:
        pod = pod_from_object(doc, f"pod {_label(obj)}", 0)
    except ManifestError as exc:
        raise PodObjectError(f"pod {_label(obj)}: {exc.path}: {exc.value!r}: {exc.rule}") from exc
    return pod if pod.uid == key else dataclasses.replace(pod, uid=key)


def _label(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping):
        return "?"
    return f"{meta.get('namespace', 'default')}/{meta.get('name', '?')}"
