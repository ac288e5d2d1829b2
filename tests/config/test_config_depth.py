"""The depth pre-check (issue 28, finding 7): a linear scan refuses a configuration nesting deeper
than 32 levels before the TOML parser, quadratic in a key's depth, sees it; it measures every
valid TOML document exactly as the parser builds it, so it never refuses a valid configuration
within the bound."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from daemon_process import run_cli
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nri_plrm.config.file import load_config, parse_config
from nri_plrm.config.settings import ConfigError
from nri_plrm.config.shape import MAX_KEY_DEPTH, check_depth, key_name, measure

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
HOSTILE_DOTTED_KEY = "a" + ".a" * 59_999 + " = 1\n"
"""The reported file: 120 KB, one key 60,000 levels deep."""


def document_depth(document: object) -> int:
    """The longest key path (keys and array indexes) of a parsed document."""
    deepest, pending = 0, [(document, 0)]
    while pending:
        value, depth = pending.pop()
        deepest = max(deepest, depth)
        if isinstance(value, dict):
            pending += [(v, depth + 1) for v in value.values()]
        elif isinstance(value, list):
            pending += [(v, depth + 1) for v in value]
    return deepest


def repository_tomls() -> list[tuple[str, str]]:
    """Every TOML file the repository keeps, and every ```toml snippet of its documentation."""
    listed = subprocess.run(
        ["git", "ls-files", "*.toml", "*.md", "*.yaml", "*.tpl"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    found = []
    for name in listed:
        text = (ROOT / name).read_text()
        if name.endswith(".toml"):
            found.append((name, text))
        for i, block in enumerate(re.findall(r"```toml\n(.*?)```", text, re.S)):
            found.append((f"{name} toml block {i}", block))
        if name.endswith(".yaml") and "config.toml: |" in text and "{{" not in text:
            for doc in yaml.safe_load_all(text):
                if doc and doc.get("kind") == "ConfigMap":
                    found.append((f"{name} ConfigMap", doc["data"]["config.toml"]))
    return found


@pytest.mark.parametrize(("name", "text"), repository_tomls(), ids=lambda v: str(v)[:60])
def test_every_toml_of_the_repository_is_measured_as_parsed(name: str, text: str) -> None:
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:  # a documented example must be one the plugin reads
        pytest.fail(f"{name}: not a TOML document: {exc}")
    shape = measure(text)
    assert shape.complete
    assert (shape.deepest.depth if shape.deepest else 0) == document_depth(document)
    check_depth(text, name)


def test_the_repository_holds_the_example_configs() -> None:
    names = [name for name, _ in repository_tomls()]
    assert "packaging/config.toml" in names and "examples/pod-scope.toml" in names
    assert any("docs/" in name for name in names)
    assert "packaging/kubernetes/nri-plrm.yaml ConfigMap" in names


def test_the_reported_file_is_refused_at_once_naming_file_line_depth_and_rule(
    tmp_path: Path,
) -> None:
    cfg = tmp_path / "config.toml"
    cfg.write_text('[log]\nlevel = "info"\n' + HOSTILE_DOTTED_KEY)
    started = time.monotonic()
    with pytest.raises(ConfigError) as refused:
        load_config(cfg)
    assert time.monotonic() - started < 5
    (error,) = refused.value.errors
    assert error.startswith(f"{cfg}: line 3: key a.a.a.a")
    assert "nested 60001 levels deep: keys nest at most 32 levels" in error
    assert len(error) < 500


@pytest.mark.parametrize(
    ("text", "depth", "line", "where"),
    [
        ("[" + ".".join(["t"] * 40) + "]\n", 40, 1, "table [t.t.t"),
        ("[[" + ".".join(["t"] * 32) + "]]\n", 33, 1, "table [t.t.t"),
        ("[a]\nb = 1\n" + ".".join(["k"] * 32) + " = 1\n", 33, 3, "key k.k.k"),
        ("x = " + "[" * 33 + "]" * 33 + "\n", 33, 1, "a value of key x"),
        ("x = [\n  1,\n  " + "[" * 40 + "]" * 40 + ",\n]\n", 41, 3, "a value of key x"),
        ("x = " + "{a = " * 32 + "1" + " }" * 32 + "\n", 33, 1, "a value of key x"),
        ("[[a]]\n" * 2 + "".join(f"[[a{'.a' * i}]]\n" for i in range(1, 17)), 34, 18, "table"),
    ],
)
def test_each_way_of_nesting_counts(text: str, depth: int, line: int, where: str) -> None:
    document = tomllib.loads(text) if depth < 100 else None
    assert document is None or document_depth(document) == depth
    with pytest.raises(ConfigError) as refused:
        parse_config(text, "deep.toml")
    (error,) = refused.value.errors
    assert error.startswith(f"deep.toml: line {line}: {where}"), error
    assert f"nested {depth} levels deep" in error


@pytest.mark.parametrize(
    "text",
    [
        '"' + "a." * 500 + '" = 1\n',
        "'" + "[[a.b]]" * 100 + "' = 1\n",
        'x = "' + "[{" * 500 + '"\n',
        "x = '''\n" + "[a.b.c.d]\n" * 100 + "'''\n",
        'x = """\n' + '[a.b.c.d] \\""" ""' * 100 + '"""\n',
        "# " + "[" * 1000 + "\n" + "x = [ # " + "[" * 100 + "\n 1 ]\n",
        "[" + ".".join(['"a.b.c"'] * 32) + "]\n",
    ],
)
def test_dots_and_brackets_in_strings_and_comments_do_not_count(text: str) -> None:
    depth = document_depth(tomllib.loads(text))
    assert depth <= MAX_KEY_DEPTH
    assert measure(text).deepest.depth == depth  # type: ignore[union-attr]
    check_depth(text, "strings.toml")


def test_key_names_are_decoded_like_the_parser() -> None:
    assert key_name("a") == key_name('"a"') == key_name("'a'") == key_name('"\\u0061"') == "a"
    assert key_name('"\\"\\\\"') == '"\\'
    text = '[["\\u0061"]]\n[[a.b]]\n[' + "'a'.b.c]\n"
    assert measure(text).deepest.depth == document_depth(tomllib.loads(text)) == 5  # type: ignore[union-attr]


@pytest.mark.parametrize("command", ["check-config", "run"])
def test_the_cli_refuses_the_reported_file_with_the_depth(tmp_path: Path, command: str) -> None:
    cfg = tmp_path / "config.toml"
    cfg.write_text(HOSTILE_DOTTED_KEY)
    args = ["run", "--config", str(cfg)] if command == "run" else ["check-config", str(cfg)]
    proc = run_cli(*args, timeout=30)
    assert proc.returncode == 2, proc.stderr
    assert f"{cfg}: line 1: key a.a.a" in proc.stderr
    assert "nested 60000 levels deep: keys nest at most 32 levels" in proc.stderr
    assert "Traceback" not in proc.stderr


# Hypothesis: TOML texts from the grammar's pieces (quoted keys holding dots and brackets, the
# four kinds of strings, comments, multi-line arrays, inline tables, headers, arrays of tables,
# CRLF); for every text the parser accepts, the scan reads it all and finds the parser's depth.

KEY_PARTS = st.sampled_from(
    ["a", "b", "c", '"a"', "'a'", '"\\u0061"', '"a.b"', "'[c]'", '"x\\"]"', "_-9", '""', "'='"]
)
KEYS = st.tuples(
    st.lists(KEY_PARTS, min_size=1, max_size=4), st.sampled_from([".", " . ", "\t.", ". "])
).map(lambda t: t[1].join(t[0]))
SCALARS = st.sampled_from(
    [
        "1",
        "-0.5e3",
        "true",
        "inf",
        "0x1F",
        "1979-05-27 07:32:00Z",
        "1979-05-27T07:32:00",
        "07:32:00",
        '"a.b[c]{d}"',
        '"\\"[#"',
        "'[[x]] # not a comment'",
        '"""\n[a.b]\n"" \\""" ]"""',
        '"""x""""',
        "'''\n[[t]] '' \n'''''",
        '"""\\\n  [c]"""',
        '""',
    ]
)
BLANKS = st.sampled_from([" ", "", "\n", " # c [ { \" '\n", "\r\n", "\t"])


def values(depth: int) -> st.SearchStrategy[str]:
    if depth == 0:
        return SCALARS
    inner = values(depth - 1)
    items = st.lists(st.tuples(BLANKS, inner, BLANKS).map("".join), max_size=3)
    array = st.tuples(items, st.sampled_from(["", ","])).map(
        lambda t: "[" + ",".join(t[0]) + (t[1] if t[0] else "") + "]"
    )
    table = st.lists(st.tuples(KEYS, inner), max_size=3).map(
        lambda pairs: "{" + ", ".join(f"{k} = {v}" for k, v in pairs) + "}"
    )
    return st.one_of(SCALARS, array, table)


STATEMENTS = st.one_of(
    st.tuples(KEYS, values(3)).map(lambda kv: f"{kv[0]} = {kv[1]}"),
    KEYS.map(lambda k: f"[{k}]"),
    KEYS.map(lambda k: f"[[{k}]]"),
    st.just("# [a.b.c] = {"),
    st.just(""),
)


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(STATEMENTS, st.sampled_from(["\n", "\r\n", " # x\n"])), max_size=8))
def test_the_scan_finds_the_parsers_depth_for_every_valid_text(
    statements: list[tuple[str, str]],
) -> None:
    text = "".join(s + end for s, end in statements)
    try:
        document: dict[str, Any] = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return
    shape = measure(text)
    assert shape.complete, text
    assert (shape.deepest.depth if shape.deepest else 0) == document_depth(document), text


@settings(max_examples=300, deadline=None)
@given(
    st.integers(0, 40),
    st.booleans(),
    st.integers(1, 40),
    st.lists(st.sampled_from(["[", "{"]), max_size=40),
)
def test_the_bound_refuses_exactly_the_documents_deeper_than_it(
    header: int, array_of_tables: bool, key: int, nesting: list[str]
) -> None:
    """A header, a dotted key and arrays and inline tables around its value, each of a chosen
    depth: the text is refused if and only if its document is deeper than 32 levels."""
    lines = []
    if header:
        name = ".".join(f"h{i}" for i in range(header))
        lines.append(f"[[{name}]]" if array_of_tables else f"[{name}]")
    opening = "".join("[" if c == "[" else "{v = " for c in nesting)
    closing = "".join("]" if c == "[" else "}" for c in reversed(nesting))
    lines.append(".".join(f"k{i}" for i in range(key)) + f" = {opening}1{closing}")
    text = "\n".join([*lines, ""])
    expected = document_depth(tomllib.loads(text))
    if expected <= MAX_KEY_DEPTH:
        assert measure(text).deepest.depth == expected  # type: ignore[union-attr]
        check_depth(text, "gen.toml")
    else:
        with pytest.raises(ConfigError, match="levels deep: keys nest at most 32 levels"):
            check_depth(text, "gen.toml")


@settings(max_examples=3000, deadline=None)
@given(st.text(alphabet="ab1.=\"'[]{},# \t\n\r\\", max_size=40))
def test_the_scan_agrees_with_the_parser_on_any_text_it_accepts(text: str) -> None:
    """Texts of TOML's significant characters: whatever the parser accepts, the scan reads
    whole, to the same depth."""
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return
    shape = measure(text)
    assert shape.complete, text
    assert (shape.deepest.depth if shape.deepest else 0) == document_depth(document), text


@pytest.mark.parametrize("parts", [31, 32, 33, 63, 64, 65, 128, 129, 500])
@pytest.mark.parametrize("line", ["key", "header", "nested"])
def test_long_keys_are_counted_whole(parts: int, line: str) -> None:
    """Keys are read 64 parts at a time (no single long regular expression call): every part
    counts, whatever its spelling and the whitespace around its dots."""
    spellings = ["a", '"b.c"', "'d[e]'", "f"]
    separators = [".", " . ", "\t.", ". "]
    key = spellings[0] + "".join(separators[i % 4] + spellings[i % 4] for i in range(1, parts))
    text = {
        "key": f"{key} = 1\n",
        "header": f"[{key}]\n",
        "nested": f"x = {{ {key} = [1] }}\n",
    }[line]
    expected = document_depth(tomllib.loads(text))
    assert expected == {"key": parts, "header": parts, "nested": parts + 2}[line]
    assert measure(text).deepest.depth == expected  # type: ignore[union-attr]
