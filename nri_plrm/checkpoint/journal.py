"""The decision journal: an append-only, checksummed log of the plugin's decisions since its last
full checkpoint, so each decision costs one small ``write`` instead of a full state rewrite. The
plugin folds it into ``state.json`` in the background and replays it on start.

An append is complete once its ``write`` returned: the record is in the page cache and survives
the plugin's death. The device flush (``fdatasync``) runs in a background :class:`Flusher`
thread, batched, so no reply waits for the disk; a power loss can cut the file anywhere after
the last background flush, which the checksums and the torn-tail rule below detect.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import zlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from nri_plrm.checkpoint.atomic import move_aside, open_at, open_dir, write_at
from nri_plrm.checkpoint.flusher import Flusher, SyncTarget
from nri_plrm.checkpoint.store import NewerFormatError

JOURNAL_FILE = "journal.jsonl"
"""File name of the journal inside the state directory."""
JOURNAL_FORMAT = 2
"""The journal format this code writes (the header's ``format``; a header without one is 1).
A journal of a newer format is refused (:class:`NewerFormatError`), never misread. Format 2
added the ``readmit`` record (a promotion or demotion with the container it is for, one
decision), which a format-1 reader would stop at as damage and drop the decisions after it;
format-1 journals (``promote``/``demote`` then ``place``) are read as they are."""

Record = dict[str, Any]
"""One journal record (a decision's inputs, replayable through the engine)."""


class JournalError(Exception):
    """The decision journal cannot be written (names the path and the cause)."""


class DecisionJournal:
    """Append-only, checksummed log of the decisions made since the last full checkpoint.

    One line per record: ``<crc32 hex> <canonical JSON>``. The first record is a header
    ``{"format": f, "generation": g}`` naming the journal format (:data:`JOURNAL_FORMAT`) and
    the checkpoint generation the records apply to. A torn last
    line (crash mid-write, never acknowledged) is ignored; a bad line before it means the file
    was damaged: it is moved aside as ``journal.jsonl.corrupt-<n>`` and reported. Files are
    opened relative to the state directory without following symlinks (mode 0600).

    ``flusher`` syncs the file in the background (share the checkpoint store's, so one thread
    serves the directory); without one the journal has its own.
    """

    def __init__(
        self, directory: str | os.PathLike[str], *, flusher: Flusher | None = None
    ) -> None:
        self.directory = Path(directory)
        self.path = self.directory / JOURNAL_FILE
        self.size = 0
        self.count = 0
        self.broken: str | None = None
        """Why appends are refused until the next :meth:`reset`: after a failed write the file
        may end in a partial line, so the plugin writes a full checkpoint and starts afresh."""
        self._fd: int | None = None
        self._flusher = flusher if flusher is not None else Flusher()
        self._sync: SyncTarget | None = None

    @staticmethod
    def encode(record: Mapping[str, Any]) -> bytes:
        """The line for ``record``."""
        body = json.dumps(record, sort_keys=True, separators=(",", ":")).encode()
        return b"%08x %s\n" % (zlib.crc32(body), body)

    @staticmethod
    def decode(line: bytes) -> dict[str, Any]:
        """The record of one line (without its newline); ValueError names what is wrong."""
        crc, sep, body = line.partition(b" ")
        if not sep or len(crc) != 8:
            raise ValueError("not '<crc32> <json>'")
        if int(crc, 16) != zlib.crc32(body):
            raise ValueError("checksum mismatch")
        record = json.loads(body)
        if not isinstance(record, dict):
            raise ValueError("record is not a JSON object")
        return record

    def read(self, *, quarantine: bool = True) -> tuple[int | None, list[Record], str | None]:
        """(generation, records, problem): the header's generation (None without a journal),
        the intact records in order, and what is wrong with the file (None when intact).

        A damaged file is moved aside unless ``quarantine`` is False (read-only inspection,
        ``nri-plrm state``), in which case it is left where it is. A journal of a newer format
        raises :class:`NewerFormatError` and is left where it is."""
        dfd = open_dir(self.directory, 0o700)
        try:
            try:
                fd = open_at(dfd, JOURNAL_FILE)
            except OSError as exc:
                kept = self._set_aside(dfd, quarantine)
                return None, [], f"journal {self.path}: cannot open it ({exc}); {kept}"
            if fd is None:
                return None, [], None
            with os.fdopen(fd, "rb") as f:
                if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                    kept = self._set_aside(dfd, quarantine)
                    return None, [], f"journal {self.path}: not a regular file; {kept}"
                data = f.read()
            lines = data.split(b"\n")[:-1]
            generation: int | None = None
            records: list[Record] = []
            for number, line in enumerate(lines, 1):
                try:
                    record = self.decode(line)
                    if number == 1:
                        generation = int(record["generation"])
                        found = record.get("format", 1)
                        if not isinstance(found, int) or isinstance(found, bool) or found < 1:
                            raise ValueError(f"format {found!r}, must be an integer >= 1")
                        if found > JOURNAL_FORMAT:
                            raise NewerFormatError("journal", self.path, found, JOURNAL_FORMAT)
                        continue
                except (ValueError, KeyError, TypeError) as exc:
                    kept = self._set_aside(dfd, quarantine)
                    return generation, records, f"journal {self.path} line {number}: {exc}; {kept}"
                records.append(record)
            return generation, records, None
        finally:
            os.close(dfd)

    def _set_aside(self, dfd: int, quarantine: bool) -> str:
        if not quarantine:
            return "left in place"
        return f"kept as {self.directory / move_aside(dfd, JOURNAL_FILE)}"

    def reset(self, generation: int, records: Sequence[Mapping[str, Any]] = ()) -> None:
        """Replace the journal with one for checkpoint ``generation`` holding ``records`` (the
        decisions made after that checkpoint's state was taken), atomically; the flusher makes
        the new file and its name durable in the background."""
        self._release(sync=False)  # the old file is replaced: its pending sync is moot
        header = self.encode({"format": JOURNAL_FORMAT, "generation": generation})
        contents = b"".join([header, *map(self.encode, records)])
        try:
            dfd = open_dir(self.directory, 0o700)
            try:
                write_at(dfd, JOURNAL_FILE, contents, 0o600, flusher=self._flusher)
                flags = os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC
                self._fd = os.open(JOURNAL_FILE, flags, dir_fd=dfd)
                label = str(self.path)
                self._sync = self._flusher.track(os.dup(self._fd), data_only=True, label=label)
            finally:
                os.close(dfd)
        except OSError as exc:
            self.broken = f"reset failed: {exc}"
            raise JournalError(f"journal {self.path}: {self.broken}") from exc
        self.size = len(contents)
        self.count = len(records)
        self.broken = None

    def append(self, record: Mapping[str, Any]) -> int:
        """Append ``record`` (one ``write``; the flusher syncs it soon after); returns the bytes
        written. Survives the process's death once this returns."""
        if self._fd is None or self.broken is not None:
            why = self.broken or "not open"
            raise JournalError(f"journal {self.path}: {why}")
        line = self.encode(record)
        try:
            view = memoryview(line)
            while view:
                view = view[os.write(self._fd, view) :]
        except OSError as exc:
            self.broken = f"write failed ({exc})"
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, self.size)
            raise JournalError(f"journal {self.path}: write failed: {exc}") from exc
        self.size += len(line)
        self.count += 1
        if self._sync is not None:
            self._flusher.mark(self._sync)
        return len(line)

    def fileno(self) -> int | None:
        """The open journal's file descriptor (None when closed)."""
        return self._fd

    @property
    def is_open(self) -> bool:
        """True once :meth:`reset` opened the file for appending."""
        return self._fd is not None

    def flush(self) -> None:
        """Wait until every record appended so far is on the device (and everything else the
        flusher holds, such as a checkpoint written with it)."""
        self._flusher.flush()

    def close(self) -> None:
        """Make every append durable, close the file (appends fail until the next
        :meth:`reset`) and stop the flusher (clean shutdown)."""
        self._release(sync=True)
        self._flusher.close()

    def _release(self, *, sync: bool) -> None:
        if self._sync is not None:
            self._flusher.forget(self._sync, sync=sync)
            self._sync = None
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
