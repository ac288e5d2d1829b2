"""A paged Synchronize (``more=true`` pages, NRI v0.8+) gathered within byte and page caps.

Sans-IO: :meth:`SyncPages.check` counts each page's request bytes before it is parsed (past a
cap it drops what it holds and raises :class:`SyncTooLarge`); :meth:`SyncPages.add` keeps the
parsed page and returns the whole set once the last page (``more=false``) arrived.
"""

from __future__ import annotations

from nri_plrm.proto import nri_api_pb2 as api

SYNC_MAX_BYTES = 64 << 20
"""Most request bytes one paged Synchronize may accumulate (64 MiB). containerd sends at most
4 MiB per page; a node of 1,000 pods and 5,000 containers at the recorded sizes (about 1.2 KB per
pod, 2.3 KB per container) is about 13 MiB, so this leaves room for containers five times that
size while bounding what a broken or hostile runtime can make the plugin hold."""
SYNC_MAX_PAGES = 64
"""Most pages (``more=true`` requests plus the last one) of one Synchronize. containerd fills each
page to about 90 % of 4 MiB, so 64 MiB needs at most 18 pages; this also bounds a flood of tiny
pages."""


class SyncTooLarge(Exception):
    """A paged Synchronize went past a cap; the message names the page, the size and the caps."""


class SyncPages:
    """The pods and containers of the Synchronize pages received so far."""

    def __init__(self, max_bytes: int = SYNC_MAX_BYTES, max_pages: int = SYNC_MAX_PAGES) -> None:
        self.max_bytes = max_bytes
        self.max_pages = max_pages
        self.reset()

    def reset(self) -> None:
        """Forget every page held (a new connection or Configure, a refused or finished sync)."""
        self.pods: list[api.PodSandbox] = []
        self.containers: list[api.Container] = []
        self.pages = 0
        self.size = 0

    def add(
        self, req: api.SynchronizeRequest
    ) -> tuple[list[api.PodSandbox], list[api.Container]] | None:
        """Add one page (counted by :meth:`check` first); the full (pods, containers) after the
        last page, None while more are due."""
        self.pods.extend(req.pods)
        self.containers.extend(req.containers)
        if req.more:
            return None
        whole = self.pods, self.containers
        self.reset()
        return whole

    def check(self, size: int) -> None:
        """Count a page of ``size`` bytes before it is parsed; past a cap, drop all and raise."""
        self.pages += 1
        self.size += size
        if self.pages <= self.max_pages and self.size <= self.max_bytes:
            return
        pages, total = self.pages, self.size
        self.reset()
        raise SyncTooLarge(
            f"Synchronize: page {pages} brings the paged request to {total} bytes; at most "
            f"{self.max_pages} pages and {self.max_bytes} bytes are accepted"
        )
