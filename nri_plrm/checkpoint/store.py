"""The plugin's own state file: versioned, checksummed, written atomically, never lost silently.

Layout (``state.json``)::

    {"version": N, "data": {...}, "checksum": "sha256:<hex of canonical JSON of data>"}

Rules, learned from the kubelet's checkpoint history (V3 broke older readers, V4 fixed it):

- Readers ignore top-level fields they do not know, and the checksum covers ``data`` exactly as
  stored, so an older plugin can read a file a newer one of the same ``version`` wrote (it hands
  the newer ``data`` to its caller, who ignores unknown keys there too). Additions older readers
  can ignore keep the version; a change they would misread raises :data:`CURRENT_VERSION` (with
  a migration), and a reader refuses a version newer than its own (:class:`NewerFormatError`,
  the plugin does not start) rather than misread it: the file is left in place for the newer
  plugin (docs/operations.md, "Rollback and downgrade").
- Files of an older version are migrated forward in memory, one step at a time, through the
  registered migrations (``MIGRATIONS[n]`` turns version ``n`` data into version ``n + 1``). The
  file on disk is left as it is until the next :meth:`CheckpointStore.save`, which first keeps a
  copy of the pre-migration file as ``state.json.v<n>`` so a downgrade can still find it.
- Writes go to a temporary file in the same directory, fully written, then renamed over the
  state file: the death of the process at any moment leaves the old or the new file, never a
  torn one. The file and the directory are then fsynced by the store's :class:`Flusher` in the
  background (:meth:`CheckpointStore.save` never waits for the disk; :meth:`CheckpointStore.close`
  does). A power loss before that sync may leave, on some filesystems, an empty (or NUL-filled)
  ``state.json``: it is treated as unusable like any corrupt file (``empty``).
- The directory must be a real directory (not a symlink) owned by this user and writable by no
  other user; it is created with mode 0700, and a wider existing one is never chmodded (a
  writable one is refused, a readable one left as it is). Files are created with mode 0600 and
  opened with ``O_NOFOLLOW`` relative to the directory, so a symlink planted in the directory is
  never followed.
- A file that cannot be used (unreadable, not JSON, wrong layout, checksum mismatch, a symlink or
  special file, a failed migration) is renamed to ``state.json.corrupt-<n>`` and reported in
  :class:`LoadResult.problem`; the caller rebuilds from what the runtime reports and counts it.

One process writes a state directory at a time (the daemon); concurrent writers are not supported.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nri_plrm.checkpoint.atomic import move_aside, open_at, open_dir, write_at
from nri_plrm.checkpoint.flusher import Flusher
from nri_plrm.util.steps import Steps

CURRENT_VERSION = 1
"""The layout version this plugin writes."""

STATE_FILE = "state.json"

Migration = Callable[[dict[str, Any]], dict[str, Any]]
"""Turns the ``data`` of version n into the ``data`` of version n + 1."""

MIGRATIONS: Mapping[int, Migration] = {}
"""Registered migrations by source version. Version 1 is the first layout, so none exist yet."""

_CHECKSUM_PREFIX = "sha256:"
_MAX_FILE_BYTES = 256 * 1024 * 1024


class CheckpointError(Exception):
    """The state directory or file cannot be used safely (names the path and the rule)."""


class NewerFormatError(CheckpointError):
    """A state file (checkpoint or journal) written in a format version newer than this code
    reads: refused, never misread, and left in place for the version that wrote it."""

    def __init__(self, what: str, path: Path, found: int, supported: int) -> None:
        super().__init__(
            f"{what} {path}: format version {found}, newer than the version {supported} this "
            "nri-plrm reads (a newer nri-plrm wrote it); nothing was changed. Run the newer "
            "version again, or, to downgrade, drain the node, stop the plugin and move "
            f"{path.parent} aside so this version starts empty and adopts the running "
            'containers (docs/operations.md, "Rollback and downgrade")'
        )
        self.path = path
        self.found = found
        self.supported = supported


@dataclass(frozen=True)
class CheckpointProblem:
    """Why a state file was not used, and where it was moved to."""

    kind: str
    """``unreadable``, ``not-regular-file``, ``empty``, ``invalid-json``, ``bad-layout``,
    ``checksum-mismatch`` or ``migration-failed``."""
    message: str
    moved_to: Path | None

    def __str__(self) -> str:
        where = f"; kept as {self.moved_to}" if self.moved_to else ""
        return f"{self.message}{where}"


@dataclass(frozen=True)
class LoadResult:
    """What :meth:`CheckpointStore.load` found.

    ``data`` is None when there was no file or it was unusable; ``problem`` says why in the second
    case. ``version`` is the layout version read from disk, ``migrated`` whether ``data`` was
    migrated forward from it.
    """

    data: dict[str, Any] | None
    problem: CheckpointProblem | None = None
    version: int | None = None
    migrated: bool = False


def canonical_json(data: Any) -> bytes:
    """Deterministic JSON bytes: sorted keys, no blanks, UTF-8, no NaN/Infinity."""
    return json.dumps(
        data, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode("utf-8")


SPLIT_DEPTH = 3
"""Levels of mappings and lists :func:`canonical_json_steps` walks itself (deeper values are
encoded in one piece each: a pod's record at the third level of the ledger's data)."""


def canonical_json_steps(data: Any, path: str = "data") -> Steps[bytes]:
    """:func:`canonical_json` of ``data`` (the same bytes), yielding between pieces (a value
    below ``SPLIT_DEPTH`` levels each). Raises TypeError naming the path of a key that is not a
    string (JSON would turn it into one) or a value JSON cannot hold, ValueError for NaN."""
    pieces: list[str] = []
    yield from _json_pieces(data, path, SPLIT_DEPTH, pieces)
    return "".join(pieces).encode("utf-8")


def _json_pieces(value: Any, path: str, depth: int, out: list[str]) -> Steps[None]:
    if depth and isinstance(value, dict):
        out.append("{")
        for n, key in enumerate(sorted(value)):
            if type(key) is not str:
                raise TypeError(f"{path}: key {key!r} is {type(key).__name__}, must be a string")
            out.append(f"{',' if n else ''}{json.dumps(key, ensure_ascii=False)}:")
            yield from _json_pieces(value[key], f"{path}.{key}", depth - 1, out)
        out.append("}")
    elif depth and isinstance(value, (list, tuple)):
        out.append("[")
        for n, item in enumerate(value):
            if n:
                out.append(",")
            yield from _json_pieces(item, f"{path}[{n}]", depth - 1, out)
        out.append("]")
    else:
        if _may_have_bad_keys(value):
            _check_keys(value, path)
        out.append(
            json.dumps(
                value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
            )
        )
        yield


def data_checksum(data: Any) -> str:
    """The checksum stored beside ``data``: ``sha256:`` + hex digest of its canonical JSON."""
    return _CHECKSUM_PREFIX + hashlib.sha256(canonical_json(data)).hexdigest()


def _check_keys(value: Any, path: str) -> None:
    """Refuse mapping keys that are not strings: JSON would turn them into strings, so the data
    read back would differ from the data saved (and its checksum with it)."""
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(f"{path}: key {key!r} is {type(key).__name__}, must be a string")
            _check_keys(item, f"{path}.{key}")
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            _check_keys(item, f"{path}[{i}]")


_LEAVES = frozenset({str, int, float, bool, type(None)})


def _may_have_bad_keys(value: Any) -> bool:
    """Fast scan for :func:`_check_keys`: False when every mapping key is exactly ``str``.

    Iterative, with exact type tests, so a large state costs one pass without building paths
    (a mapping's leaf values are not stacked); only a True answer pays for the path-naming
    walk."""
    stack = [value]
    push, pop = stack.append, stack.pop
    while stack:
        item = pop()
        kind = type(item)
        if kind is dict:
            for key, member in item.items():
                if type(key) is not str:
                    return True
                if type(member) not in _LEAVES:
                    push(member)
        elif kind is list or kind is tuple:
            stack.extend(item)
        elif kind in _LEAVES:
            continue
        elif isinstance(item, Mapping):
            if not all(isinstance(key, str) for key in item):
                return True
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    return False


class _Unusable(Exception):
    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


class CheckpointStore:
    """The state file ``<directory>/state.json``; see the module docs for the guarantees.

    ``flusher`` (the store's own when not given) syncs written files in the background; share it
    with the decision journal of the same directory (``DecisionJournal(..., flusher=...)``)."""

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        version: int = CURRENT_VERSION,
        migrations: Mapping[int, Migration] = MIGRATIONS,
        filename: str = STATE_FILE,
        flusher: Flusher | None = None,
    ) -> None:
        if version < 1:
            raise ValueError(f"checkpoint version {version}: must be >= 1")
        if "/" in filename or filename in ("", ".", ".."):
            raise ValueError(f"checkpoint file name {filename!r}: must be a plain file name")
        self.directory = Path(directory)
        self.filename = filename
        self.version = version
        self.migrations = dict(migrations)
        self.flusher = flusher if flusher is not None else Flusher()
        self._migrated_from: int | None = None

    @property
    def path(self) -> Path:
        """The state file's path."""
        return self.directory / self.filename

    def load(self) -> LoadResult:
        """Read, verify and migrate the state file.

        Returns ``LoadResult(None)`` when there is no file. An unusable file is moved aside and
        reported in ``problem``. Raises CheckpointError when the directory itself is unsafe, and
        :class:`NewerFormatError` (the file left in place) for a version newer than this one.
        """
        dfd = self._open_dir()
        try:
            try:
                raw = self._read(dfd)
            except _Unusable as bad:
                return LoadResult(None, self._quarantine(dfd, bad))
            if raw is None:
                return LoadResult(None)
            try:
                found, data = self._decode(raw)
                self._refuse_newer(found)
                migrated_data = self._migrate(found, data)
            except _Unusable as bad:
                return LoadResult(None, self._quarantine(dfd, bad))
            migrated = found < self.version
            self._migrated_from = found if migrated else None
            return LoadResult(migrated_data, None, found, migrated)
        finally:
            os.close(dfd)

    def read_only(self) -> tuple[int, dict[str, Any]] | None:
        """The state file's version and verified (not migrated) data, with no side effect:
        nothing is created, moved aside or re-moded. None when there is no file; raises
        CheckpointError naming the path and the problem otherwise."""
        try:
            dfd = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise CheckpointError(f"state directory {self.directory}: cannot open: {exc}") from exc
        try:
            raw = self._read(dfd)
            if raw is None:
                return None
            found = self._decode(raw)
            self._refuse_newer(found[0])
            return found
        except _Unusable as bad:
            raise CheckpointError(bad.message) from bad
        finally:
            os.close(dfd)

    def save(self, data: Mapping[str, Any]) -> int:
        """Write ``data`` atomically (the flusher makes it durable in the background); returns
        the number of bytes written.

        Raises CheckpointError (naming the path and the cause) when the data is not JSON-able or
        the write fails; the previous file is then still in place.
        """
        return self.write(self.encode(data))

    def encode(self, data: Mapping[str, Any]) -> bytes:
        """``data`` as stored (canonical JSON). Raises CheckpointError when it is not
        JSON-able."""
        try:
            if _may_have_bad_keys(data):
                _check_keys(data, "data")
            return canonical_json(data)
        except (TypeError, ValueError) as exc:
            raise CheckpointError(f"checkpoint {self.path}: data is not JSON-able: {exc}") from exc

    def encode_steps(self, data: Mapping[str, Any]) -> Steps[bytes]:
        """:meth:`encode` in pieces (:func:`canonical_json_steps`), for a thread that lets the
        event loop run between them. Raises CheckpointError when it is not JSON-able."""
        try:
            return (yield from canonical_json_steps(data))
        except (TypeError, ValueError) as exc:
            raise CheckpointError(f"checkpoint {self.path}: data is not JSON-able: {exc}") from exc

    def write(self, body: bytes) -> int:
        """Replace the file with encoded data ``body`` (:meth:`encode`) and its checksum,
        atomically; returns the file's size. Raises CheckpointError. One writer at a time:
        callers on several threads serialise."""
        checksum = _CHECKSUM_PREFIX + hashlib.sha256(body).hexdigest()
        # canonical_json of {"checksum", "data", "version"}: keys in sorted order, built by hand
        # so the (large) data is serialised once.
        payload = b"".join(
            (
                b'{"checksum":"',
                checksum.encode("ascii"),
                b'","data":',
                body,
                b',"version":',
                str(self.version).encode("ascii"),
                b"}\n",
            )
        )
        dfd = self._open_dir()
        try:
            if self._migrated_from is not None:
                self._keep_old_version(dfd, self._migrated_from)
            write_at(dfd, self.filename, payload, 0o600, flusher=self.flusher)
            self._migrated_from = None
        except OSError as exc:
            raise CheckpointError(f"checkpoint {self.path}: write failed: {exc}") from exc
        finally:
            os.close(dfd)
        return len(payload)

    def close(self) -> None:
        """Wait until every save is on the device and stop the flusher (clean shutdown)."""
        self.flusher.close()

    def _open_dir(self) -> int:
        path = self.directory
        try:
            dfd = open_dir(path, 0o700)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                raise CheckpointError(
                    f"state directory {path}: is a symlink or not a directory; "
                    "it must be a real directory"
                ) from exc
            raise CheckpointError(f"state directory {path}: cannot use it: {exc}") from exc
        try:
            st = os.fstat(dfd)
            if st.st_uid != os.geteuid():
                raise CheckpointError(
                    f"state directory {path}: owned by uid {st.st_uid}, "
                    f"must be owned by this process's uid {os.geteuid()}"
                )
            mode = stat.S_IMODE(st.st_mode)
            if mode & stat.S_IWOTH or (mode & stat.S_IWGRP and st.st_gid != 0):
                # Never chmod a directory the plugin did not create: on a shared directory that
                # breaks the host. Refuse it instead.
                raise CheckpointError(
                    f"state directory {path}: mode {stat.filemode(st.st_mode)}, gid "
                    f"{st.st_gid}: writable by other users, who could replace the checkpoint; "
                    "use a directory of its own that only root can write"
                )
        except BaseException:
            os.close(dfd)
            raise
        return dfd

    def _read(self, dfd: int) -> bytes | None:
        try:
            fd = open_at(dfd, self.filename)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise _Unusable(
                    "not-regular-file", f"checkpoint {self.path}: is a symlink, refusing to follow"
                ) from exc
            raise _Unusable("unreadable", f"checkpoint {self.path}: cannot open: {exc}") from exc
        if fd is None:
            return None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise _Unusable(
                    "not-regular-file",
                    f"checkpoint {self.path}: mode {stat.filemode(st.st_mode)}, "
                    "must be a regular file",
                )
            if st.st_size > _MAX_FILE_BYTES:
                raise _Unusable(
                    "unreadable",
                    f"checkpoint {self.path}: {st.st_size} bytes, "
                    f"larger than the {_MAX_FILE_BYTES} byte limit",
                )
            chunks = []
            while chunk := os.read(fd, 1 << 20):
                chunks.append(chunk)
            return b"".join(chunks)
        except OSError as exc:
            raise _Unusable("unreadable", f"checkpoint {self.path}: cannot read: {exc}") from exc
        finally:
            os.close(fd)

    def _decode(self, raw: bytes) -> tuple[int, dict[str, Any]]:
        if not raw.strip(b"\0 \t\r\n"):
            raise _Unusable(
                "empty",
                f"checkpoint {self.path}: {len(raw)} bytes and no data (a power loss before "
                "the background sync of its last write)",
            )
        try:
            document = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise _Unusable("invalid-json", f"checkpoint {self.path}: not JSON: {exc}") from exc
        if not isinstance(document, dict):
            raise _Unusable(
                "bad-layout",
                f"checkpoint {self.path}: top level is {type(document).__name__}, "
                "must be an object",
            )
        version = document.get("version")
        if not isinstance(version, int) or isinstance(version, bool) or version < 1:
            raise _Unusable(
                "bad-layout",
                f"checkpoint {self.path}: version {version!r}, must be an integer >= 1",
            )
        data = document.get("data")
        if not isinstance(data, dict):
            raise _Unusable(
                "bad-layout", f"checkpoint {self.path}: data {type(data).__name__}, must be object"
            )
        stored = document.get("checksum")
        try:
            expected = data_checksum(data)
        except ValueError as exc:
            raise _Unusable(
                "bad-layout", f"checkpoint {self.path}: data has non-finite numbers: {exc}"
            ) from exc
        if stored != expected:
            raise _Unusable(
                "checksum-mismatch",
                f"checkpoint {self.path}: checksum does not match the data (stored {stored!r}, "
                f"computed {expected}); the file was changed or damaged",
            )
        return version, data

    def _refuse_newer(self, found: int) -> None:
        if found > self.version:
            raise NewerFormatError("checkpoint", self.path, found, self.version)

    def _migrate(self, version: int, data: dict[str, Any]) -> dict[str, Any]:
        current = data
        for step in range(version, self.version):
            migration = self.migrations.get(step)
            if migration is None:
                raise _Unusable(
                    "migration-failed",
                    f"checkpoint {self.path}: version {version}, no migration from "
                    f"version {step} to {step + 1}",
                )
            try:
                current = migration(current)
            except (KeyError, TypeError, ValueError) as exc:
                raise _Unusable(
                    "migration-failed",
                    f"checkpoint {self.path}: migration from version {step} to {step + 1} "
                    f"failed: {exc!r}",
                ) from exc
        return current

    def _quarantine(self, dfd: int, bad: _Unusable) -> CheckpointProblem:
        try:
            target = move_aside(dfd, self.filename)
        except OSError as exc:
            return CheckpointProblem(
                bad.kind, f"{bad.message}; moving it aside failed: {exc}", None
            )
        return CheckpointProblem(bad.kind, bad.message, self.directory / target)

    def _keep_old_version(self, dfd: int, version: int) -> None:
        fd = open_at(dfd, self.filename)
        if fd is None:
            return
        try:
            content = b"".join(iter(lambda: os.read(fd, 1 << 20), b""))
        finally:
            os.close(fd)
        write_at(dfd, f"{self.filename}.v{version}", content, 0o600, flusher=self.flusher)
