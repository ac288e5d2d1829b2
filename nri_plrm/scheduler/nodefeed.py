"""The nodes' NodeResourceTopology objects for the extender: list, then watch.

A list (pages of :data:`PAGE`, one page decoded per turn of the event loop) gives every object
and the list's ``resourceVersion``; a watch from there (with bookmarks) gives each change as it
is written, so the API server sends only what changed. A watch that ends is reopened from the
last ``resourceVersion`` seen; ``410 Gone`` (the version was compacted) or any failure lists
again, after a back-off that grows with consecutive failures. Every ``resync`` seconds the
objects are listed again even while the watch runs (an informer's resync: nothing missed stays
missed). A watch that stays silent for :data:`WATCH_IDLE` seconds is reopened (a half-open
connection never ends by itself). A watch event line over :data:`MAX_LINE` bytes is refused
before it is held whole.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncGenerator, Callable, Mapping
from typing import Any

import httpx2

from nri_plrm.podsource.kube import Backoff, describe_failure
from nri_plrm.podsource.nrt import GROUP, PLURAL, VERSION
from nri_plrm.podsource.pages import LineSplitter
from nri_plrm.podsource.podapi import ApiStatusError, watch_event
from nri_plrm.scheduler.extender import Extender

NRT_PATH = f"/apis/{GROUP}/{VERSION}/{PLURAL}"
PAGE = 100
"""Objects per list page: one page is decoded between two turns of the event loop."""
MAX_PAGES = 1000
"""Pages one list may take (100,000 nodes); an endless ``continue`` is refused past it."""
MAX_LINE = 8 << 20
"""Largest watch event line (the API server stores objects of at most 1.5 MiB)."""
WATCH_TIMEOUT = 300
"""``timeoutSeconds`` of each watch (the server ends it then; it is reopened)."""
WATCH_IDLE = 330.0
"""Seconds without a byte (bookmarks included) after which a watch is reopened."""
_HEADERS = {"Accept-Encoding": "identity", "Accept": "application/json"}

log = logging.getLogger("nri_plrm.scheduler")


class NodeFeed:
    """Keeps ``extender``'s nodes equal to the NodeResourceTopology objects (module doc)."""

    def __init__(
        self,
        http: httpx2.AsyncClient,
        extender: Extender,
        resync: float,
        *,
        backoff: Backoff | None = None,
        on_change: Callable[[], None] | None = None,
        on_list: Callable[[bool], None] | None = None,
    ) -> None:
        self.http = http
        self.extender = extender
        self.resync = resync
        self.backoff = backoff or Backoff()
        self.on_change = on_change or (lambda: None)
        self.on_list = on_list or (lambda _ok: None)
        self.synced_at: float | None = None
        """``time.monotonic()`` of the last successful list or watch event (None: never)."""
        self.failing_since: float | None = None
        """``time.monotonic()`` of the first of the current run of failures (None: none)."""
        self._failures = 0
        self._version = ""

    async def list_once(self) -> str:
        """List every object, update the extender, forget nodes whose object is gone; the
        list's ``resourceVersion``. Raises on failure."""
        seen: set[str] = set()
        cont = ""
        version = ""
        for _ in range(MAX_PAGES):
            params = {"limit": str(PAGE)}
            if cont:
                params["continue"] = cont
            response = await self.http.get(NRT_PATH, params=params, headers=_HEADERS)
            if response.status_code != 200:
                raise ApiStatusError(response.status_code, response.text[:200])
            page = json.loads(response.content)
            if not isinstance(page, Mapping):
                raise ValueError(f"{NRT_PATH}: the list is not an object")
            items = page.get("items")
            for obj in items if isinstance(items, list) else ():
                if isinstance(obj, Mapping) and isinstance(obj.get("metadata"), Mapping):
                    self.extender.update_node(obj)
                    seen.add(str(obj["metadata"].get("name", "")))
            meta = page.get("metadata")
            meta = meta if isinstance(meta, Mapping) else {}
            version = str(meta.get("resourceVersion") or "")
            cont = str(meta.get("continue") or "")
            if not cont:
                break
            await asyncio.sleep(0)
        else:
            raise RuntimeError(f"listing {NRT_PATH}: more than {MAX_PAGES} pages")
        for name in self.extender.node_names():
            if name not in seen:
                self.extender.remove_node(name)
        self.synced_at = time.monotonic()
        self.on_change()
        return version

    async def watch(self, version: str) -> AsyncGenerator[tuple[str, dict[str, Any]], None]:
        """The watch events (type, object) from ``version`` until the server ends the watch
        or it stays silent for :data:`WATCH_IDLE` seconds; ``ERROR`` raises ApiStatusError."""
        params = {
            "watch": "true",
            "allowWatchBookmarks": "true",
            "resourceVersion": version,
            "timeoutSeconds": str(WATCH_TIMEOUT),
        }
        timeout = httpx2.Timeout(self.http.timeout.connect, read=None)
        lines = LineSplitter(MAX_LINE)
        async with self.http.stream(
            "GET", NRT_PATH, params=params, headers=_HEADERS, timeout=timeout
        ) as response:
            if response.status_code != 200:
                body = await response.aread()
                raise ApiStatusError(response.status_code, body[:200].decode("utf-8", "replace"))
            chunks = aiter(response.aiter_bytes())
            while True:
                try:
                    chunk = await asyncio.wait_for(anext(chunks), WATCH_IDLE)
                except (StopAsyncIteration, asyncio.TimeoutError):
                    return
                for line in lines.feed(chunk):
                    yield watch_event(line)

    async def follow(self, version: str) -> None:
        """Apply watch events from ``version``, reopening the watch from the last version
        seen, for ``resync`` seconds; raises on failure (a list is needed)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.resync
        while loop.time() < deadline:
            try:
                await asyncio.wait_for(self._apply(version), max(0.0, deadline - loop.time()))
            except asyncio.TimeoutError:
                return
            version = self._version or version

    async def _apply(self, version: str) -> None:
        self._version = version
        async for kind, obj in self.watch(version):
            meta = obj.get("metadata")
            meta = meta if isinstance(meta, Mapping) else {}
            self._version = str(meta.get("resourceVersion") or self._version)
            if kind in ("ADDED", "MODIFIED"):
                self.extender.update_node(obj)
            elif kind == "DELETED":
                self.extender.remove_node(str(meta.get("name", "")))
            self.synced_at = time.monotonic()
            self.on_change()

    async def run(self) -> None:
        """List and watch until cancelled."""
        while True:
            try:
                version = await self.list_once()
                self.on_list(True)
                if self._failures:
                    log.warning("NodeResourceTopology objects listed again")
                self._failures = 0
                self.failing_since = None
                await self.follow(version)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the API's and the connection's failures alike
                gone = isinstance(exc, ApiStatusError) and exc.code == 410
                if not gone:
                    self._failures += 1
                    self.on_list(False)
                    if self.failing_since is None:
                        self.failing_since = time.monotonic()
                if self._failures == 1:
                    log.warning(
                        "NodeResourceTopology objects: %s; deciding on the last state seen, "
                        "listing again with back-off",
                        describe_failure(exc),
                    )
                await asyncio.sleep(self.backoff.delay(self._failures) if self._failures else 0)
