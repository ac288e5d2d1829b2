"""The daemon's log output: the text and JSON line formats, and lines written by a thread, in
batches, never by a request.

A log line written to stderr straight from a request handler blocks that request whenever the
reader falls behind: systemd-journald while it flushes to disk during an image-pull storm, a
container runtime's log pipe (64 KiB) when its reader stalls. :class:`BatchedOutput` formats the
line on the caller's thread (as any handler does) and appends it to a bounded buffer; a thread
writes the buffer every ``FLUSH_INTERVAL``, so a request pays no system call and no thread
hand-off for its decision lines. A warning or an error wakes the writer at once (they are rare
and should survive a crash right after them); so does a buffer filling up. When the buffer is
full the line is dropped and counted, and the writer reports how many were lost: the plugin
never waits for its log reader. A SIGKILL loses at most the last ``FLUSH_INTERVAL`` of
info and debug lines.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
from collections.abc import Mapping
from typing import Any, TextIO

BUFFER_LINES = 10_000
"""Lines waiting for the writer before new ones are dropped."""
WAKE_LINES = 1_000
"""Lines that wake the writer before its interval ends."""
FLUSH_INTERVAL = 0.05
"""Seconds between two writes of the buffered lines (the longest an info line waits)."""
CLOSE_TIMEOUT = 2.0
"""Seconds :meth:`BatchedOutput.close` waits for the buffered lines to be written."""


class BatchedOutput(logging.Handler):
    """A handler whose lines a thread writes to ``stream`` (see the module docstring)."""

    def __init__(
        self, stream: TextIO, capacity: int = BUFFER_LINES, interval: float = FLUSH_INTERVAL
    ) -> None:
        super().__init__()
        self.stream = stream
        self.capacity = capacity
        self.interval = interval
        self._lines: list[str] = []
        self._dropped = 0
        self._guard = threading.Lock()
        self._wake = threading.Event()
        self._closing = False
        self._thread = threading.Thread(target=self._write_loop, name="log-output", daemon=True)
        self._thread.start()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.format(record) + "\n"
        except Exception:
            self.handleError(record)
            return
        with self._guard:
            if len(self._lines) >= self.capacity:
                self._dropped += 1
                return
            self._lines.append(line)
            urgent = len(self._lines) >= WAKE_LINES or record.levelno >= logging.WARNING
        if urgent:
            self._wake.set()

    def close(self, timeout: float = CLOSE_TIMEOUT) -> None:
        """Write the buffered lines and stop the writer (waiting at most ``timeout`` seconds)."""
        self._closing = True
        self._wake.set()
        self._thread.join(timeout)
        super().close()

    def _write_loop(self) -> None:
        while True:
            self._wake.wait(self.interval)
            self._wake.clear()
            closing = self._closing
            with self._guard:
                lines, self._lines = self._lines, []
                dropped, self._dropped = self._dropped, 0
            if dropped:
                lines.append(self._dropped_line(dropped))
            if lines:
                try:
                    self.stream.write("".join(lines))
                    self.stream.flush()
                except (OSError, ValueError):
                    pass
            if closing:
                return

    def _dropped_line(self, dropped: int) -> str:
        record = logging.LogRecord(
            "nri_plrm.log",
            logging.WARNING,
            __file__,
            0,
            "%d log lines dropped: the log output did not keep up (%d lines were waiting)",
            (dropped, self.capacity),
            None,
        )
        return self.format(record) + "\n"


class JSONFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message and the record's ``plrm`` fields."""

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        fields = getattr(record, "plrm", None)
        if isinstance(fields, dict):
            doc.update(fields)
        if record.exc_info:
            doc["exception"] = self.formatException(record.exc_info)
        return json.dumps(doc, default=str)


TEXT_FORMAT = "%(levelname)s %(name)s: %(message)s"
TIMESTAMPED_TEXT_FORMAT = "%(asctime)s.%(msecs)03d " + TEXT_FORMAT
TIMESTAMP_FORMAT = "%Y-%m-%dT%H:%M:%S"


def stderr_is_journal(environ: Mapping[str, str] | None = None) -> bool:
    """True when stderr is systemd's journal stream (``$JOURNAL_STREAM`` names its device and
    inode), which stamps every line itself."""
    value = (os.environ if environ is None else environ).get("JOURNAL_STREAM", "")
    device, _, inode = value.partition(":")
    try:
        st = os.fstat(sys.stderr.fileno())
        return (st.st_dev, st.st_ino) == (int(device), int(inode))
    except (ValueError, OSError, AttributeError):
        return False


_output: BatchedOutput | None = None


def setup_logging(level: str, fmt: str) -> None:
    """Configure the root logger: ``text`` or ``json`` lines on stderr, written in batches by a
    thread (``log_output``). Text lines carry a timestamp, except under systemd where the journal
    stamps them. Called again (SIGHUP), it changes the format and level of the same output."""
    global _output
    if fmt == "json":
        formatter: logging.Formatter = JSONFormatter()
    elif stderr_is_journal():
        formatter = logging.Formatter(TEXT_FORMAT)
    else:
        formatter = logging.Formatter(TIMESTAMPED_TEXT_FORMAT, TIMESTAMP_FORMAT)
    root = logging.getLogger()
    if _output is None or _output.stream is not sys.stderr:
        close_logging()
        _output = BatchedOutput(sys.stderr)
    _output.setFormatter(formatter)
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(_output)
    root.setLevel(level.upper())


def close_logging() -> None:
    """Write the log lines still queued and stop the writer (the daemon's last step)."""
    global _output
    if _output is not None:
        logging.getLogger().removeHandler(_output)
        _output.close()
        _output = None
