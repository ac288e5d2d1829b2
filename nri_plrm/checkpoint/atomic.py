"""Atomic file replacement: a fully written temp file in the same directory renamed over the
name, so a reader (or a process restarted after a crash) sees the old file or the new one,
never a mix.

Durability against power loss comes from ``fsync``: of the temp file before the rename and of
the directory after it (the default), or, given a :class:`Flusher`, of the file and then the
directory in the background after the rename, so the caller never waits for the disk. In that
case a power loss before the background sync can leave, on some filesystems, the new name with
no data (an empty file): readers must treat an empty file as a lost one.

Every name is opened relative to a directory file descriptor with ``O_NOFOLLOW``, so a symlink
planted in the directory is replaced, never followed.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from nri_plrm.checkpoint.flusher import Flusher


def open_dir(path: Path, mode: int) -> int:
    """Create ``path`` (parents too) with ``mode`` if missing and open it without following a
    symlink; raises OSError (ELOOP/ENOTDIR when it is a symlink or not a directory)."""
    path.mkdir(mode=mode, parents=True, exist_ok=True)
    return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)


def open_at(dfd: int, name: str) -> int | None:
    """Open ``name`` inside the open directory ``dfd`` for reading, or None when it is missing;
    never follows a symlink (OSError ELOOP) nor blocks on a FIFO."""
    try:
        return os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dfd)
    except FileNotFoundError:
        return None


def write_at(
    dfd: int, name: str, payload: bytes, mode: int, *, flusher: Flusher | None = None
) -> None:
    """Atomically replace ``name`` inside the open directory ``dfd``: durably before returning,
    or, with ``flusher``, durably soon after (the flusher syncs the file, then the directory)."""
    tmp = f".{name}.tmp"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp, dir_fd=dfd)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(tmp, flags, mode, dir_fd=dfd)
    try:
        os.fchmod(fd, mode)
        view = memoryview(payload)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        if flusher is None:
            os.fsync(fd)
        os.rename(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp, dir_fd=dfd)
        raise
    if flusher is None:
        os.close(fd)
        os.fsync(dfd)
    else:
        flusher.sync_once(fd, label=name)
        flusher.sync_once(os.dup(dfd), label=f"directory of {name}")


def move_aside(dfd: int, name: str) -> str:
    """Rename ``name`` inside the open directory ``dfd`` to the first free ``<name>.corrupt-<n>``
    (n from 1), fsync the directory and return the new name; raises OSError."""
    n = 1
    while True:
        target = f"{name}.corrupt-{n}"
        try:
            os.stat(target, dir_fd=dfd, follow_symlinks=False)
        except FileNotFoundError:
            break
        n += 1
    os.rename(name, target, src_dir_fd=dfd, dst_dir_fd=dfd)
    os.fsync(dfd)
    return target
