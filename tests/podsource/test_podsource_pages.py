"""Reading list pages item by item and watch streams line by line, within caps (no I/O)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nri_plrm.podsource.pages import LineSplitter, ListPage, PageError, Refused


def page(body: object, indent: int | None = None) -> ListPage:
    text = json.dumps(body, indent=indent)
    return ListPage(text, len(text))


@pytest.mark.parametrize("indent", [None, 2])
def test_items_then_metadata_in_either_order(indent: int | None) -> None:
    items = [{"metadata": {"uid": "a"}}, {"metadata": {"uid": "b"}}]
    meta = {"resourceVersion": "7", "continue": "tok"}
    for body in (
        {"kind": "PodList", "metadata": meta, "items": items},
        {"items": items, "metadata": meta, "kind": "PodList"},
    ):
        listed = page(body, indent)
        assert list(listed.items()) == items
        assert (listed.continue_token, listed.resource_version) == ("tok", "7")


def test_empty_and_last_pages() -> None:
    listed = page({"items": [], "metadata": {"resourceVersion": "3"}})
    assert list(listed.items()) == []
    assert listed.continue_token == "" and listed.resource_version == "3"
    assert list(page({}).items()) == []


@pytest.mark.parametrize(
    "text", ['{"items": [1, 2', '{"items": [1 2]}', "[1, 2]", '{"items": [1],}', "", "{"]
)
def test_a_page_that_is_not_a_list_answer_is_an_error(text: str) -> None:
    with pytest.raises(PageError, match="not a list answer"):
        list(ListPage(text, len(text)).items())


def test_lines_across_chunks_and_blank_lines() -> None:
    lines = LineSplitter(100)
    assert lines.feed(b'{"a":') == []
    assert lines.feed(b"1}\n\n  \n{") == [b'{"a":1}']
    assert lines.feed(b"}\n") == [b"{}"]


def test_a_long_line_is_refused_before_it_ends() -> None:
    lines = LineSplitter(10)
    assert lines.feed(b"0123456789") == []
    with pytest.raises(Refused) as refused:
        lines.feed(b"x")  # the 11th byte, no newline yet
    assert refused.value.reason == "watch_line"
    assert "longer than 10 bytes" in str(refused.value)


@given(st.lists(st.binary(max_size=30), max_size=20), st.integers(1, 40))
def test_splitting_matches_splitlines(chunks: list[bytes], cap: int) -> None:
    data = b"".join(chunks)
    expected = [line for line in data.split(b"\n")[:-1] if line.strip()]
    lines = LineSplitter(cap)
    got: list[bytes] = []
    try:
        for chunk in chunks:
            got.extend(lines.feed(chunk))
    except Refused:
        assert any(len(line) > cap for line in data.split(b"\n"))
        return
    assert got == expected
