"""Noticing that the state directory was deleted or replaced under a running plugin.

The decision journal is an open file: after ``rm -rf`` of its directory, appends still succeed
(into an unlinked inode) and a restart finds nothing. :class:`StateDirGuard` tells, with one
``fstat`` of the journal and one ``stat`` of the directory (no flush), whether the last append
still has a durable name: the journal's link count is not 0 and the directory at the configured
path is the one the journal was created in.
"""

from __future__ import annotations

import os
from pathlib import Path


class StateDirGuard:
    """Remembers the state directory's identity (device, inode) and checks it is still there."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self._identity: tuple[int, int] | None = None

    def remember(self) -> None:
        """Record the directory's current identity (after the plugin wrote into it)."""
        try:
            st = os.stat(self.directory)
        except OSError:
            self._identity = None
            return
        self._identity = (st.st_dev, st.st_ino)

    def lost(self, journal_fd: int | None) -> str | None:
        """Why the state written since :meth:`remember` has no durable name any more, or None.

        ``journal_fd`` is the open journal (its link count drops to 0 when it is deleted)."""
        if journal_fd is not None:
            try:
                if os.fstat(journal_fd).st_nlink == 0:
                    return f"the journal in {self.directory} was deleted"
            except OSError as exc:
                return f"the journal in {self.directory} cannot be checked: {exc}"
        if self._identity is None:
            return None
        try:
            st = os.stat(self.directory)
        except FileNotFoundError:
            return f"state directory {self.directory} was deleted"
        except OSError as exc:
            return f"state directory {self.directory} cannot be checked: {exc}"
        if (st.st_dev, st.st_ino) != self._identity:
            return f"state directory {self.directory} was replaced"
        return None
