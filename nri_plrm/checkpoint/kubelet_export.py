"""Where the kubelet-format export may go, and replacing only the files the plugin wrote.

The kubelet keeps its own ``cpu_manager_state`` and ``memory_manager_state`` in its root
directory (``/var/lib/kubelet``) whatever its policy. A kubelet running with its managers set to
``none`` that finds files of policy ``static`` there refuses to start at its next restart
("configured policy "none" differs from state checkpoint policy "static""), and the node stays
down until someone deletes them. So:

- :func:`export_dir_problem` refuses (for ``check-config`` and ``run``) the directory of
  ``[state] kubelet_cpu_manager_state``, a directory holding the kubelet's ``pods``/``checkpoints``
  siblings, and one holding a state file of another policy or one the plugin did not write;
- :func:`write_owned` replaces a file only when the plugin wrote it: the directory's
  ``.nri-plrm-export`` record lists the SHA-256 of every version the plugin wrote (the current
  one and the one being written, so a crash between the two writes keeps both replaceable).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import stat
from collections.abc import Mapping
from pathlib import Path

from nri_plrm.checkpoint.atomic import open_at, open_dir, write_at
from nri_plrm.checkpoint.flusher import Flusher

CPU_MANAGER_STATE_FILE = "cpu_manager_state"
MEMORY_MANAGER_STATE_FILE = "memory_manager_state"
RECORD_FILE = ".nri-plrm-export"
"""The plugin's record of what it wrote in the export directory."""
PLUGIN_POLICIES: Mapping[str, str] = {
    CPU_MANAGER_STATE_FILE: "static",
    MEMORY_MANAGER_STATE_FILE: "Static",
}
"""The policy each exported file names (the kubelet's spelling)."""
KUBELET_NONE_POLICIES: Mapping[str, str] = {
    CPU_MANAGER_STATE_FILE: "none",
    MEMORY_MANAGER_STATE_FILE: "None",
}
KUBELET_SIBLINGS = ("pods", "checkpoints", "pod-resources", "device-plugins")
"""Entries only the kubelet's root directory has."""
MAX_STATE_BYTES = 64 << 20
"""The largest kubelet state file read (a node's memory_manager_state is far smaller)."""

_RECORD_WRITER = "nri-plrm"
_ADVICE = (
    "a kubelet running with its managers set to none refuses to start at its next restart when "
    'its checkpoint there names policy "static" (configured policy "none" differs from state '
    "checkpoint policy), and the node stays down until the files are deleted; export to a "
    "directory of its own instead (e.g. /var/lib/nri-plrm-export, see docs/config.md)"
)


class ForeignFileError(ValueError):
    """A file in the export directory that the plugin did not write; it is never replaced."""


def read_regular(path: str | os.PathLike[str], limit: int = MAX_STATE_BYTES) -> bytes | None:
    """The bytes of the regular file ``path`` (None when missing); never blocks on a FIFO.

    Raises OSError for a non-regular file or one over ``limit`` bytes.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        return _read_fd(fd, str(path), limit)
    finally:
        os.close(fd)


def _read_fd(fd: int, name: str, limit: int) -> bytes:
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise OSError(errno.EINVAL, f"{name}: mode {stat.filemode(st.st_mode)}, not a file")
    chunks = []
    size = 0
    while chunk := os.read(fd, limit + 1 - size):
        chunks.append(chunk)
        size += len(chunk)
        if size > limit:
            raise OSError(errno.EFBIG, f"{name}: larger than {limit} bytes")
    return b"".join(chunks)


def policy_of(raw: bytes) -> str | None:
    """The policy a kubelet state file names (``data.policyName`` of V4/V3 files, else the
    top-level ``policyName``), or None when it names none; no checksum check."""
    try:
        obj = json.loads(raw)
    except (UnicodeDecodeError, ValueError):
        return None
    if not isinstance(obj, dict):
        return None
    data = go_field(obj, "data")
    if isinstance(data, str):
        with contextlib.suppress(ValueError):
            inner = json.loads(data)
            if isinstance(inner, dict) and isinstance(go_field(inner, "policyName"), str):
                return str(go_field(inner, "policyName"))
    policy = go_field(obj, "policyName")
    return policy if isinstance(policy, str) else None


def go_field(obj: Mapping[str, object], name: str) -> object:
    """Go's JSON field matching: the exact key, else a case-insensitive one."""
    if name in obj:
        return obj[name]
    lowered = name.lower()
    for key, value in obj.items():
        if key.lower() == lowered:
            return value
    return None


def _digest(raw: bytes) -> str:
    return hashlib.sha256(raw).hexdigest()


