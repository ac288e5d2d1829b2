"""Kubernetes Pod manifests (YAML or JSON, several documents, ``kind: List``) to ``PodSpec``.

Only what the resource managers need is read: identity, init containers (``restartPolicy:
Always`` makes a sidecar), containers, and container- and pod-level ``resources``. The API
server's defaulting that changes the managers' decisions is applied:

- a container limit without a request sets the request (``cpu``, ``memory``, ``hugepages-*``);
- pod-level (``.spec.resources``) with limits: a missing hugepage request defaults to the
  containers' aggregate request, any other missing request to the pod limit.

And the validation that protects them: quantities are non-negative, requests do not exceed
limits, pod-level resources name only ``cpu``, ``memory`` and ``hugepages-<size>`` and are not
below the containers' aggregate requests nor below any container's limit, container names are
unique DNS labels. A container's extended resources (a device plugin's, e.g. ``nvidia.com/gpu``)
are kept as whole counts whose request equals the limit, for the devices ``simulate``
allocates; other resources (``ephemeral-storage``) are checked as quantities and then ignored.

Every problem raises :class:`ManifestError` naming the file, the document index, the field
path, the value and the rule.
"""

from __future__ import annotations

import json
import re
import sys
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import IO, Any

import yaml

from nri_plrm.base.quantity import QuantityError, cpu_millis, memory_bytes, parse_quantity
from nri_plrm.engine.spec import (
    CPU,
    HUGEPAGES_PREFIX,
    ContainerKind,
    ContainerSpec,
    PodSpec,
    is_memory_resource,
)
from nri_plrm.util.bounded_file import STDIN_NAME, InputFileError, read_regular_file, read_stream

UID_NAMESPACE = uuid.UUID("6b1e1a36-5d2f-4c55-9a4e-6f1f2c0d7a10")
"""uuid5 namespace of the uids derived from ``<namespace>/<name>`` when a manifest has none."""

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
_Fail = Callable[[str, Any, str], "ManifestError"]

_HUGEPAGE_SIZE = re.compile(r"^hugepages-[0-9]+(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$")


MAX_BYTES = (1 << 63) - 1
"""Largest memory or hugepage quantity: the CRI/NRI limit fields are signed 64-bit."""
MAX_CPU_MILLIS = MAX_BYTES // 100
"""Largest CPU quantity: its CFS quota at the default 100 ms period must fit a signed 64-bit
field (``quota = millicores * 100``)."""
MAX_DEVICES = 1 << 16
"""Most devices of one extended resource a container may ask for."""


class ManifestError(ValueError):
    """A manifest that cannot be turned into a pod: where it is, what it holds, which rule."""

    def __init__(self, source: str, index: int | None, path: str, value: Any, rule: str) -> None:
        where = source if index is None else f"{source}: document {index}"
        shown = _show(value)
        super().__init__(f"{where}: {path}: {shown}: {rule}")
        self.source = source
        self.index = index
        self.path = path
        self.value = value
        self.rule = rule

    @classmethod
    def about_file(cls, source: str, rule: str) -> ManifestError:
        """A problem with the file as a whole: ``source: rule``."""
        err = cls(source, None, "", None, rule)
        err.args = (f"{source}: {rule}",)
        return err


class Described:
    """A value shown by its description rather than its content (lists, whole documents)."""

    def __init__(self, text: str) -> None:
        self.text = text


def _show(value: Any) -> str:
    if isinstance(value, Described):
        return value.text
    text = json.dumps(value, default=str) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


STDIN = "-"
"""The manifest path that means standard input."""

MAX_MANIFEST_BYTES = 16 * 1024 * 1024
"""The largest manifest file (or standard input) read: 16 MiB, ten times the API server's
largest object (1.5 MiB in etcd), so a List of many pods fits and ``/dev/zero`` does not."""

WORKLOAD_KINDS = ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "CronJob")
"""Kinds whose pods are a template: the hint names ``spec.template``."""


def derived_uid(namespace: str, name: str) -> str:
    """The deterministic uid given to a manifest without ``metadata.uid``."""
    return str(uuid.uuid5(UID_NAMESPACE, f"{namespace}/{name}"))


