"""Crash-safe file replacement: temp file in the same directory, fsync, rename, fsync the dir.

Every name is opened relative to a directory file descriptor with ``O_NOFOLLOW``, so a symlink
planted in the directory is replaced, never followed.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


def open_dir(path: Path, mode: int) -> int:
    """Create ``path`` (parents too) with ``mode`` if missing and open it without following a
    symlink; raises OSError (ELOOP/ENOTDIR when it is a symlink or not a directory)."""
    path.mkdir(mode=mode, parents=True, exist_ok=True)
    return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)


def write_at(dfd: int, name: str, payload: bytes, mode: int) -> None:
    """Atomically and durably replace ``name`` inside the open directory ``dfd``."""
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
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        os.unlink(tmp, dir_fd=dfd)
        raise
    os.close(fd)
    os.rename(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
    os.fsync(dfd)


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
