"""The pod list and watch requests of the pod cache, read within caps.

Bodies are streamed and counted as they arrive: a list page is paged with ``limit`` and cut
off past the page and list byte caps, a watch line past the line cap, each before it is held
whole (:class:`~nri_plrm.podsource.pages.Refused`). Compressed answers are not asked for, so a
byte on the wire is a byte in memory.
"""

from __future__ import annotations

import asyncio
import codecs
import json
from collections.abc import AsyncGenerator, Mapping
from dataclasses import dataclass
from typing import Any

import httpx2

from nri_plrm.podsource.pages import LineSplitter, ListPage, Refused

PODS = "/api/v1/pods"
MIB = 1 << 20


@dataclass(frozen=True)
class ApiLimits:
    """What the pod cache accepts from the API server. The defaults fit a 10,000-pod node with
    room: 200 pages of 500 pods list 100,000 pods; a page may hold 500 pods of 64 KiB."""

    page_size: int = 500
    """``limit`` of each list request."""
    max_pages: int = 200
    """Pages one list may take (an endless ``continue`` is refused at this count)."""
    max_page_bytes: int = 32 * MIB
    """Bytes one list page may take."""
    max_list_bytes: int = 512 * MIB
    """Bytes all the pages of one list may take together."""
    max_line_bytes: int = 8 * MIB
    """Bytes one watch event may take (the API server stores objects of at most 1.5 MiB)."""


class ApiStatusError(Exception):
    """The API server answered an HTTP error (``code``), or a watch ``ERROR`` event with it."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"HTTP {code}: {message}" if message else f"HTTP {code}")
        self.code = code


class PodApi:
    """List and watch of the pods matching a field selector through ``http`` (an
    ``httpx2.AsyncClient`` with the cluster's base URL and credentials), within ``limits``."""

    def __init__(self, http: httpx2.AsyncClient, limits: ApiLimits | None = None) -> None:
        self.http = http
        self.limits = limits or ApiLimits()

    async def list_page(self, fields: Mapping[str, str], cont: str, budget: int) -> ListPage:
        """One page of the list from ``cont`` (empty: the first); at most ``budget`` bytes."""
        params = {"fieldSelector": _selector(fields), "limit": str(self.limits.page_size)}
        if cont:
            params["continue"] = cont
        decoder = codecs.getincrementaldecoder("utf-8")()
        parts: list[str] = []
        size = 0
        async with self.http.stream("GET", PODS, params=params, headers=_IDENTITY) as response:
            await _check(response)
            async for chunk in response.aiter_bytes():
                size += len(chunk)
                if size > self.limits.max_page_bytes:
                    raise Refused(
                        "list_bytes",
                        f"pod list page larger than {self.limits.max_page_bytes} bytes: "
                        "refused unread",
                    )
                if size > budget:
                    raise Refused(
                        "list_bytes",
                        f"pod list larger than {self.limits.max_list_bytes} bytes: refused unread",
                    )
                parts.append(decoder.decode(chunk))
        parts.append(decoder.decode(b"", final=True))
        text = "".join(parts)
        parts.clear()
        return ListPage(text, size)

    async def watch(
        self, fields: Mapping[str, str], resource_version: str, server_timeout: int, idle: float
    ) -> AsyncGenerator[tuple[str, dict[str, Any]], None]:
        """The watch events (type, object) from ``resource_version`` until the server ends the
        watch or ``idle`` seconds pass without a byte; a 410 ``ERROR`` event raises
        :class:`ApiStatusError`."""
        params = {
            "fieldSelector": _selector(fields),
            "watch": "true",
            "allowWatchBookmarks": "true",
            "resourceVersion": resource_version,
            "timeoutSeconds": str(server_timeout),
        }
        timeout = httpx2.Timeout(self.http.timeout.connect, read=None)
        lines = LineSplitter(self.limits.max_line_bytes)
        async with self.http.stream(
            "GET", PODS, params=params, headers=_IDENTITY, timeout=timeout
        ) as response:
            await _check(response)
            chunks = aiter(response.aiter_bytes())
            while True:
                try:
                    chunk = await asyncio.wait_for(anext(chunks), idle)
                except (StopAsyncIteration, asyncio.TimeoutError):
                    return
                for line in lines.feed(chunk):
                    yield watch_event(line)

    async def close(self) -> None:
        """Close the connections."""
        await self.http.aclose()


_IDENTITY = {"Accept-Encoding": "identity", "Accept": "application/json"}


def _selector(fields: Mapping[str, str]) -> str:
    return ",".join(f"{key}={value}" for key, value in fields.items())


async def _check(response: httpx2.Response) -> None:
    if response.status_code < 300:
        return
    message = ""
    body = b""
    async for chunk in response.aiter_bytes():
        body += chunk
        if len(body) > 64 * 1024:
            break
    try:
        status = json.loads(body)
        if isinstance(status, dict):
            message = str(status.get("message", ""))
    except ValueError:
        message = ""
    raise ApiStatusError(response.status_code, message)


def watch_event(line: bytes) -> tuple[str, dict[str, Any]]:
    """One line of a watch stream as its type and object; an ``ERROR`` event raises
    ``ApiStatusError``, a line that is not an event ``ValueError``."""
    try:
        event = json.loads(line)
    except ValueError as exc:
        raise ValueError(f"watch event not JSON: {exc}") from exc
    kind = event.get("type") if isinstance(event, dict) else None
    obj = event.get("object") if isinstance(event, dict) else None
    if not isinstance(kind, str) or not isinstance(obj, dict):
        raise ValueError("watch event without a type and an object")
    if kind == "ERROR":
        code = obj.get("code")
        raise ApiStatusError(code if isinstance(code, int) else 500, str(obj.get("message", "")))
    return kind, obj