def load_manifests(paths: Iterable[str | Path], stdin: IO[Any] | None = None) -> list[PodSpec]:
    """Every pod of every file, in order; ``-`` reads ``stdin`` (default: the process's).

    Each file is read with :func:`nri_plrm.util.bounded_file.read_regular_file` (a regular file of
    at most :data:`MAX_MANIFEST_BYTES`), standard input up to the same limit. Raises
    ManifestError: a missing, unreadable, oversized or empty file, a directory, FIFO or device,
    ``-`` given twice, and pods whose namespace/name or uid repeats within or across files.
    """
    sources: list[tuple[str, str]] = []
    for path in paths:
        name = str(path)
        if name == STDIN:
            if any(source == STDIN_NAME for source, _ in sources):
                raise ManifestError.about_file(STDIN_NAME, "- given twice: stdin is read once")
            try:
                data = read_stream(stdin or sys.stdin, MAX_MANIFEST_BYTES, "manifest")
            except InputFileError as exc:
                raise ManifestError.about_file(STDIN_NAME, exc.problem) from exc
            sources.append((STDIN_NAME, _decode(STDIN_NAME, data)))
        else:
            sources.append((name, _read(Path(path))))
    return parse_sources(sources)


def _read(path: Path) -> str:
    try:
        data = read_regular_file(path, MAX_MANIFEST_BYTES, "manifest file")
    except InputFileError as exc:
        if exc.missing:
            raise ManifestError.about_file(str(path), "no such manifest file") from exc
        if path.is_dir():
            raise ManifestError.about_file(
                str(path), f"is a directory, not a manifest file (give its files: {path}/*.yaml)"
            ) from exc
        raise ManifestError.about_file(str(path), exc.problem) from exc
    return _decode(str(path), data)


