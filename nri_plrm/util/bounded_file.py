"""Reading a file an operator names (configuration, manifests, CPU tables, kubeconfig): only a
regular file (or a symlink to one) of at most a given size, opened without blocking, so a FIFO,
device, socket or directory at the path is refused at once and ``/dev/zero`` cannot fill the
memory. Standard input is read up to the same kind of limit."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import IO, Any

STDIN_NAME = "<stdin>"
"""How standard input is named in errors."""

_KINDS = {
    stat.S_IFDIR: "a directory",
    stat.S_IFIFO: "a FIFO",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
}


class InputFileError(ValueError):
    """A file that cannot be read as an input; the message is ``PATH: problem: rule``."""

    def __init__(self, path: str, problem: str, *, missing: bool = False) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem
        self.missing = missing
        """Nothing exists at the path."""


def read_regular_file(path: str | Path, limit: int, what: str) -> bytes:
    """The bytes of ``path``, a regular file of at most ``limit`` bytes, called ``what`` (e.g.
    "config file") in errors; raises :class:`InputFileError` naming the path and the rule."""
    name = str(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        problem = f"cannot read the {what}: {exc.strerror or exc}"
        missing = isinstance(exc, FileNotFoundError)
        raise InputFileError(name, problem, missing=missing) from exc
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = _KINDS.get(stat.S_IFMT(st.st_mode), "not a regular file")
            mode = stat.filemode(st.st_mode)
            raise InputFileError(name, f"{kind} (mode {mode}): the {what} must be a regular file")
        if st.st_size > limit:
            raise _too_big(name, limit, what)
        chunks: list[bytes] = []
        size = 0
        while chunk := os.read(fd, limit + 1 - size):
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:
                raise _too_big(name, limit, what)
        return b"".join(chunks)
    except OSError as exc:
        raise InputFileError(name, f"cannot read the {what}: {exc.strerror or exc}") from exc
    finally:
        os.close(fd)


def read_stream(stream: IO[Any], limit: int, what: str, name: str = STDIN_NAME) -> bytes:
    """At most ``limit`` bytes of ``stream`` (standard input: its binary buffer when it has one,
    else its text encoded as UTF-8); more raises :class:`InputFileError`."""
    binary = getattr(stream, "buffer", None)
    if binary is not None:
        data = binary.read(limit + 1)
    else:
        raw = stream.read(limit + 1)
        data = raw.encode("utf-8", errors="surrogateescape") if isinstance(raw, str) else raw
    if len(data) > limit:
        raise _too_big(name, limit, what)
    return bytes(data)


def _too_big(name: str, limit: int, what: str) -> InputFileError:
    return InputFileError(name, f"larger than {limit} bytes: too large for a {what}")