def _read_record(directory: str | os.PathLike[str]) -> dict[str, list[str]]:
    """Name -> SHA-256 digests the plugin wrote; empty when the record is missing or unusable."""
    path = os.path.join(directory, RECORD_FILE)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return {}
    try:
        doc = json.loads(_read_fd(fd, path, 1 << 16))
    except (OSError, ValueError):
        return {}
    finally:
        os.close(fd)
    files = doc.get("files") if isinstance(doc, dict) else None
    if not isinstance(files, dict) or doc.get("writer") != _RECORD_WRITER:
        return {}
    return {
        name: [d for d in digests if isinstance(d, str)]
        for name, digests in files.items()
        if isinstance(name, str) and isinstance(digests, list)
    }


def _foreign(name: str, raw: bytes, record: Mapping[str, list[str]]) -> str | None:
    """Why the existing ``name`` (content ``raw``) is not the plugin's, or None when it is."""
    if _digest(raw) in record.get(name, ()):
        return None
    policy = policy_of(raw)
    if policy is not None and policy != PLUGIN_POLICIES[name]:
        return (
            f'holds {name} of policy "{policy}", the kubelet\'s own (the plugin writes '
            f'"{PLUGIN_POLICIES[name]}")'
        )
    return (
        f"holds a {name} that nri-plrm did not write (it is not in {RECORD_FILE}); if an "
        "earlier nri-plrm wrote it, delete it"
    )


def export_dir_problem(directory: str, kubelet_cpu_manager_state: str = "") -> str | None:
    """Why ``directory`` must not receive the export (None when it may)."""
    target = os.path.realpath(directory)
    if kubelet_cpu_manager_state:
        kubelet_dir = os.path.realpath(os.path.dirname(kubelet_cpu_manager_state))
        if target == kubelet_dir:
            return (
                "is the directory of state.kubelet_cpu_manager_state, the kubelet's own state "
                f"directory: {_ADVICE}"
            )
    for sibling in KUBELET_SIBLINGS:
        if os.path.lexists(os.path.join(target, sibling)):
            return (
                f"holds the kubelet's {sibling}/, so it is the kubelet's root directory: {_ADVICE}"
            )
    record = _read_record(target)
    for name in PLUGIN_POLICIES:
        try:
            raw = read_regular(os.path.join(target, name))
        except OSError as exc:
            return f"{name} there cannot be read ({exc.strerror or exc}): {_ADVICE}"
        if raw is None:
            continue
        reason = _foreign(name, raw, record)
        if reason is not None:
            return f"{reason}: {_ADVICE}"
    return None


def write_owned(
    directory: str | os.PathLike[str],
    files: Mapping[str, bytes],
    mode: int = 0o644,
    *,
    flusher: Flusher | None = None,
) -> list[Path]:
    """Atomically replace each ``directory/name`` with its bytes, only if the plugin wrote the
    file there before (or it is missing); raises ForeignFileError naming the file otherwise, and
    OSError when the directory is a symlink or a write fails. Returns the paths written. With
    ``flusher``, the fsyncs run in its background thread (see ``atomic.write_at``)."""
    path = Path(directory)
    try:
        dfd = open_dir(path, 0o755)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise OSError(
                exc.errno, f"directory {path}: is a symlink or not a directory, refusing it"
            ) from exc
        raise
    try:
        record = _read_record(path)
        digests: dict[str, list[str]] = {}
        for name, payload in files.items():
            current = _read_entry(dfd, path / name)
            keep = []
            if current is not None:
                reason = _foreign(name, current, record)
                if reason is not None:
                    raise ForeignFileError(
                        f"{path / name}: not replaced: the directory {reason}; the kubelet-format "
                        f"export needs a directory of its own ({_ADVICE})"
                    )
                keep = [_digest(current)]
            digests[name] = [_digest(payload), *keep]
        doc = {"writer": _RECORD_WRITER, "files": {**record, **digests}}
        record_bytes = json.dumps(doc, sort_keys=True).encode() + b"\n"
        write_at(dfd, RECORD_FILE, record_bytes, mode, flusher=flusher)
        for name, payload in files.items():
            write_at(dfd, name, payload, mode, flusher=flusher)
    finally:
        os.close(dfd)
    return [path / name for name in files]


def _read_entry(dfd: int, path: Path) -> bytes | None:
    try:
        fd = open_at(dfd, path.name)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise ForeignFileError(
                f"{path}: a symlink the plugin did not make: not replaced"
            ) from exc
        raise
    if fd is None:
        return None
    try:
        return _read_fd(fd, str(path), MAX_STATE_BYTES)
    finally:
        os.close(fd)
