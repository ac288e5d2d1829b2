"""The daemon's log output: lines are formatted on the caller's thread and written in batches
by another; a stalled reader never blocks the caller, lost lines are counted and reported."""

from __future__ import annotations

import io
import logging
import os
import threading
import time

from nri_plrm.observability.log_output import FLUSH_INTERVAL, BatchedOutput


def record(message: str, *args: object) -> logging.LogRecord:
    return logging.LogRecord("nri_plrm.test", logging.INFO, __file__, 1, message, args, None)


def test_lines_are_written_in_order_and_close_writes_what_is_buffered() -> None:
    stream = io.StringIO()
    output = BatchedOutput(stream)
    output.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    for i in range(100):
        output.handle(record("line %d", i))
    output.close()
    assert stream.getvalue().splitlines() == [f"INFO line {i}" for i in range(100)]


def test_a_line_is_written_within_the_flush_interval() -> None:
    stream = io.StringIO()
    output = BatchedOutput(stream)
    output.handle(record("soon"))
    deadline = time.monotonic() + FLUSH_INTERVAL * 20
    while "soon" not in stream.getvalue():
        assert time.monotonic() < deadline
        time.sleep(0.01)
    output.close()


def test_the_line_is_formatted_on_the_callers_thread() -> None:
    stream = io.StringIO()
    output = BatchedOutput(stream)
    values = [1]
    output.handle(record("values %s", values))
    values.append(2)
    output.close()
    assert stream.getvalue() == "values [1]\n"


class _Entered:
    """A stream whose ``entered`` is set once a write began (the writer took its batch)."""

    def __init__(self, stream: io.TextIOBase) -> None:
        self.inner = stream
        self.entered = threading.Event()

    def write(self, text: str) -> int:
        self.entered.set()
        return self.inner.write(text)

    def flush(self) -> None:
        self.inner.flush()

    def close(self) -> None:
        self.inner.close()


class _BlockedPipe:
    """A reader that stopped reading: a full pipe whose writer blocks until ``release``."""

    def __init__(self) -> None:
        self.read_fd, write_fd = os.pipe()
        os.set_blocking(write_fd, False)
        try:
            while True:
                os.write(write_fd, b"x" * 65536)
        except BlockingIOError:
            pass
        os.set_blocking(write_fd, True)
        self.stream = _Entered(os.fdopen(write_fd, "w"))
        self.lines: list[str] = []
        self.reader = threading.Thread(target=self._read)

    def _read(self) -> None:
        with os.fdopen(self.read_fd, "rb") as pipe:
            for raw in pipe:
                self.lines.append(raw.decode().lstrip("x").rstrip("\n"))

    def release(self) -> None:
        self.reader.start()


def test_a_stalled_reader_never_blocks_the_caller_and_the_loss_is_reported() -> None:
    pipe = _BlockedPipe()
    output = BatchedOutput(pipe.stream, capacity=50)
    output.handle(record("first"))
    assert pipe.stream.entered.wait(30)  # the writer took "first": it blocks in its flush
    start = time.perf_counter()
    for i in range(1000):
        output.handle(record("line %d", i))
    assert time.perf_counter() - start < 0.5
    pipe.release()
    output.close(timeout=10)
    pipe.stream.close()
    pipe.reader.join(10)
    written = [line for line in pipe.lines if line.startswith("line ")]
    assert written == [f"line {i}" for i in range(50)]
    (report,) = [line for line in pipe.lines if "dropped" in line]
    assert report == (
        "950 log lines dropped: the log output did not keep up (50 lines were waiting)"
    )
    assert pipe.lines.index(report) > pipe.lines.index("line 49")


def test_a_warning_is_written_at_once() -> None:
    stream = io.StringIO()
    output = BatchedOutput(stream, interval=60)
    output.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    output.handle(record("info first"))
    warning = record("careful")
    warning.levelno, warning.levelname = logging.WARNING, "WARNING"
    output.handle(warning)
    deadline = time.monotonic() + 30
    while "careful" not in stream.getvalue() and time.monotonic() < deadline:
        time.sleep(0.001)
    assert stream.getvalue() == "INFO info first\nWARNING careful\n"
    output.close()
