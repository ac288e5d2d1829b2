"""CheckpointStore: atomic versioned writes, verification, migration and quarantine."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nri_plrm.checkpoint.store import (
    CURRENT_VERSION,
    CheckpointError,
    CheckpointStore,
    NewerFormatError,
    canonical_json,
    canonical_json_steps,
    data_checksum,
)
from nri_plrm.util.steps import finish

SAMPLE: dict[str, Any] = {
    "engine": {"default": "2-31", "pods": {"uid-1": {"main-app": "0-1"}}},
    "containers": [{"id": "abc", "cpus": "0-1"}],
}


def _write_doc(path: Path, document: Any) -> None:
    path.write_text(json.dumps(document))


def test_round_trip_and_file_modes(tmp_path: Path) -> None:
    d = tmp_path / "state"
    store = CheckpointStore(d)
    assert store.load().data is None
    n = store.save(SAMPLE)
    assert n == store.path.stat().st_size
    assert stat.S_IMODE(d.stat().st_mode) == 0o700
    assert stat.S_IMODE(store.path.stat().st_mode) == 0o600
    result = CheckpointStore(d).load()
    assert result.data == SAMPLE
    assert result.problem is None
    assert result.version == CURRENT_VERSION
    assert not result.migrated
    doc = json.loads(store.path.read_text())
    assert doc["version"] == CURRENT_VERSION
    assert doc["checksum"] == data_checksum(SAMPLE)
    assert sorted(os.listdir(d)) == ["state.json"]


def test_overwrite_keeps_only_newest(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path / "s")
    store.save({"a": 1})
    store.save({"a": 2})
    assert store.load().data == {"a": 2}
    assert sorted(os.listdir(tmp_path / "s")) == ["state.json"]


def test_existing_readable_directory_is_never_chmodded(tmp_path: Path) -> None:
    d = tmp_path / "s"
    d.mkdir(mode=0o755)
    d.chmod(0o755)
    CheckpointStore(d).save({"x": 1})
    assert stat.S_IMODE(d.stat().st_mode) == 0o755
    assert CheckpointStore(d).load().data == {"x": 1}


@pytest.mark.parametrize("mode", [0o777, 0o1777, 0o770])
def test_existing_directory_writable_by_others_is_refused_not_chmodded(
    tmp_path: Path, mode: int
) -> None:
    d = tmp_path / "shared"
    d.mkdir()
    if os.geteuid() == 0:
        os.chown(d, 0, 12345)  # a group other than root's
    d.chmod(mode)
    if d.stat().st_gid == 0:
        pytest.skip("needs a directory group other than root's")
    with pytest.raises(CheckpointError, match="writable by other users"):
        CheckpointStore(d).save({"x": 1})
    assert stat.S_IMODE(d.stat().st_mode) == mode
    assert not (d / "state.json").exists()


def test_unknown_fields_of_the_same_version_are_read(tmp_path: Path) -> None:
    """Additions an older reader can ignore keep the version: such a file is read."""
    d = tmp_path / "s"
    d.mkdir(mode=0o700)
    data = {"engine": {"pods": {}}, "future_feature": {"k": [1, 2]}}
    _write_doc(
        d / "state.json",
        {
            "version": CURRENT_VERSION,
            "data": data,
            "checksum": data_checksum(data),
            "written_by": "nri-plrm 9.0",
            "extra": [1],
        },
    )
    result = CheckpointStore(d).load()
    assert result.problem is None
    assert result.data == data
    assert result.version == CURRENT_VERSION


def test_newer_version_is_refused_and_left_in_place(tmp_path: Path) -> None:
    """Issue 31 item 12: a newer format is never misread nor moved aside as corrupt: loading
    raises an error naming the file, both versions and what to do."""
    d = tmp_path / "s"
    d.mkdir(mode=0o700)
    data = {"engine": {"pods": {}}}
    doc = {"version": CURRENT_VERSION + 3, "data": data, "checksum": data_checksum(data)}
    _write_doc(d / "state.json", doc)
    before = (d / "state.json").read_bytes()
    for read in (lambda: CheckpointStore(d).load(), lambda: CheckpointStore(d).read_only()):
        with pytest.raises(NewerFormatError) as refused:
            read()
        message = str(refused.value)
        assert message.startswith(
            f"checkpoint {d / 'state.json'}: format version {CURRENT_VERSION + 3}, newer than "
            f"the version {CURRENT_VERSION} this nri-plrm reads"
        )
        assert f"move {d} aside" in message and "Rollback and downgrade" in message
        assert isinstance(refused.value, CheckpointError)
    assert (d / "state.json").read_bytes() == before
    assert sorted(p.name for p in d.iterdir()) == ["state.json"]


def test_older_version_is_migrated_and_preserved_on_save(tmp_path: Path) -> None:
    d = tmp_path / "s"
    d.mkdir(mode=0o700)
    old = {"cpus": {"pod-a/main": "0-1"}}
    _write_doc(d / "state.json", {"version": 1, "data": old, "checksum": data_checksum(old)})

    def one_to_two(data: dict[str, Any]) -> dict[str, Any]:
        pods: dict[str, dict[str, str]] = {}
        for key, cpus in data["cpus"].items():
            pod, name = key.split("/")
            pods.setdefault(pod, {})[name] = cpus
        return {"pods": pods}

    store = CheckpointStore(d, version=2, migrations={1: one_to_two})
    result = store.load()
    assert result.migrated and result.version == 1
    assert result.data == {"pods": {"pod-a": {"main": "0-1"}}}
    assert json.loads((d / "state.json").read_text())["version"] == 1
    store.save(result.data)
    assert json.loads((d / "state.json").read_text())["version"] == 2
    kept = json.loads((d / "state.json.v1").read_text())
    assert kept["data"] == old
    assert CheckpointStore(d, version=2, migrations={1: one_to_two}).load().data == result.data


def test_missing_migration_quarantines(tmp_path: Path) -> None:
    d = tmp_path / "s"
    d.mkdir(mode=0o700)
    _write_doc(d / "state.json", {"version": 1, "data": {}, "checksum": data_checksum({})})
    result = CheckpointStore(d, version=3, migrations={}).load()
    assert result.data is None
    assert result.problem is not None and result.problem.kind == "migration-failed"
    assert "no migration from version 1 to 2" in result.problem.message


def test_failing_migration_quarantines(tmp_path: Path) -> None:
    d = tmp_path / "s"
    d.mkdir(mode=0o700)
    _write_doc(d / "state.json", {"version": 1, "data": {}, "checksum": data_checksum({})})

    def broken(data: dict[str, Any]) -> dict[str, Any]:
        return {"x": data["missing"]}

    result = CheckpointStore(d, version=2, migrations={1: broken}).load()
    assert result.problem is not None and result.problem.kind == "migration-failed"
    assert (d / "state.json.corrupt-1").exists()


@pytest.mark.parametrize(
    ("content", "kind"),
    [
        (b"{", "invalid-json"),
        (b"\xff\xfe", "invalid-json"),
        (b"[]", "bad-layout"),
        (b'{"version": "1", "data": {}, "checksum": ""}', "bad-layout"),
        (b'{"version": 0, "data": {}, "checksum": ""}', "bad-layout"),
        (b'{"version": true, "data": {}, "checksum": ""}', "bad-layout"),
        (b'{"version": 1, "data": [], "checksum": ""}', "bad-layout"),
        (b'{"version": 1, "data": {"a": NaN}, "checksum": ""}', "bad-layout"),
        (b'{"version": 1, "data": {"a": 1}, "checksum": "sha256:00"}', "checksum-mismatch"),
        (b'{"version": 1, "data": {"a": 1}}', "checksum-mismatch"),
    ],
)
def test_corrupt_file_is_moved_aside(tmp_path: Path, content: bytes, kind: str) -> None:
    d = tmp_path / "s"
    d.mkdir(mode=0o700)
    (d / "state.json").write_bytes(content)
    result = CheckpointStore(d).load()
    assert result.data is None
    assert result.problem is not None
    assert result.problem.kind == kind
    assert result.problem.moved_to == d / "state.json.corrupt-1"
    assert (d / "state.json.corrupt-1").read_bytes() == content
    assert not (d / "state.json").exists()
    assert str(d / "state.json") in result.problem.message


def test_corrupt_files_are_numbered(tmp_path: Path) -> None:
    d = tmp_path / "s"
    d.mkdir(mode=0o700)
    for i in range(3):
        (d / "state.json").write_bytes(b"garbage %d" % i)
        result = CheckpointStore(d).load()
        assert result.problem is not None
        assert result.problem.moved_to == d / f"state.json.corrupt-{i + 1}"
    assert (d / "state.json.corrupt-3").read_bytes() == b"garbage 2"


def test_tampered_data_is_detected(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path / "s")
    store.save({"cpus": "0-3"})
    text = store.path.read_text().replace("0-3", "0-4")
    store.path.write_text(text)
    result = store.load()
    assert result.problem is not None and result.problem.kind == "checksum-mismatch"


def test_symlinked_state_file_is_not_followed(tmp_path: Path) -> None:
    d = tmp_path / "s"
    d.mkdir(mode=0o700)
    secret = tmp_path / "secret"
    secret.write_text("do not touch")
    (d / "state.json").symlink_to(secret)
    result = CheckpointStore(d).load()
    assert result.problem is not None and result.problem.kind == "not-regular-file"
    assert (d / "state.json.corrupt-1").is_symlink()
    CheckpointStore(d).save({"a": 1})
    assert secret.read_text() == "do not touch"


def test_symlink_in_place_of_state_file_is_replaced_not_followed(tmp_path: Path) -> None:
    d = tmp_path / "s"
    d.mkdir(mode=0o700)
    target = tmp_path / "victim"
    target.write_text("victim")
    (d / "state.json").symlink_to(target)
    (d / ".state.json.tmp").symlink_to(target)
    CheckpointStore(d).save({"a": 1})
    assert target.read_text() == "victim"
    assert not (d / "state.json").is_symlink()


def test_fifo_is_not_a_checkpoint(tmp_path: Path) -> None:
    d = tmp_path / "s"
    d.mkdir(mode=0o700)
    os.mkfifo(d / "state.json")
    result = CheckpointStore(d).load()
    assert result.problem is not None and result.problem.kind == "not-regular-file"


def test_symlinked_directory_is_refused(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(real)
    with pytest.raises(CheckpointError, match="symlink or not a directory"):
        CheckpointStore(link).load()
    with pytest.raises(CheckpointError, match="symlink"):
        CheckpointStore(link).save({})


def test_file_as_directory_is_refused(tmp_path: Path) -> None:
    f = tmp_path / "file"
    f.write_text("")
    with pytest.raises(CheckpointError, match=str(f)):
        CheckpointStore(f).load()


def test_unserialisable_data_is_refused_and_old_file_kept(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path / "s")
    store.save({"ok": True})
    with pytest.raises(CheckpointError, match="not JSON-able"):
        store.save({"bad": object()})
    with pytest.raises(CheckpointError, match="not JSON-able"):
        store.save({"bad": float("nan")})
    assert store.load().data == {"ok": True}


def test_stale_temp_file_does_not_block_saves(tmp_path: Path) -> None:
    d = tmp_path / "s"
    d.mkdir(mode=0o700)
    (d / ".state.json.tmp").write_text("half written")
    store = CheckpointStore(d)
    store.save({"a": 1})
    assert store.load().data == {"a": 1}
    assert not (d / ".state.json.tmp").exists()


def test_bad_constructor_arguments() -> None:
    with pytest.raises(ValueError, match="version 0"):
        CheckpointStore("/tmp", version=0)
    with pytest.raises(ValueError, match="plain file name"):
        CheckpointStore("/tmp", filename="a/b")


def test_canonical_json_is_order_independent() -> None:
    assert canonical_json({"b": 1, "a": [1, {"d": 2, "c": 3}]}) == b'{"a":[1,{"c":3,"d":2}],"b":1}'


_FIXTURE_OK = [HealthCheck.function_scoped_fixture]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=60, deadline=None, suppress_health_check=_FIXTURE_OK)
@given(data=st.dictionaries(st.text(max_size=8), json_values, max_size=5))
def test_fuzz_round_trip(tmp_path: Path, data: dict[str, Any]) -> None:
    store = CheckpointStore(tmp_path / "fuzz")
    store.save(data)
    assert store.load().data == data


@settings(max_examples=150, deadline=None, suppress_health_check=_FIXTURE_OK)
@given(content=st.binary(max_size=200) | st.text(max_size=200).map(str.encode))
def test_fuzz_arbitrary_bytes_never_crash(tmp_path: Path, content: bytes) -> None:
    d = tmp_path / "fuzzbytes"
    d.mkdir(mode=0o700, exist_ok=True)
    for name in os.listdir(d):
        os.unlink(d / name)
    (d / "state.json").write_bytes(content)
    result = CheckpointStore(d).load()
    if result.data is None:
        assert result.problem is not None
        assert (d / "state.json.corrupt-1").read_bytes() == content
    else:
        assert result.problem is None
        assert json.loads(content)["data"] == result.data


def test_written_document_is_canonical_json(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path / "s")
    data = {"b": [1, (2, 3)], "a": {"z": "é<&>", "y": None}}
    store.save(data)
    doc = json.loads(store.path.read_bytes())
    assert store.path.read_bytes() == canonical_json(doc) + b"\n"
    assert doc == {
        "checksum": data_checksum(doc["data"]),
        "data": json.loads(canonical_json(data)),
        "version": CURRENT_VERSION,
    }


def test_non_string_keys_are_refused(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path / "s")
    with pytest.raises(CheckpointError, match=r"data\.pods: key 1 is int"):
        store.save({"pods": {1: "x"}})
    with pytest.raises(CheckpointError, match=r"data\.l\[0\]: key None"):
        store.save({"l": [{None: 1}]})


def test_read_only_verifies_without_side_effects(tmp_path: Path) -> None:
    missing = tmp_path / "missing"
    assert CheckpointStore(missing).read_only() is None
    assert not missing.exists()
    d = tmp_path / "s"
    store = CheckpointStore(d)
    store.save(SAMPLE)
    os.chmod(d, 0o755)
    assert store.read_only() == (CURRENT_VERSION, SAMPLE)
    store.path.write_text(store.path.read_text().replace("2-31", "2-30"))
    with pytest.raises(CheckpointError, match=r"state\.json: checksum does not match the data"):
        store.read_only()
    assert sorted(p.name for p in d.iterdir()) == ["state.json"]
    assert stat.S_IMODE(d.stat().st_mode) == 0o755


deep_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.tuples(inner, inner)
        | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=40,
)


@settings(max_examples=200, deadline=None)
@given(data=deep_json)
def test_stepped_encoding_is_the_canonical_json(data: Any) -> None:
    assert finish(canonical_json_steps(data)) == canonical_json(data)


@pytest.mark.parametrize(
    ("data", "error", "message"),
    [
        ({"pods": {"a": {"x": {1: "y"}}}}, TypeError, r"data\.pods\.a\.x: key 1 is int"),
        ({"pods": {2: {}}}, TypeError, r"data\.pods: key 2 is int"),
        ({"pods": [{"a": float("nan")}]}, ValueError, "not JSON compliant"),
        ({"pods": {"a": {1, 2}}}, TypeError, "set is not JSON serializable"),
    ],
)
def test_stepped_encoding_refuses_what_json_would_change_or_cannot_hold(
    data: Any, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        finish(canonical_json_steps(data))


def test_stepped_encoding_yields_a_piece_per_value_below_the_split_depth(tmp_path: Path) -> None:
    data = {"engine": {"pods": {f"uid-{n}": {"containers": [n, n + 1]} for n in range(5)}}}
    assert sum(1 for _ in canonical_json_steps(data)) == 5
    with pytest.raises(CheckpointError, match="data is not JSON-able"):
        finish(CheckpointStore(tmp_path).encode_steps({"a": {1: 2}}))
