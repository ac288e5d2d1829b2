"""The daemon's log output: records are queued on the caller's thread and written by another;
a stalled reader never blocks the caller, lost records are counted and reported."""

from __future__ import annotations

import io
import logging
import os
import threading
import time

from nri_plrm.log_output import QueuedOutput


def record(message: str, *args: object) -> logging.LogRecord:
    return logging.LogRecord("nri_plrm.test", logging.INFO, __file__, 1, message, args, None)


def test_lines_are_written_in_order_and_close_writes_what_is_queued() -> None:
    stream = io.StringIO()
    output = QueuedOutput(stream)
    output.set_formatter(logging.Formatter("%(levelname)s %(message)s"))
    for i in range(100):
        output.handler.handle(record("line %d", i))
    output.close()
    assert stream.getvalue().splitlines() == [f"INFO line {i}" for i in range(100)]


def test_the_message_is_merged_on_the_callers_thread() -> None:
    stream = io.StringIO()
    output = QueuedOutput(stream)
    values = [1]
    output.handler.handle(record("values %s", values))
    values.append(2)
    output.close()
    assert stream.getvalue() == "values [1]\n"


class _BlockedPipe:
    """A reader that stopped reading: a pipe whose writer blocks until ``release``."""

    def __init__(self) -> None:
        self.read_fd, self.write_fd = os.pipe()
        self.stream = os.fdopen(self.write_fd, "w", buffering=1)
        self.reader: threading.Thread | None = None
        self.lines: list[str] = []

    def fill(self) -> None:
        os.set_blocking(self.write_fd, False)
        try:
            while True:
                os.write(self.write_fd, b"x" * 65536)
        except BlockingIOError:
            pass
        os.set_blocking(self.write_fd, True)

    def release(self) -> None:
        def read() -> None:
            with os.fdopen(self.read_fd, "rb") as pipe:
                for raw in pipe:
                    self.lines.append(raw.decode().rstrip("\n"))

        self.reader = threading.Thread(target=read)
        self.reader.start()


def test_a_stalled_reader_never_blocks_the_caller_and_the_loss_is_reported() -> None:
    pipe = _BlockedPipe()
    pipe.fill()
    output = QueuedOutput(pipe.stream, capacity=50)
    start = time.perf_counter()
    for i in range(1000):
        output.handler.handle(record("line %d", i))
    assert time.perf_counter() - start < 0.5
    pipe.release()
    output.handler.handle(record("after"))
    output.close(timeout=10)
    pipe.stream.close()
    assert pipe.reader is not None
    pipe.reader.join(10)
    lines = [line.lstrip("x") for line in pipe.lines]
    written = [line for line in lines if line.startswith("line ")]
    assert 1 <= len(written) <= 52
    reports = [line for line in lines if "dropped" in line]
    assert reports
    for report in reports:
        assert report.endswith("the log output did not keep up (50 records were waiting)")
    lost = sum(int(report.split()[0]) for report in reports)
    assert len(written) + lost + ("after" in lines) == 1001
