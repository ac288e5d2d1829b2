"""How deep a TOML text nests, measured before it is parsed.

Parsing a dotted key or a ``[table]`` header costs time and memory growing with the square of its
number of parts (a 120 KB file with a 60,000-part key takes minutes and gigabytes), and nested
arrays and inline tables are parsed by recursion. :func:`check_depth` scans the text once, in time
linear in its length, and refuses any value whose key path is deeper than :data:`MAX_KEY_DEPTH`
before the parser sees it.

A value's depth is the length of its key path as the parsed document has it: one level per part
of its ``[table]`` header and of its dotted key, one per array of tables the header goes through
(``[[a]]`` then ``[a.b]`` is ``a[-1].b``) and one per array around the value. ``a.b = [1]`` puts
``1`` at depth 3 (``a.b[0]``).

The scan follows TOML's lexical rules (quoted keys, the four kinds of strings, comments, multi-line
arrays); where the text is not TOML it stops and leaves the error to the parser, which stops there
too, before reaching anything the scan did not measure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from nri_plrm.config.settings import ConfigError, clip

MAX_KEY_DEPTH = 32
"""The deepest key path a configuration file may hold; the documented keys nest at most 3."""

_WS = re.compile(r"[ \t]*")
_BLANK = re.compile(r"(?:[ \t]|\r?\n|#[^\n]*)*")
"""Whitespace, newlines and comments: what may separate the values of an array."""
_END_OF_LINE = re.compile(r"[ \t]*(?:#[^\n]*)?(?:\r?\n|\Z)")
_BASIC = re.compile(r'"[^"\\\n]*(?:\\.[^"\\\n]*)*"')
_LITERAL = re.compile(r"'[^'\n]*'")
_KEY_PART = re.compile(rf"[A-Za-z0-9_-]+|{_BASIC.pattern}|{_LITERAL.pattern}")
"""A bare or quoted key part."""
_DOTTED = rf"(?:[ \t]*\.[ \t]*(?:{_KEY_PART.pattern}))"
_KEY_RUN = re.compile(rf"[ \t]*(?:{_KEY_PART.pattern}){_DOTTED}{{0,63}}[ \t]*")
"""The first 64 parts of a dotted key, with the whitespace around them."""
_KEY_MORE = re.compile(rf"\.[ \t]*(?:{_KEY_PART.pattern}){_DOTTED}{{0,63}}[ \t]*")
"""The next 64 parts of a longer key: one regular expression call never holds the interpreter
(and the event loop beside it) for long, whatever the key's length."""
_SCALAR = re.compile(r"[0-9A-Za-z_:.+-]+")
"""Numbers, booleans, dates and times (a date's space before its time is read as two)."""
_PLAIN_LINE = re.compile(
    rf"(?P<key>[ \t]*(?:{_KEY_PART.pattern}){_DOTTED}{{0,{MAX_KEY_DEPTH}}}[ \t]*)="
    rf"[ \t]*(?:{_SCALAR.pattern}|{_BASIC.pattern}|{_LITERAL.pattern}){_END_OF_LINE.pattern}"
)
"""The usual line, ``key = value`` with a scalar or one-line string and a key of at most 33
parts: read in one match."""
_ML_BASIC_STOP = re.compile(r'[\\"]')
_ESCAPE = re.compile(r"\\(u[0-9A-Fa-f]{4}|U[0-9A-Fa-f]{8}|x[0-9A-Fa-f]{2}|.)")
_ESCAPES = {
    "b": "\b",
    "t": "\t",
    "n": "\n",
    "f": "\f",
    "r": "\r",
    "e": "\x1b",
    '"': '"',
    "\\": "\\",
}


class _NotTOML(Exception):
    """The text stops being TOML here; the parser reports it."""


@dataclass(frozen=True)
class Depth:
    """The deepest value of a text: its depth, line (1-based), the key of its statement as
    written and whether the value lies inside that key's value (arrays, inline tables)."""

    depth: int
    line: int
    key: str
    in_value: bool


@dataclass(frozen=True)
class Shape:
    """What :func:`measure` found: the deepest value, and whether the whole text was read
    (``False``: it stops being TOML somewhere, and the parser refuses it there, or a statement
    is deeper than the limit and the scan stopped after it)."""

    deepest: Depth | None
    complete: bool


