"""SyncPages: Synchronize pages gathered until the last one, within the byte and page caps."""

from __future__ import annotations

import pytest

from nri_plrm.nri.sync_pages import SyncPages, SyncTooLarge
from nri_plrm.proto import nri_api_pb2 as api


def page(first: int, n: int, more: bool) -> api.SynchronizeRequest:
    return api.SynchronizeRequest(
        pods=[api.PodSandbox(id=f"pod-{i}") for i in range(first, first + n)],
        containers=[api.Container(id=f"ctr-{i}") for i in range(first, first + n)],
        more=more,
    )


def feed(pages: SyncPages, req: api.SynchronizeRequest) -> object:
    pages.check(len(req.SerializeToString()))
    return pages.add(req)


def test_pages_are_gathered_until_the_last() -> None:
    pages = SyncPages()
    assert feed(pages, page(0, 8, more=True)) is None
    assert feed(pages, page(8, 8, more=True)) is None
    whole = feed(pages, page(16, 3, more=False))
    assert isinstance(whole, tuple)
    pods, containers = whole
    assert [p.id for p in pods] == [f"pod-{i}" for i in range(19)]
    assert len(containers) == 19
    assert (pages.pages, pages.size, pages.pods) == (0, 0, []), "reset for the next sync"


def test_page_cap_drops_everything_and_names_the_limits() -> None:
    pages = SyncPages(max_pages=2)
    feed(pages, page(0, 8, more=True))
    feed(pages, page(8, 8, more=True))
    with pytest.raises(SyncTooLarge, match=r"page 3 .* at most 2 pages and \d+ bytes"):
        pages.check(10)
    assert (pages.pages, pages.size, pages.pods, pages.containers) == (0, 0, [], [])


def test_byte_cap_counts_before_parsing() -> None:
    pages = SyncPages(max_bytes=1000)
    pages.check(600)
    with pytest.raises(SyncTooLarge, match="brings the paged request to 1001 bytes"):
        pages.check(401)
    pages.check(1000)  # a fresh count after the refusal
