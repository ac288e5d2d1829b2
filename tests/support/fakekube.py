"""A small Kubernetes API server for tests: real HTTP/1.1 over TCP on 127.0.0.1.

It speaks what the pod cache, the event recorder and the refused-pod patcher use: ``GET
/api/v1/pods`` (a JSON list with ``metadata.resourceVersion``,
``fieldSelector=spec.nodeName=<node>`` honoured) and its watch
(``watch=true``: a chunked stream of ``{"type": ..., "object": ...}`` lines from the requested
``resourceVersion``, ``timeoutSeconds`` honoured), ``410 Gone`` for a compacted
``resourceVersion`` (as an HTTP status or as a watch ``ERROR`` event), dropped connections,
``POST /api/v1/namespaces/<ns>/events``, ``GET`` of one pod, a merge ``PATCH`` of its
``status`` and its ``binding``, ``GET /api/v1/nodes/<name>`` and the cluster-scoped
NodeResourceTopology custom resource (list, ``GET``/``POST``/``PUT`` under
``/apis/topology.node.k8s.io/v1alpha2/noderesourcetopologies``, with ``resourceVersion``
conflicts as the API server answers them), and DRA's ``resource.k8s.io/v1``: ``GET`` of one
ResourceClaim and the ResourceSlice list (``fieldSelector=spec.nodeName=<node>`` honoured). Lists
honour ``limit`` and ``continue`` as the API server does. Every request is recorded.

Hostile modes, as a broken or malicious API server behaves: ``fill`` (a huge list),
``ignore_limit`` (one page whatever ``limit`` says), ``endless_continue`` (every page says there
is more), ``watch_line_bytes`` (each watch first sends one event line that long, streamed without
building it) and ``watch_ends_at_once`` (every watch ends before any event).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import socket
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

import yaml


@dataclass
class Request:
    """One request the server answered."""

    method: str
    path: str
    query: dict[str, str]
    body: Any = None


NRT_PATH = "/apis/topology.node.k8s.io/v1alpha2/noderesourcetopologies"
DRA_PATH = "/apis/resource.k8s.io/v1"


@dataclass
class Write:
    """One accepted NodeResourceTopology create or update."""

    method: str
    at: float
    """``time.monotonic()`` when the server stored it."""
    body: dict[str, Any]


@dataclass
class _Watch:
    selector: dict[str, str]
    queue: asyncio.Queue[tuple[str, dict[str, Any]] | None] = field(default_factory=asyncio.Queue)
    writer: asyncio.StreamWriter | None = None


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _selector(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in filter(None, text.split(",")):
        key, _, value = part.partition("=")
        out[key.strip()] = value.strip()
    return out


def _field(obj: Mapping[str, Any], path: str) -> str:
    value: Any = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    return "" if value is None else str(value)


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


class FakeKube:
    """The fake API server. Mutate pods with ``add``/``modify``/``delete``; ``compact`` forgets
    history (older resourceVersions answer 410), ``drop_watches`` cuts open watch connections,
    ``stop``/``start`` take the whole server away and back on the same port."""

    def __init__(self, port: int = 0) -> None:
        self.port = port or free_port()
        self.pods: dict[tuple[str, str], dict[str, Any]] = {}
        self.history: list[tuple[int, str, dict[str, Any]]] = []
        self.rv = 100
        self.compacted = 0
        self.gone_as_event = True
        """410 for a watch as a 200 stream with an ERROR event (the API server's way); False
        answers the watch request itself with HTTP 410."""
        self.requests: list[Request] = []
        self.events: list[dict[str, Any]] = []
        self.event_status = 201
        """Status answered to event POSTs (e.g. 403 or 500 to make posting fail)."""
        self.event_delay = 0.0
        self.nodes: dict[str, dict[str, Any]] = {}
        self.nrts: dict[str, dict[str, Any]] = {}
        self.nrt_writes: list[Write] = []
        self.nrt_history: list[tuple[int, str, dict[str, Any]]] = []
        """(resourceVersion, event type, object) of every NodeResourceTopology change."""
        self.nrt_compacted = 0
        """A NodeResourceTopology watch from a version below this gets a 410 ``ERROR``."""
        self._nrt_watches: list[asyncio.Queue[tuple[str, dict[str, Any]] | None]] = []
        self.nrt_status = 0
        """When set (e.g. 503), answered to every node and NodeResourceTopology request."""
        self.nrt_fail_next: list[int] = []
        """Statuses answered, one per request, to the next NodeResourceTopology writes."""
        self.nrt_crd = True
        """False: the CRD is not installed (every NodeResourceTopology request is a 404)."""
        self.claims: dict[tuple[str, str], dict[str, Any]] = {}
        """ResourceClaims by (namespace, name)."""
        self.slices: list[dict[str, Any]] = []
        """ResourceSlices."""
        self.dra_status = 0
        """When set (404: an API server without resource.k8s.io/v1; 403: no RBAC), answered to
        every DRA request."""
        self.endless_continue = False
        """Every list page carries a ``continue`` token and new pods (an endless list)."""
        self.ignore_limit = False
        """Lists answer every pod in one page whatever ``limit`` asks (as a proxy might)."""
        self.watch_line_bytes = 0
        """When set, each watch first sends a MODIFIED event line of about this many bytes."""
        self.watch_ends_at_once = False
        """Every watch answers 200 and ends at once, without an event."""
        self.pages_served = 0
        self.huge_bytes_sent = 0
        """Bytes of huge watch lines written to clients (``watch_line_bytes``)."""
        self._endless = 0
        self._watches: list[_Watch] = []
        self._server: asyncio.AbstractServer | None = None
        self._conns: set[asyncio.StreamWriter] = set()
        self.watch_opened = asyncio.Event()

    @property
    def url(self) -> str:
        """The server's base URL."""
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> FakeKube:
        """Listen (again) on ``port``."""
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)
        return self

    async def stop(self) -> None:
        """Stop listening and cut every open connection."""
        for watch in self._take_watches():
            watch.queue.put_nowait(None)
        for queue in self._nrt_watches:
            queue.put_nowait(None)
        if self._server is not None:
            self._server.close()
            for writer in list(self._conns):
                writer.transport.abort()
            await self._server.wait_closed()
            self._server = None

    # ----------------------------------------------------------------- pod store

    def add(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Create a pod (a deep copy of ``obj``) and send ADDED."""
        return self._change("ADDED", obj)

    def modify(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Replace a pod and send MODIFIED."""
        return self._change("MODIFIED", obj)

    def delete(self, namespace: str, name: str) -> dict[str, Any]:
        """Delete a pod and send DELETED."""
        obj = self.pods.pop((namespace, name))
        return self._change("DELETED", obj, store=False)

    def fill(self, count: int, node: str, prefix: str = "bulk") -> None:
        """Store ``count`` one-container pods on ``node`` at once (no watch events; for huge
        lists)."""
        self.rv += 1
        for i in range(count):
            obj = api_pod(f"{prefix}-{i}", node)
            obj["metadata"]["resourceVersion"] = str(self.rv)
            self.pods[("default", f"{prefix}-{i}")] = obj

    def bookmark(self) -> None:
        """Send a BOOKMARK with the current resourceVersion to every watch."""
        self.rv += 1
        for watch in self._watches:
            obj = {"kind": "Pod", "apiVersion": "v1", "metadata": {"resourceVersion": str(self.rv)}}
            watch.queue.put_nowait(("BOOKMARK", obj))

    def compact(self) -> None:
        """Forget the history: the store moves on (as other objects' writes move it) and every
        resourceVersion handed out so far becomes too old (410 for a watch from it)."""
        self.rv += 1
        self.compacted = self.rv
        self.history.clear()

    def drop_watches(self) -> None:
        """Abort every open watch connection (no terminating chunk)."""
        for watch in self._take_watches():
            if watch.writer is not None:
                watch.writer.transport.abort()
            watch.queue.put_nowait(None)

    def end_watches(self) -> None:
        """End every open watch cleanly (as the server's timeoutSeconds does)."""
        for watch in self._take_watches():
            watch.queue.put_nowait(None)
        for queue in self._nrt_watches:
            queue.put_nowait(None)

    def expire_watches(self) -> None:
        """Send each open watch a 410 ERROR event (its resourceVersion is too old), then end it."""
        self.compact()
        for watch in self._take_watches():
            status = _status(410, "Expired", "too old resource version")
            watch.queue.put_nowait(("ERROR", status))
            watch.queue.put_nowait(None)

    def _take_watches(self) -> list[_Watch]:
        watches, self._watches = self._watches, []
        return watches

    def _change(self, kind: str, obj: Mapping[str, Any], *, store: bool = True) -> dict[str, Any]:
        self.rv += 1
        stored = copy.deepcopy(dict(obj))
        meta = stored.setdefault("metadata", {})
        meta.setdefault("namespace", "default")
        meta["resourceVersion"] = str(self.rv)
        if store:
            self.pods[(meta["namespace"], meta["name"])] = stored
        self.history.append((self.rv, kind, stored))
        for watch in self._watches:
            if self._matches(stored, watch.selector):
                watch.queue.put_nowait((kind, stored))
        return stored

    def _matches(self, obj: Mapping[str, Any], selector: Mapping[str, str]) -> bool:
        return all(_field(obj, key) == value for key, value in selector.items())

    def watch_count(self) -> int:
        """Watches open right now."""
        return len(self._watches)

    def pod_requests(self, watch: bool) -> list[Request]:
        """The pod list (``watch=False``) or watch requests received, in order."""
        return [
            r
            for r in self.requests
            if r.path == "/api/v1/pods" and (r.query.get("watch") == "true") == watch
        ]

    # ----------------------------------------------------------------- nodes and NRTs

    def add_node(self, name: str, uid: str | None = None) -> dict[str, Any]:
        """Create a Node object (a new uid each time unless given)."""
        self.rv += 1
        node = {
            "kind": "Node",
            "apiVersion": "v1",
            "metadata": {
                "name": name,
                "uid": uid or f"node-uid-{name}-{self.rv}",
                "resourceVersion": str(self.rv),
            },
        }
        self.nodes[name] = node
        return node

    def store_nrt(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Store a NodeResourceTopology object as another writer would (not in
        ``nrt_writes``), with a new ``resourceVersion``."""
        self.rv += 1
        stored = copy.deepcopy(dict(obj))
        meta = stored.setdefault("metadata", {})
        meta["resourceVersion"] = str(self.rv)
        kind = "MODIFIED" if meta["name"] in self.nrts else "ADDED"
        self._nrt_changed(kind, stored)
        return stored

    def delete_nrt(self, name: str) -> None:
        """Delete a NodeResourceTopology object (watchers see DELETED)."""
        self.rv += 1
        stored = copy.deepcopy(self.nrts[name])
        stored["metadata"]["resourceVersion"] = str(self.rv)
        self._nrt_changed("DELETED", stored)

    def end_nrt_watches(self) -> None:
        """End every open NodeResourceTopology watch (as the API server does on timeout)."""
        for queue in self._nrt_watches:
            queue.put_nowait(None)

    def _nrt_changed(self, kind: str, stored: dict[str, Any]) -> None:
        name = stored["metadata"]["name"]
        if kind == "DELETED":
            self.nrts.pop(name, None)
        else:
            self.nrts[name] = stored
        self.nrt_history.append((self.rv, kind, stored))
        for queue in self._nrt_watches:
            queue.put_nowait((kind, stored))

    async def _nrt_watch(self, request: Request, writer: asyncio.StreamWriter) -> None:
        since = int(request.query.get("resourceVersion", "0") or 0)
        timeout = float(request.query.get("timeoutSeconds", "0") or 0)
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
        )
        if since < self.nrt_compacted:
            await self._chunk(writer, "ERROR", _status(410, "Expired", "too old resource version"))
            await self._end(writer)
            return
        queue: asyncio.Queue[tuple[str, dict[str, Any]] | None] = asyncio.Queue()
        for rv, kind, obj in self.nrt_history:
            if rv > since:
                queue.put_nowait((kind, obj))
        self._nrt_watches.append(queue)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout if timeout else None
        try:
            while True:
                remaining = None if deadline is None else deadline - loop.time()
                if remaining is not None and remaining <= 0:
                    break
                try:
                    item = await asyncio.wait_for(queue.get(), remaining)
                except asyncio.TimeoutError:
                    break
                if item is None:
                    break
                await self._chunk(writer, *item)
        finally:
            self._nrt_watches.remove(queue)
        await self._end(writer)

    def nrt_requests(self) -> list[Request]:
        """The NodeResourceTopology requests received, in order."""
        return [r for r in self.requests if r.path.startswith(NRT_PATH)]

    def _store_nrt(self, method: str, obj: dict[str, Any]) -> dict[str, Any]:
        self.rv += 1
        stored = copy.deepcopy(obj)
        meta = stored.setdefault("metadata", {})
        meta["resourceVersion"] = str(self.rv)
        meta.setdefault("uid", f"nrt-uid-{meta['name']}")
        self._nrt_changed("ADDED" if method == "POST" else "MODIFIED", stored)
        self.nrt_writes.append(Write(method, time.monotonic(), copy.deepcopy(obj)))
        return stored

    async def _node_api(self, request: Request, writer: asyncio.StreamWriter) -> None:
        name = request.path.rsplit("/", 1)[-1]
        if self.nrt_status:
            await self._json(writer, self.nrt_status, _status(self.nrt_status, "Error", "down"))
        elif request.method == "GET" and name in self.nodes:
            await self._json(writer, 200, self.nodes[name])
        else:
            await self._json(writer, 404, _status(404, "NotFound", f'nodes "{name}" not found'))

    def dra_requests(self) -> list[Request]:
        """The DRA requests answered, in order."""
        return [r for r in self.requests if r.path.startswith(DRA_PATH)]

    async def _dra_api(self, request: Request, writer: asyncio.StreamWriter) -> None:
        parts = request.path[len(DRA_PATH) :].strip("/").split("/")
        if self.dra_status:
            reason = {403: "Forbidden", 404: "NotFound"}.get(self.dra_status, "Error")
            await self._json(writer, self.dra_status, _status(self.dra_status, reason, "no"))
        elif parts == ["resourceslices"]:
            selector = _selector(request.query.get("fieldSelector", ""))
            items = [s for s in self.slices if self._matches(s, selector)]
            self.rv += 1
            body = {"kind": "ResourceSliceList", "apiVersion": "resource.k8s.io/v1"}
            body |= {"metadata": {"resourceVersion": str(self.rv)}, "items": items}
            await self._json(writer, 200, body)
        elif len(parts) == 4 and parts[0] == "namespaces" and parts[2] == "resourceclaims":
            claim = self.claims.get((parts[1], parts[3]))
            if claim is None:
                msg = f'resourceclaims.resource.k8s.io "{parts[3]}" not found'
                status = _status(404, "NotFound", msg)
                status["details"] = {"name": parts[3], "group": "resource.k8s.io"}
                status["details"]["kind"] = "resourceclaims"
                await self._json(writer, 404, status)
            else:
                await self._json(writer, 200, claim)
        else:
            await self._json(writer, 404, _status(404, "NotFound", f"{request.path} not found"))

    async def _nrt_api(self, request: Request, writer: asyncio.StreamWriter) -> None:
        rest = request.path[len(NRT_PATH) :].strip("/")
        if self.nrt_status:
            await self._json(writer, self.nrt_status, _status(self.nrt_status, "Error", "down"))
            return
        if not self.nrt_crd:
            await self._json(writer, 404, _status(404, "NotFound", "the server could not find"))
            return
        if request.method in ("POST", "PUT") and self.nrt_fail_next:
            code = self.nrt_fail_next.pop(0)
            await self._json(writer, code, _status(code, "Injected", f"injected {code}"))
            return
        body = request.body if isinstance(request.body, dict) else {}
        if request.method == "GET" and not rest and request.query.get("watch") == "true":
            await self._nrt_watch(request, writer)
        elif request.method == "GET" and not rest:
            names = sorted(self.nrts)
            offset = int(request.query.get("continue", "0") or 0)
            limit = int(request.query.get("limit", "0") or 0) or len(names)
            page = names[offset : offset + limit]
            meta = {"resourceVersion": str(self.rv)}
            if offset + limit < len(names):
                meta["continue"] = str(offset + limit)
            listing = {
                "apiVersion": "topology.node.k8s.io/v1alpha2",
                "kind": "NodeResourceTopologyList",
                "metadata": meta,
                "items": [self.nrts[name] for name in page],
            }
            await self._json(writer, 200, listing)
        elif request.method == "GET" and rest:
            if rest in self.nrts:
                await self._json(writer, 200, self.nrts[rest])
            else:
                await self._json(writer, 404, _status(404, "NotFound", f"{rest} not found"))
        elif request.method == "POST" and not rest:
            name = body.get("metadata", {}).get("name", "")
            if name in self.nrts:
                await self._json(writer, 409, _status(409, "AlreadyExists", f"{name} exists"))
            else:
                await self._json(writer, 201, self._store_nrt("POST", body))
        elif request.method == "PUT" and rest:
            current = self.nrts.get(rest)
            sent = str(body.get("metadata", {}).get("resourceVersion", ""))
            if current is None:
                await self._json(writer, 404, _status(404, "NotFound", f"{rest} not found"))
            elif not sent:
                msg = "metadata.resourceVersion: Invalid value: 0x0: must be specified"
                await self._json(writer, 422, _status(422, "Invalid", msg))
            elif sent != current["metadata"]["resourceVersion"]:
                msg = "the object has been modified; please apply your changes to the latest"
                await self._json(writer, 409, _status(409, "Conflict", msg))
            else:
                await self._json(writer, 200, self._store_nrt("PUT", body))
        else:
            await self._json(writer, 405, _status(405, "MethodNotAllowed", request.method))

    # ----------------------------------------------------------------- HTTP

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._conns.add(writer)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, target, _ = lines[0].split(" ", 2)
                headers = {}
                for line in lines[1:]:
                    if ":" in line:
                        key, _, value = line.partition(":")
                        headers[key.strip().lower()] = value.strip()
                length = int(headers.get("content-length", "0"))
                raw = await reader.readexactly(length) if length else b""
                url = urlsplit(target)
                query = {k: v[-1] for k, v in parse_qs(url.query).items()}
                body = json.loads(raw) if raw else None
                request = Request(method, url.path, query, body)
                self.requests.append(request)
                await self._route(request, writer)
        except (
            asyncio.IncompleteReadError,
            ConnectionError,
            asyncio.LimitOverrunError,
            asyncio.CancelledError,
        ):
            pass
        finally:
            self._conns.discard(writer)
            with contextlib.suppress(Exception):
                writer.close()

    async def _route(self, request: Request, writer: asyncio.StreamWriter) -> None:
        if request.method == "GET" and request.path == "/api/v1/pods":
            if request.query.get("watch") == "true":
                await self._watch(request, writer)
            else:
                await self._list(request, writer)
            return
        if request.path.startswith(NRT_PATH):
            await self._nrt_api(request, writer)
            return
        if request.path.startswith(DRA_PATH + "/") and request.method == "GET":
            await self._dra_api(request, writer)
            return
        if request.path.startswith("/api/v1/nodes/"):
            await self._node_api(request, writer)
            return
        parts = request.path.strip("/").split("/")
        if (
            request.method == "POST"
            and len(parts) == 5
            and parts[:3] == ["api", "v1", "namespaces"]
            and parts[4] == "events"
        ):
            await self._post_event(parts[3], request, writer)
            return
        if len(parts) in (6, 7) and parts[:3] == ["api", "v1", "namespaces"] and parts[4] == "pods":
            await self._pod_api(parts[3], parts[5], parts[6:], request, writer)
            return
        await self._json(writer, 404, _status(404, "NotFound", f"{request.path} not found"))

    async def _pod_api(
        self,
        namespace: str,
        name: str,
        sub: list[str],
        request: Request,
        writer: asyncio.StreamWriter,
    ) -> None:
        """``GET`` one pod and a merge ``PATCH`` of its ``status`` (a changed ``metadata.uid``
        in the patch fails as the API server's uid precondition does); the patch is MODIFIED."""
        pod = self.pods.get((namespace, name))
        if pod is None:
            await self._json(writer, 404, _status(404, "NotFound", f'pods "{name}" not found'))
        elif request.method == "GET" and not sub:
            await self._json(writer, 200, pod)
        elif request.method == "POST" and sub == ["binding"]:
            await self._bind(pod, request, writer)
        elif request.method == "PATCH" and sub == ["status"]:
            patch = request.body if isinstance(request.body, dict) else {}
            uid = (patch.get("metadata") or {}).get("uid")
            if uid is not None and uid != pod["metadata"].get("uid"):
                msg = f"Precondition failed: UID in precondition: {uid}"
                await self._json(writer, 409, _status(409, "Conflict", msg))
                return
            changed = copy.deepcopy(pod)
            changed.setdefault("status", {}).update(patch.get("status") or {})
            await self._json(writer, 200, self.modify(changed))
        else:
            await self._json(writer, 405, _status(405, "MethodNotAllowed", request.method))

    async def _bind(
        self, pod: dict[str, Any], request: Request, writer: asyncio.StreamWriter
    ) -> None:
        """``POST pods/<name>/binding``: sets ``spec.nodeName`` once (409 when already bound,
        as the API server answers), a uid in the binding's metadata must match."""
        body = request.body if isinstance(request.body, dict) else {}
        uid = (body.get("metadata") or {}).get("uid")
        target = body.get("target") or {}
        if uid and uid != pod["metadata"].get("uid"):
            msg = f"Precondition failed: UID in precondition: {uid}"
            await self._json(writer, 409, _status(409, "Conflict", msg))
        elif (pod.get("spec") or {}).get("nodeName"):
            msg = f"pod {pod['metadata']['name']} is already assigned to node"
            await self._json(writer, 409, _status(409, "Conflict", msg))
        elif target.get("kind") != "Node" or not target.get("name"):
            await self._json(writer, 400, _status(400, "BadRequest", "target must be a Node"))
        else:
            changed = copy.deepcopy(pod)
            changed.setdefault("spec", {})["nodeName"] = target["name"]
            self.modify(changed)
            status = {"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 201}
            await self._json(writer, 201, status)

    async def _list(self, request: Request, writer: asyncio.StreamWriter) -> None:
        selector = _selector(request.query.get("fieldSelector", ""))
        limit = 0 if self.ignore_limit else int(request.query.get("limit", "0") or 0)
        token = request.query.get("continue", "")
        endless_token = token.startswith("e")
        offset = int(token.lstrip("e") or 0)
        self.pages_served += 1
        if endless_token and not self.endless_continue:
            # The endless list's token outlived the mode: expired, as the API server answers a
            # continue token it no longer honours (the client lists again from the start).
            msg = "The provided continue parameter is too old to display a consistent list result."
            await self._json(writer, 410, _status(410, "Expired", msg))
            return
        if self.endless_continue:
            node = selector.get("spec.nodeName", "node")
            count = limit or 500
            items = [api_pod(f"endless-{self._endless + i}", node) for i in range(count)]
            self._endless += count
            cont = f"e{offset + count}"
        else:
            items = [p for p in self.pods.values() if self._matches(p, selector)]
            end = offset + limit if limit else len(items)
            cont = str(end) if end < len(items) else ""
            items = items[offset:end]
        meta = {"resourceVersion": str(self.rv)}
        if cont:
            meta["continue"] = cont
        body = {"kind": "PodList", "apiVersion": "v1", "metadata": meta, "items": items}
        await self._json(writer, 200, body)

    async def _watch(self, request: Request, writer: asyncio.StreamWriter) -> None:
        selector = _selector(request.query.get("fieldSelector", ""))
        since_text = request.query.get("resourceVersion", "")
        timeout = float(request.query.get("timeoutSeconds", "0") or 0)
        since = int(since_text) if since_text else None
        gone = since is not None and since < self.compacted
        if gone and not self.gone_as_event:
            await self._json(writer, 410, _status(410, "Expired", "too old resource version"))
            return
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
        )
        if self.watch_ends_at_once:
            await self._end(writer)
            return
        if self.watch_line_bytes:
            await self._huge_line(writer, selector.get("spec.nodeName", "node"))
            await self._end(writer)
            return
        if gone:
            await self._chunk(writer, "ERROR", _status(410, "Expired", "too old resource version"))
            await self._end(writer)
            return
        watch = _Watch(selector, writer=writer)
        if since is None:
            for obj in self.pods.values():
                if self._matches(obj, selector):
                    watch.queue.put_nowait(("ADDED", obj))
        else:
            for rv, kind, obj in self.history:
                if rv > since and self._matches(obj, selector):
                    watch.queue.put_nowait((kind, obj))
        self._watches.append(watch)
        self.watch_opened.set()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout if timeout else None
        while True:
            remaining = None if deadline is None else deadline - loop.time()
            if remaining is not None and remaining <= 0:
                break
            try:
                item = await asyncio.wait_for(watch.queue.get(), remaining)
            except asyncio.TimeoutError:
                break
            if item is None:
                break
            await self._chunk(writer, *item)
        if watch in self._watches:
            self._watches.remove(watch)
        await self._end(writer)

    async def _post_event(
        self, namespace: str, request: Request, writer: asyncio.StreamWriter
    ) -> None:
        if self.event_delay:
            await asyncio.sleep(self.event_delay)
        if self.event_status >= 300:
            status = _status(self.event_status, "Forbidden", "events is forbidden")
            await self._json(writer, self.event_status, status)
            return
        obj = dict(request.body or {})
        obj.setdefault("metadata", {})["namespace"] = namespace
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        self.events.append(obj)
        await self._json(writer, 201, obj)

    async def _json(self, writer: asyncio.StreamWriter, code: int, body: Any) -> None:
        data = json.dumps(body).encode()
        reason = {
            200: "OK",
            201: "Created",
            403: "Forbidden",
            404: "Not Found",
            409: "Conflict",
            410: "Gone",
            503: "Service Unavailable",
        }.get(code, "Error")
        writer.write(
            f"HTTP/1.1 {code} {reason}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\n\r\n".encode()
            + data
        )
        await writer.drain()

    async def _chunk(self, writer: asyncio.StreamWriter, kind: str, obj: Any) -> None:
        data = json.dumps({"type": kind, "object": obj}).encode() + b"\n"
        writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        await writer.drain()

    async def _huge_line(self, writer: asyncio.StreamWriter, node: str) -> None:
        """One MODIFIED event about ``watch_line_bytes`` long, written 1 MiB at a time."""
        obj = api_pod("huge", node)
        obj["metadata"]["annotations"] = {"pad": "@PAD@"}
        head, tail = json.dumps({"type": "MODIFIED", "object": obj}).split("@PAD@")
        pieces = [head.encode()]
        left = self.watch_line_bytes
        while left > 0:
            pieces.append(b"x" * min(left, 1 << 20))
            left -= len(pieces[-1])
        pieces.append(tail.encode() + b"\n")
        for data in pieces:
            writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            await writer.drain()
            self.huge_bytes_sent += len(data)

    async def _end(self, writer: asyncio.StreamWriter) -> None:
        writer.write(b"0\r\n\r\n")
        await writer.drain()


def kubeconfig_text(url: str, token: str = "test-token") -> str:
    """A kubeconfig (YAML) for a server at ``url`` with a bearer token."""
    return (
        "apiVersion: v1\nkind: Config\ncurrent-context: fake\n"
        f"clusters:\n- name: fake\n  cluster:\n    server: {url}\n"
        f"users:\n- name: fake\n  user:\n    token: {token}\n"
        "contexts:\n- name: fake\n  context:\n    cluster: fake\n    user: fake\n"
    )


def api_pod(
    name: str,
    node: str,
    *,
    namespace: str = "default",
    uid: str | None = None,
    cpu: str = "1",
    memory: str = "1Gi",
    annotations: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A one-container Guaranteed pod object as the API server stores it (no kind on items)."""
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "uid": uid or f"uid-{name}"}
    if annotations:
        meta["annotations"] = dict(annotations)
    res = {"cpu": cpu, "memory": memory}
    return {
        "metadata": meta,
        "spec": {
            "nodeName": node,
            "containers": [{"name": "app", "resources": {"requests": res, "limits": res}}],
        },
        "status": {"phase": "Pending"},
    }


def manifest_objects(text: str, node: str, uid: Callable[[str, str], str]) -> list[dict[str, Any]]:
    """The Pod documents of a manifest, bound to ``node``, each with ``uid(namespace, name)``
    as ``metadata.uid`` when it has none (as the API server would assign one)."""
    out = []
    for doc in yaml.safe_load_all(text):
        if not doc:
            continue
        obj = copy.deepcopy(doc)
        meta = obj.setdefault("metadata", {})
        meta.setdefault("namespace", "default")
        meta.setdefault("uid", uid(meta["namespace"], meta["name"]))
        obj["spec"]["nodeName"] = node
        out.append(obj)
    return out
