"""Fuzz the read-only checkpoint reader behind ``nri-plrm state``."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nri_plrm.checkpoint.store import data_checksum
from nri_plrm.cli.state import StateError, read_checkpoint

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.binary(max_size=300))
def test_garbage_is_a_state_error(tmp_path: Path, raw: bytes) -> None:
    (tmp_path / "state.json").write_bytes(raw)
    try:
        data = read_checkpoint(str(tmp_path))
    except StateError as exc:
        assert "state.json" in str(exc)
    else:
        assert isinstance(data, dict)


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.dictionaries(st.sampled_from(["version", "data", "checksum", "extra"]), json_values))
def test_documents(tmp_path: Path, doc: dict[str, object]) -> None:
    (tmp_path / "state.json").write_text(json.dumps(doc))
    with contextlib.suppress(StateError):
        read_checkpoint(str(tmp_path))


def test_valid_document_and_unknown_fields(tmp_path: Path) -> None:
    data = {"engine": {}, "plugin": {"pods": {}}, "future": [1]}
    doc = {"version": 1, "data": data, "checksum": data_checksum(data), "newer": True}
    (tmp_path / "state.json").write_text(json.dumps(doc))
    assert read_checkpoint(str(tmp_path)) == data


def test_symlink_is_refused(tmp_path: Path) -> None:
    (tmp_path / "elsewhere.json").write_text("{}")
    (tmp_path / "state.json").symlink_to(tmp_path / "elsewhere.json")
    with pytest.raises(StateError, match="symlink"):
        read_checkpoint(str(tmp_path))
