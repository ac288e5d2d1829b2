"""Reading the API server's answers within bounds, without I/O: a list page item by item and a
watch stream line by line.

``ListPage`` decodes one ``PodList`` page one item at a time, so a caller can yield to the event
loop between items (a page is never decoded in one step). ``LineSplitter`` cuts a watch stream
into lines and refuses a line longer than its cap before it is held whole.
"""

from __future__ import annotations

import json
import re
from collections.abc import Generator, Iterator
from typing import Any

_SPACE = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()


class Refused(Exception):
    """The API server's answer went past a cap: ``reason`` is the metric label (``list_pages``,
    ``list_bytes``, ``watch_line``), the message names the cap and the value."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class PageError(ValueError):
    """A list page that is not a JSON object with an ``items`` array."""


class ListPage:
    """One page of a list answer (``text``, ``size`` bytes on the wire).

    Iterate :meth:`items` to the end first; ``continue_token`` and ``resource_version`` come from
    the page's ``metadata`` (which may follow the items)."""

    def __init__(self, text: str, size: int) -> None:
        self.text = text
        self.size = size
        self._fields: dict[str, Any] = {}

    @property
    def continue_token(self) -> str:
        """``metadata.continue`` (empty on the last page)."""
        return _text(self._metadata().get("continue"))

    @property
    def resource_version(self) -> str:
        """``metadata.resourceVersion``."""
        return _text(self._metadata().get("resourceVersion"))

    def items(self) -> Iterator[Any]:
        """The page's items, decoded one at a time; raises PageError on anything else."""
        text = self.text
        try:
            at = self._expect(text, _skip(text, 0), "{")
            if text[at] == "}":
                return
            while True:
                key, at = _DECODER.raw_decode(text, at)
                at = self._expect(text, at, ":")
                if key == "items" and text[at] == "[":
                    at = yield from self._array(text, _skip(text, at + 1))
                else:
                    self._fields[str(key)], at = _DECODER.raw_decode(text, at)
                at = _skip(text, at)
                if text[at] == "}":
                    return
                at = self._expect(text, at, ",")
        except (IndexError, ValueError) as exc:
            raise PageError(f"pod list page ({self.size} bytes): not a list answer: {exc}") from exc
        finally:
            self.text = ""  # what was decoded is in the items; the text is not needed any more

    def _array(self, text: str, at: int) -> Generator[Any, None, int]:
        if text[at] == "]":
            return at + 1
        while True:
            item, at = _DECODER.raw_decode(text, at)
            yield item
            at = _skip(text, at)
            if text[at] == "]":
                return at + 1
            at = self._expect(text, at, ",")

    @staticmethod
    def _expect(text: str, at: int, char: str) -> int:
        at = _skip(text, at)
        if text[at] != char:
            raise ValueError(f"expected {char!r} at offset {at}, found {text[at]!r}")
        return _skip(text, at + 1)

    def _metadata(self) -> dict[str, Any]:
        meta = self._fields.get("metadata")
        return meta if isinstance(meta, dict) else {}


class LineSplitter:
    """Cuts a byte stream into lines (blank lines dropped); a line longer than ``max_line``
    bytes raises :class:`Refused` as soon as its first ``max_line + 1`` bytes arrived."""

    def __init__(self, max_line: int) -> None:
        self.max_line = max_line
        self._parts: list[bytes] = []
        self._size = 0

    def feed(self, data: bytes) -> list[bytes]:
        """The lines ``data`` completes, in order."""
        lines: list[bytes] = []
        start = 0
        while (end := data.find(b"\n", start)) >= 0:
            piece = data[start:end]
            self._check(self._size + len(piece))
            line = b"".join([*self._parts, piece]) if self._parts else piece
            self._parts.clear()
            self._size = 0
            if line.strip():
                lines.append(line)
            start = end + 1
        if start < len(data):
            rest = data[start:]
            self._check(self._size + len(rest))
            self._parts.append(rest)
            self._size += len(rest)
        return lines

    def _check(self, size: int) -> None:
        if size > self.max_line:
            self._parts.clear()
            self._size = 0
            raise Refused(
                "watch_line",
                f"watch line longer than {self.max_line} bytes (at least {size} so far): "
                "refused unread",
            )


def _skip(text: str, at: int) -> int:
    match = _SPACE.match(text, at)
    return match.end() if match is not None else at


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""
