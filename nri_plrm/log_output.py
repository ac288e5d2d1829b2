"""The daemon's log output: lines leave the event loop through a bounded queue.

A log line written to stderr straight from a request handler blocks that request whenever the
reader falls behind: systemd-journald while it flushes to disk during an image-pull storm, a
container runtime's log pipe (64 KiB) when its reader stalls. The root logger's one handler only
queues the record (the message is merged with its arguments on the caller's thread, nothing
else); a thread formats and writes it. When the queue is full the record is dropped and counted,
and the writer reports how many were lost once lines flow again: the plugin never waits for its
log reader.
"""

from __future__ import annotations

import logging
import queue
import threading
from logging.handlers import QueueHandler
from typing import TextIO

QUEUE_RECORDS = 10_000
"""Records waiting for the writer thread before new ones are dropped."""
CLOSE_TIMEOUT = 2.0
"""Seconds :meth:`QueuedOutput.close` waits for the queued records to be written."""

_STOP = object()


class _Dropping(QueueHandler):
    """Puts records on the queue without waiting; a full queue drops and counts them."""

    def __init__(self, records: queue.Queue[object], counter: _DropCounter) -> None:
        super().__init__(records)
        self.counter = counter

    def enqueue(self, record: logging.LogRecord) -> None:
        try:
            self.queue.put_nowait(record)
        except queue.Full:
            self.counter.add()


class _DropCounter:
    """Records dropped since the writer last reported (counted on any thread)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._count = 0

    def add(self) -> None:
        with self._lock:
            self._count += 1

    def take(self) -> int:
        with self._lock:
            count, self._count = self._count, 0
        return count


class QueuedOutput:
    """A queue in front of a stream handler, drained by one thread (see the module docstring).

    ``handler`` goes on the logger; :meth:`set_formatter` changes how lines are written (SIGHUP);
    :meth:`close` writes what is queued (waiting at most ``CLOSE_TIMEOUT``) and stops the thread.
    """

    def __init__(self, stream: TextIO, capacity: int = QUEUE_RECORDS) -> None:
        self.records: queue.Queue[object] = queue.Queue(capacity)
        self.dropped = _DropCounter()
        self.handler = _Dropping(self.records, self.dropped)
        self.writer = logging.StreamHandler(stream)
        self._thread = threading.Thread(target=self._drain, name="log-output", daemon=True)
        self._thread.start()

    def set_formatter(self, formatter: logging.Formatter) -> None:
        """Format the lines written from now on with ``formatter``."""
        self.writer.setFormatter(formatter)

    def close(self, timeout: float = CLOSE_TIMEOUT) -> None:
        """Write the queued records and stop the writer thread (at most ``timeout`` seconds)."""
        try:
            self.records.put(_STOP, timeout=timeout)
        except queue.Full:
            return
        self._thread.join(timeout)

    def _drain(self) -> None:
        while True:
            record = self.records.get()
            lost = self.dropped.take()
            if lost:
                self.writer.handle(_dropped_record(lost, self.records.maxsize))
            if record is _STOP:
                return
            assert isinstance(record, logging.LogRecord)
            self.writer.handle(record)


def _dropped_record(lost: int, capacity: int) -> logging.LogRecord:
    return logging.LogRecord(
        "nri_plrm.log",
        logging.WARNING,
        __file__,
        0,
        "%d log records dropped: the log output did not keep up (%d records were waiting)",
        (lost, capacity),
        None,
    )
