"""Fuzz the config parser: any input yields a Config or a ConfigError, never a crash."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from nri_plrm.config.file import parse_config
from nri_plrm.config.settings import Config, ConfigError

TABLES = [
    "nri",
    "state",
    "pod_resources",
    "metrics",
    "log",
    "topology",
    "kubernetes",
    "topology_manager",
    "cpu_manager",
    "memory_manager",
    "bogus",
]
KEYS = [
    "socket",
    "plugin_index",
    "dir",
    "mode",
    "group",
    "address",
    "level",
    "policy",
    "scope",
    "options",
    "reserved_cpus",
    "reserved_cpu_count",
    "reserved_memory",
    "enabled",
    "qps",
]
scalars = st.one_of(
    st.booleans(),
    st.integers(-(2**40), 2**40),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=12),
    st.sampled_from(["0", "0-3", "0660", "1Gi", "best-effort", "pod", "/x", "a:1", "true"]),
)


def toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    text = str(value).replace("\\", "\\\\").replace('"', '\\"')
    text = "".join(c if c.isprintable() else " " for c in text)
    return f'"{text}"'


values = st.recursive(
    scalars.map(toml_value),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3).map(lambda xs: "[" + ", ".join(xs) + "]"),
        st.dictionaries(
            st.sampled_from(["numa_node", "memory", "hugepages-2Mi", "full-pcpus-only", "x"]),
            inner,
            max_size=3,
        ).map(lambda d: "{ " + ", ".join(f'"{k}" = {v}' for k, v in d.items()) + " }"),
    ),
    max_leaves=6,
)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(TABLES), st.dictionaries(st.sampled_from(KEYS), values)))
def test_structured_configs(doc: dict[str, dict[str, str]]) -> None:
    text = "\n".join(
        f"[{table}]\n" + "\n".join(f"{k} = {v}" for k, v in body.items())
        for table, body in doc.items()
    )
    try:
        assert isinstance(parse_config(text, "fuzz"), Config)
    except ConfigError as exc:
        assert exc.errors and all(": " in e for e in exc.errors)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200))
def test_arbitrary_text(text: str) -> None:
    try:
        parse_config(text, "fuzz")
    except ConfigError as exc:
        assert exc.errors