def check_depth(text: str, source: str, limit: int = MAX_KEY_DEPTH) -> None:
    """Raise ConfigError naming ``source``, the line, the key and its depth when a value of
    ``text`` nests deeper than ``limit`` levels."""
    deepest = measure(text, limit).deepest
    if deepest is None or deepest.depth <= limit:
        return
    where = "a value of " if deepest.in_value else ""
    raise ConfigError(
        [
            f"{source}: line {deepest.line}: {where}{clip(deepest.key)}: nested "
            f"{deepest.depth} levels deep: keys nest at most {limit} levels (each part of a "
            "[table] header or dotted key is one level, so is each array around a value)"
        ]
    )


def measure(text: str, limit: int = MAX_KEY_DEPTH) -> Shape:
    """The deepest value of ``text``, read in one linear pass that stops after the first
    statement deeper than ``limit``."""
    return _Scanner(text, limit).run()


def key_name(raw: str) -> str:
    """A bare or quoted key part as the parser names it (quotes removed, escapes decoded)."""
    if raw.startswith("'"):
        return raw[1:-1]
    if raw.startswith('"'):
        return _ESCAPE.sub(_unescape, raw[1:-1])
    return raw


def _unescape(match: re.Match[str]) -> str:
    code = match.group(1)
    if len(code) == 1:
        return _ESCAPES.get(code, match.group(0))
    point = int(code[1:], 16)
    return chr(point) if point <= 0x10FFFF else match.group(0)


