"""Background load the benchmarks start and stop themselves: busy CPUs, or disk writers.

- ``cpu``: two processes spinning in a loop for the duration (the node's other workloads
  keeping both cores of a 2-CPU machine busy).
- ``io``: four processes writing files on a given filesystem, as image pulls do during a
  pod-start storm: each writes 16 MiB files in 256 KiB chunks, ``fsync``s each one (containerd
  syncs every blob it commits) and keeps its last eight, so the disk stays busy and the page
  cache stays bounded (32 MiB per writer).

Both are context managers; leaving them kills and reaps the processes (and removes the
writers' files). ``python -m bench.load cpu|io [DIR]`` runs one until interrupted.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator

CPU_PROCESSES = 2
IO_PROCESSES = 4
FILE_BYTES = 16 << 20
CHUNK_BYTES = 256 << 10
FILES_KEPT = 8

_SPIN = "while True:\n    pass\n"
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def write_files(directory: str) -> None:
    """Write, sync and rotate files in ``directory`` forever (one io load process)."""
    chunk = os.urandom(CHUNK_BYTES)
    n = 0
    while True:
        path = os.path.join(directory, f"blob-{n % FILES_KEPT}")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            for _ in range(FILE_BYTES // CHUNK_BYTES):
                os.write(fd, chunk)
            os.fsync(fd)
        finally:
            os.close(fd)
        n += 1


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        proc.kill()
    for proc in procs:
        proc.wait()


@contextlib.contextmanager
def cpu_load(processes: int = CPU_PROCESSES) -> Iterator[None]:
    """``processes`` busy loops running while the block runs."""
    procs = [subprocess.Popen([sys.executable, "-c", _SPIN]) for _ in range(processes)]
    try:
        time.sleep(0.2)
        yield
    finally:
        _stop(procs)


@contextlib.contextmanager
def io_load(near: str, processes: int = IO_PROCESSES) -> Iterator[None]:
    """``processes`` file writers in a temporary directory beside ``near`` (same filesystem)."""
    parent = os.path.dirname(os.path.abspath(near))
    top = tempfile.mkdtemp(prefix="nri-plrm-ioload-", dir=parent)
    procs = []
    try:
        for i in range(processes):
            sub = os.path.join(top, str(i))
            os.mkdir(sub)
            code = f"from bench.load import write_files; write_files({sub!r})"
            procs.append(subprocess.Popen([sys.executable, "-c", code], cwd=_ROOT))
        time.sleep(0.5)
        yield
    finally:
        _stop(procs)
        shutil.rmtree(top, ignore_errors=True)


def main() -> None:
    """Run one load until interrupted."""
    kind = sys.argv[1] if len(sys.argv) > 1 else "cpu"
    load = io_load(sys.argv[2] if len(sys.argv) > 2 else ".") if kind == "io" else cpu_load()
    with contextlib.suppress(KeyboardInterrupt), load:
        while True:
            time.sleep(1)


if __name__ == "__main__":
    main()