def _decode(source: str, data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ManifestError.about_file(source, f"not UTF-8 text: {exc.reason}") from exc


def parse_sources(sources: Iterable[tuple[str, str]]) -> list[PodSpec]:
    """The pods of several (source name, text) manifests, in order; a source without a pod,
    and a namespace/name or uid that repeats in another source, raise ManifestError."""
    pods: list[PodSpec] = []
    names: dict[tuple[str, str], str] = {}
    uids: dict[str, str] = {}
    for source, text in sources:
        found = parse_manifests(text, source)
        if not found:
            raise ManifestError.about_file(source, "no Pod in it (empty, or only comments)")
        for pod in found:
            key = (pod.namespace, pod.name)
            if key in names:
                raise ManifestError(
                    source,
                    None,
                    "metadata.name",
                    pod.name,
                    f"duplicate pod {pod.namespace}/{pod.name} (first in {names[key]}): every "
                    "pod of one simulation needs its own namespace/name",
                )
            if pod.uid in uids:
                raise ManifestError(
                    source,
                    None,
                    "metadata.uid",
                    pod.uid,
                    f"duplicate uid (first in {uids[pod.uid]})",
                )
            names[key] = uids[pod.uid] = source
            pods.append(pod)
    return pods


def parse_manifests(text: str, source: str = "<input>") -> list[PodSpec]:
    """Every pod in one YAML or JSON text (multi-document YAML and ``kind: List`` accepted).

    Pods must have distinct namespace/name and uids; raises ManifestError otherwise.
    """
    pods: list[PodSpec] = []
    seen: dict[tuple[str, str], str] = {}
    uids: set[str] = set()
    for index, (path, doc) in enumerate_documents(text, source):
        pod = pod_from_object(doc, source, index, path)
        key = (pod.namespace, pod.name)
        if key in seen:
            raise ManifestError(
                source,
                index,
                f"{path}metadata.name",
                pod.name,
                f"duplicate pod {pod.namespace}/{pod.name} (first at {seen[key]})",
            )
        if pod.uid in uids:
            raise ManifestError(source, index, f"{path}metadata.uid", pod.uid, "duplicate uid")
        seen[key] = f"document {index}"
        uids.add(pod.uid)
        pods.append(pod)
    return pods


def enumerate_documents(text: str, source: str) -> Iterator[tuple[int, tuple[str, Any]]]:
    """(document index, (field path prefix, object)) for each pod object, ``List`` items
    flattened; empty documents are skipped."""
    try:
        documents = list(yaml.safe_load_all(text))
    except yaml.YAMLError as exc:
        raise ManifestError(
            source, None, "(document)", _mark(exc), f"not YAML or JSON: {exc}"
        ) from exc
    for index, doc in enumerate(documents):
        if doc is None:
            continue
        if isinstance(doc, dict) and doc.get("kind") == "List":
            items = doc.get("items")
            if not isinstance(items, list):
                raise ManifestError(source, index, "items", items, "a List must have an items list")
            for i, item in enumerate(items):
                yield index, (f"items[{i}].", item)
        else:
            yield index, ("", doc)


def _mark(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    return f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None else "?"


def pod_from_object(doc: Any, source: str, index: int, prefix: str = "") -> PodSpec:
    """One Pod object (already parsed) to a defaulted, validated PodSpec."""

    def fail(path: str, value: Any, rule: str) -> ManifestError:
        return ManifestError(source, index, prefix + path, value, rule)

    if isinstance(doc, list):
        kinds = ", ".join(sorted({str(d.get("kind")) for d in doc if isinstance(d, dict)}))
        shown = Described(
            f"a YAML list of {len(doc)} item{'s' * (len(doc) != 1)}"
            + (f" ({kinds})" if kinds else "")
        )
        raise fail("(document)", shown, "must be a Pod, or a kind: List with Pods in items")
    if not isinstance(doc, dict):
        raise fail("(document)", Described(type(doc).__name__), "must be a Pod object")
    kind = doc.get("kind")
    if kind in WORKLOAD_KINDS:
        raise fail("kind", kind, "must be Pod: simulate its spec.template as a Pod")
    if kind != "Pod":
        raise fail("kind", kind, "must be Pod (or a List of Pods)")
    api_version = doc.get("apiVersion", "v1")
    if api_version != "v1":
        raise fail("apiVersion", api_version, "must be v1")
    meta = doc.get("metadata")
    if not isinstance(meta, dict):
        raise fail("metadata", meta, "must be an object with a name")
    name = meta.get("name")
    if not isinstance(name, str) or not _DNS_SUBDOMAIN.match(name):
        raise fail("metadata.name", name, "must be a DNS subdomain (lowercase a-z, 0-9, -, .)")
    namespace = meta.get("namespace", "default")
    if not isinstance(namespace, str) or not _DNS_LABEL.match(namespace):
        raise fail("metadata.namespace", namespace, "must be a DNS label (lowercase a-z, 0-9, -)")
    uid = meta.get("uid")
    if uid is None:
        uid = derived_uid(namespace, name)
    elif not isinstance(uid, str) or not uid or len(uid) > 128 or not uid.isprintable():
        raise fail("metadata.uid", uid, "must be a non-empty printable string")
    spec = doc.get("spec")
    if not isinstance(spec, dict):
        raise fail("spec", spec, "must be an object")

    names: set[str] = set()
    init = _containers(spec, "initContainers", fail, names, required=False)
    apps = _containers(spec, "containers", fail, names, required=True)

    _check_totals(init + apps, fail)
    requests: dict[str, int] | None = None
    limits: dict[str, int] | None = None
    if spec.get("resources") is not None:
        requests, limits = _pod_resources(spec["resources"], fail, init, apps)
    return PodSpec(
        uid=uid,
        namespace=namespace,
        name=name,
        init_containers=init,
        containers=apps,
        requests=requests,
        limits=limits,
    )


def _containers(
    spec: Mapping[str, Any], key: str, fail: _Fail, names: set[str], *, required: bool
) -> tuple[ContainerSpec, ...]:
    items = spec.get(key)
    if items is None and not required:
        return ()
    if not isinstance(items, list) or (required and not items):
        raise fail(
            f"spec.{key}",
            items,
            "must be a list" + (" of at least one container" if required else ""),
        )
    out = []
    for i, item in enumerate(items):
        path = f"spec.{key}[{i}]"
        if not isinstance(item, dict):
            raise fail(path, item, "must be a container object")
        name = item.get("name")
        if not isinstance(name, str) or not _DNS_LABEL.match(name):
            raise fail(f"{path}.name", name, "must be a DNS label (lowercase a-z, 0-9, -)")
        if name in names:
            raise fail(f"{path}.name", name, "duplicate container name in the pod")
        names.add(name)
        policy = item.get("restartPolicy")
        if key == "initContainers":
            if policy not in (None, "Always"):
                raise fail(f"{path}.restartPolicy", policy, "init containers allow only Always")
            kind = ContainerKind.SIDECAR if policy == "Always" else ContainerKind.INIT
        else:
            if policy is not None:
                raise fail(f"{path}.restartPolicy", policy, "only init containers may set it")
            kind = ContainerKind.APP
        requests, limits = _container_resources(item.get("resources"), f"{path}.resources", fail)
        out.append(ContainerSpec(name=name, kind=kind, requests=requests, limits=limits))
    return tuple(out)


def is_extended_resource(name: str) -> bool:
    """The API's ``IsExtendedResourceName``: a device plugin's resource such as
    ``nvidia.com/gpu`` (a domain-qualified name outside ``kubernetes.io``)."""
    domain, slash, _ = name.partition("/")
    native = domain == "kubernetes.io" or domain.endswith(".kubernetes.io")
    return bool(slash) and not native and not name.startswith("requests.")


def _resource_list(value: Any, path: str, fail: _Fail, *, extended: bool = False) -> dict[str, int]:
    """The quantities of a requests or limits map: cpu in millicores, memory and hugepages in
    bytes and, with ``extended`` (a container's), device plugin resources as whole counts."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise fail(path, value, "must be a map of resource name to quantity")
    out: dict[str, int] = {}
    for rname, quantity in value.items():
        field = f"{path}.{rname}"
        if not isinstance(rname, str):
            raise fail(field, rname, "resource names must be strings")
        if rname.startswith(HUGEPAGES_PREFIX) and not _HUGEPAGE_SIZE.match(rname):
            raise fail(
                field, rname, "hugepage resources are named hugepages-<size>, e.g. hugepages-2Mi"
            )
        if isinstance(quantity, bool) or not isinstance(quantity, (str, int, float)):
            raise fail(field, quantity, "must be a quantity such as 500m, 2, 4Gi")
        if extended and is_extended_resource(rname):
            out[rname] = _device_count(quantity, field, fail)
            continue
        try:
            amount = cpu_millis(quantity) if rname == CPU else memory_bytes(quantity)
        except QuantityError as exc:
            raise fail(field, quantity, str(exc)) from exc
        if amount < 0:
            raise fail(field, quantity, "must be greater than or equal to 0")
        limit = MAX_CPU_MILLIS if rname == CPU else MAX_BYTES
        if amount > limit:
            unit = "millicores" if rname == CPU else "bytes"
            raise fail(
                field,
                quantity,
                f"larger than {limit} {unit}, the most the runtime's 64-bit fields can carry",
            )
        if rname == CPU or is_memory_resource(rname):
            out[rname] = amount
    return out


def _device_count(quantity: str | int | float, field: str, fail: _Fail) -> int:
    try:
        amount = parse_quantity(quantity)
    except QuantityError as exc:
        raise fail(field, quantity, str(exc)) from exc
    if amount < 0 or amount != amount.to_integral_value() or amount > MAX_DEVICES:
        rule = f"an extended resource is a whole number of devices (0 to {MAX_DEVICES})"
        raise fail(field, quantity, rule)
    return int(amount)


def _requests_limits(
    value: Any, path: str, fail: _Fail, *, extended: bool = False
) -> tuple[dict[str, int], dict[str, int]]:
    if value is None:
        return {}, {}
    if not isinstance(value, dict):
        raise fail(path, value, "must be an object with requests and/or limits")
    for key in value:
        if key not in ("requests", "limits", "claims"):
            raise fail(f"{path}.{key}", value[key], "unknown field (requests, limits, claims)")
    return (
        _resource_list(value.get("requests"), f"{path}.requests", fail, extended=extended),
        _resource_list(value.get("limits"), f"{path}.limits", fail, extended=extended),
    )


def _check_totals(containers: tuple[ContainerSpec, ...], fail: _Fail) -> None:
    """The pod's aggregate (what the kubelet sends as the sandbox's resources) is at most the
    sum of every container's values: it must fit the runtime's 64-bit fields too."""
    for field in ("requests", "limits"):
        totals: dict[str, int] = {}
        for c in containers:
            for rname, amount in getattr(c, field).items():
                totals[rname] = totals.get(rname, 0) + amount
        for rname, total in totals.items():
            limit = MAX_CPU_MILLIS if rname == CPU else MAX_BYTES
            if total > limit:
                raise fail(
                    f"spec.containers[*].resources.{field}.{rname}",
                    total,
                    f"the containers' total is larger than {limit}, the most the runtime's "
                    "64-bit fields can carry",
                )


def _check_not_above(
    requests: Mapping[str, int], limits: Mapping[str, int], path: str, fail: _Fail
) -> None:
    for rname, amount in requests.items():
        if rname in limits and amount > limits[rname]:
            raise fail(
                f"{path}.requests.{rname}",
                amount,
                f"must be less than or equal to the {rname} limit {limits[rname]}",
            )
        if rname.startswith(HUGEPAGES_PREFIX) and rname in limits and amount != limits[rname]:
            rule = "hugepage requests must equal limits"
            if path == "spec.resources":
                rule += " (an unset pod-level hugepage request defaults to the containers' total)"
            raise fail(f"{path}.requests.{rname}", amount, rule)


def _container_resources(
    value: Any, path: str, fail: _Fail
) -> tuple[dict[str, int], dict[str, int]]:
    requests, limits = _requests_limits(value, path, fail, extended=True)
    for rname, amount in limits.items():
        requests.setdefault(rname, amount)
    _check_not_above(requests, limits, path, fail)
    for rname, amount in requests.items():
        if is_extended_resource(rname) and limits.get(rname) != amount:
            raise fail(
                f"{path}.requests.{rname}",
                amount,
                "extended resources cannot be overcommitted: the request must equal the limit",
            )
    return requests, limits


def aggregate_requests(
    init: Iterable[ContainerSpec], apps: Iterable[ContainerSpec], *, limits: bool = False
) -> dict[str, int]:
    """The kubelet's effective container aggregate (``AggregateContainerRequests``/``Limits``):
    per resource, max(sum of apps and sidecars, each regular init container plus the sidecars
    started before it)."""
    total: dict[str, int] = {}
    sidecars: dict[str, int] = {}
    init_max: dict[str, int] = {}
    for c in init:
        values = c.limits if limits else c.requests
        if c.kind is ContainerKind.SIDECAR:
            for rname, amount in values.items():
                sidecars[rname] = sidecars.get(rname, 0) + amount
        else:
            for rname, amount in values.items():
                init_max[rname] = max(init_max.get(rname, 0), sidecars.get(rname, 0) + amount)
    for c in apps:
        for rname, amount in (c.limits if limits else c.requests).items():
            total[rname] = total.get(rname, 0) + amount
    for rname, amount in sidecars.items():
        total[rname] = total.get(rname, 0) + amount
    for rname, amount in init_max.items():
        total[rname] = max(total.get(rname, 0), amount)
    return total


def _pod_resources(
    value: Any,
    fail: _Fail,
    init: tuple[ContainerSpec, ...],
    apps: tuple[ContainerSpec, ...],
) -> tuple[dict[str, int], dict[str, int]]:
    path = "spec.resources"
    requests, limits = _requests_limits(value, path, fail)
    raw = value if isinstance(value, dict) else {}
    for part in ("requests", "limits"):
        for rname in raw.get(part) or {}:
            if rname != CPU and not is_memory_resource(rname):
                raise fail(
                    f"{path}.{part}.{rname}",
                    rname,
                    "pod-level resources support only cpu, memory and hugepages-<size>",
                )
    if limits:
        aggregate = aggregate_requests(init, apps)
        for rname, amount in aggregate.items():
            if rname.startswith(HUGEPAGES_PREFIX) and rname not in requests:
                requests[rname] = amount
        for rname, amount in limits.items():
            requests.setdefault(rname, amount)
    _check_not_above(requests, limits, path, fail)
    aggregate = aggregate_requests(init, apps)
    for rname, amount in requests.items():
        if aggregate.get(rname, 0) > amount:
            raise fail(
                f"{path}.requests.{rname}",
                amount,
                f"must be greater than or equal to the containers' aggregate {rname} request "
                f"{aggregate[rname]}",
            )
    for c in (*init, *apps):
        for rname, amount in c.limits.items():
            if rname in limits and amount > limits[rname]:
                raise fail(
                    f"{path}.limits.{rname}",
                    limits[rname],
                    f"must be greater than or equal to container {c.name}'s {rname} limit {amount}",
                )
    return requests, limits