class _Scanner:
    """One pass over the text: statements (headers, key/value lines) and the values in them.

    Where TOML 1.0 and 1.1 differ (newlines and a trailing comma in inline tables) it reads
    both, so that no parser version reads further than the scan."""

    def __init__(self, text: str, limit: int) -> None:
        self.text = text
        self.limit = limit
        self.pos = 0
        self.table_depth = 0
        self.arrays_of_tables: set[tuple[str, ...]] = set()
        self.deepest = 0
        self.deepest_at = 0
        self.deepest_key = ""
        self.deepest_in_value = False
        self.statement_key = ""

    def run(self) -> Shape:
        text = self.text
        complete = False
        try:
            while True:
                self.pos = _BLANK.match(text, self.pos).end()  # type: ignore[union-attr]
                if self.pos >= len(text):
                    complete = True
                    break
                plain = _PLAIN_LINE.match(text, self.pos)
                if plain is not None:
                    self._plain_line(plain)
                elif text[self.pos] == "[":
                    self._header()
                else:
                    self._key_value()
                if self.deepest > self.limit:
                    break
                if plain is None:
                    end = _END_OF_LINE.match(text, self.pos)
                    if end is None:
                        raise _NotTOML
                    self.pos = end.end()
        except _NotTOML:
            pass
        if not self.deepest:
            return Shape(None, complete)
        line = text.count("\n", 0, self.deepest_at) + 1
        return Shape(Depth(self.deepest, line, self.deepest_key, self.deepest_in_value), complete)

    def _header(self) -> None:
        array = self.text.startswith("[[", self.pos)
        self.pos += 2 if array else 1
        start = self.pos
        parts = self._key()
        self.statement_key = f"table [{self.text[start : self.pos].strip()}]"
        close = "]]" if array else "]"
        if not self.text.startswith(close, self.pos):
            raise _NotTOML
        self.pos += len(close)
        depth = len(parts) + array
        if depth <= self.limit:
            names = tuple(key_name(part) for part in parts)
            depth += sum(names[:i] in self.arrays_of_tables for i in range(1, len(names)))
            if array:
                self.arrays_of_tables.add(names)
        self.table_depth = depth
        self._record(depth, start, in_value=False)

    def _plain_line(self, line: re.Match[str]) -> None:
        depth = self.table_depth + len(_KEY_PART.findall(line.group("key")))
        if depth > self.deepest:
            self.statement_key = f"key {line.group('key').strip()}"
            self._record(depth, self.pos, in_value=False)
        self.pos = line.end()

    def _key_value(self) -> None:
        start = self.pos
        parts = self._key()
        self.statement_key = f"key {self.text[start : self.pos].strip()}"
        depth = self.table_depth + len(parts)
        self._record(depth, start, in_value=False)
        if depth <= self.limit:
            self._equals()
            self._value(depth)

    def _key(self) -> list[str]:
        """The parts of a dotted key (as written), whitespace around each dot skipped."""
        run = _KEY_RUN.match(self.text, self.pos)
        if run is None:
            raise _NotTOML
        parts = _KEY_PART.findall(run.group())
        while more := _KEY_MORE.match(self.text, run.end()):
            parts += _KEY_PART.findall(more.group())
            run = more
        self.pos = run.end()
        return parts

    def _equals(self) -> None:
        if not self.text.startswith("=", self.pos):
            raise _NotTOML
        self.pos = _WS.match(self.text, self.pos + 1).end()  # type: ignore[union-attr]

    def _record(self, depth: int, at: int, *, in_value: bool) -> None:
        if depth > self.deepest:
            self.deepest, self.deepest_at = depth, at
            self.deepest_key, self.deepest_in_value = self.statement_key, in_value

    def _value(self, depth: int) -> None:
        """The value at ``depth`` and everything nested in it, without recursion: ``open_``
        holds the depth and closing bracket of each array and inline table around the cursor."""
        text = self.text
        open_: list[tuple[int, str]] = []
        while True:
            if open_:
                self._record(depth, self.pos, in_value=True)
            char = text[self.pos : self.pos + 1]
            if char in ("[", "{"):
                close = "]" if char == "[" else "}"
                open_.append((depth, close))
                self.pos = _BLANK.match(text, self.pos + 1).end()  # type: ignore[union-attr]
                if not text.startswith(close, self.pos):
                    depth = depth + 1 if char == "[" else self._table_key(depth)
                    continue
                self.pos += 1
                open_.pop()
            else:
                self._scalar()
            next_depth = self._after_value(open_)
            if next_depth is None:
                return
            depth = next_depth

    def _table_key(self, outer: int) -> int:
        """Past an inline table's key and its ``=``: the depth of its value."""
        depth = outer + len(self._key())
        self._equals()
        return depth

    def _after_value(self, open_: list[tuple[int, str]]) -> int | None:
        """Past the separators and closing brackets after a value: the depth of the next value,
        or None when the outermost value ended."""
        text = self.text
        while open_:
            outer, close = open_[-1]
            self.pos = _BLANK.match(text, self.pos).end()  # type: ignore[union-attr]
            if text.startswith(",", self.pos):
                self.pos = _BLANK.match(text, self.pos + 1).end()  # type: ignore[union-attr]
                if not text.startswith(close, self.pos):
                    return outer + 1 if close == "]" else self._table_key(outer)
            if text.startswith(close, self.pos):
                self.pos += 1
                open_.pop()
                continue
            if _SCALAR.match(text, self.pos) is None:
                raise _NotTOML
            self._scalar()  # the time after a date and a space
        self.pos = _WS.match(text, self.pos).end()  # type: ignore[union-attr]
        if _SCALAR.match(text, self.pos) is not None:
            self._scalar()  # the time after a date and a space
        return None

    def _scalar(self) -> None:
        text = self.text
        if text.startswith('"""', self.pos):
            self.pos = self._multi_line_basic(self.pos + 3)
            return
        if text.startswith("'''", self.pos):
            end = text.find("'''", self.pos + 3)
            if end < 0:
                raise _NotTOML
            self.pos = _quotes_after(text, end + 3, "'")
            return
        char = text[self.pos : self.pos + 1]
        pattern = _BASIC if char == '"' else _LITERAL if char == "'" else _SCALAR
        match = pattern.match(text, self.pos)
        if match is None:
            raise _NotTOML
        self.pos = match.end()

    def _multi_line_basic(self, pos: int) -> int:
        text = self.text
        while True:
            stop = _ML_BASIC_STOP.search(text, pos)
            if stop is None:
                raise _NotTOML
            pos = stop.start()
            if text[pos] == "\\":
                pos += 2
            elif text.startswith('"""', pos):
                return _quotes_after(text, pos + 3, '"')
            else:
                pos += 1


def _quotes_after(text: str, pos: int, quote: str) -> int:
    """Past up to two more quotes closing a multi-line string (``'''a''''`` ends in ``a'``)."""
    for _ in range(2):
        if not text.startswith(quote, pos):
            break
        pos += 1
    return pos
