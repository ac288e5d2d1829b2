"""Background load the benchmarks start and stop themselves: busy CPUs, or disk writers.

- ``cpu``: two processes spinning in a loop for the duration (the node's other workloads
  keeping both cores of a 2-CPU machine busy). By default they are placed as pods are on a
  Kubernetes node: in a "pods" cgroup beside a "system" cgroup holding the measured processes
  (this process, the runtime simulator, and the plugin processes the caller names), with the
  CPU weights of ``kubepods.slice`` and ``system.slice`` (``bench.node_cgroups``).
- ``io``: four processes writing files on a given filesystem, as image pulls do during a
  pod-start storm: each writes 16 MiB files in 256 KiB chunks, ``fsync``s each one (containerd
  syncs every blob it commits) and keeps its last eight, so the disk stays busy and the page
  cache stays bounded (32 MiB per writer). By default they are placed as containerd's pulls are
  on a node: in a "runtime" cgroup (``containerd.service``) with this process (the runtime
  simulator), beside a "plugin" cgroup holding the plugin processes the caller names, with the
  weight of the packaged unit (``CPUWeight=`` in ``systemd/nri-plrm.service``).

Where a placement cannot be made (not root, no cpu controller, ...) the load runs beside the
measured processes in their cgroup, as with ``node_cgroups=False``, and one line on stderr says
why; the yielded :class:`LoadPlacement` tells which placement ran. Both are context managers;
leaving them kills and reaps the processes (and removes the writers' files; the cgroups of the
placement). ``python -m bench.load cpu|cpu-one-cgroup|io [DIR]`` runs one until interrupted.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from bench.node_cgroups import NODE, Layout, NodeCgroups, Unavailable, units

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


@dataclass(frozen=True)
class LoadPlacement:
    """Where a load ran: ``node_cgroups`` (its placement as on a node) or not, ``detail`` (the
    cgroups and weights, or why the load shares the measured processes' cgroup) and, with the
    node placement, the directories of the two cgroups (``bench.node_cgroups`` layouts)."""

    node_cgroups: bool
    detail: str
    cgroups: tuple[str, str] = ("", "")


@contextlib.contextmanager
def _placed(
    layout: Layout, wanted: bool, first: Sequence[int], second: Sequence[int]
) -> Iterator[LoadPlacement]:
    """The processes placed in ``layout``'s two groups while the block runs, when ``wanted``
    and possible; otherwise nothing moves."""
    if not wanted:
        yield LoadPlacement(False, "one cgroup (asked for)")
        return
    try:
        groups = NodeCgroups.here(layout=layout)
        groups.enter(first, second)
    except Unavailable as err:
        print(f"bench.load: load beside the measured processes: {err}", file=sys.stderr)
        yield LoadPlacement(False, f"one cgroup: {err}")
        return
    try:
        yield LoadPlacement(True, groups.describe(), groups.dirs)
    finally:
        for problem in groups.leave():
            print(f"bench.load: cgroup cleanup: {problem}", file=sys.stderr)


@contextlib.contextmanager
def cpu_load(
    measured: Sequence[int] = (),
    node_cgroups: bool = True,
    processes: int = CPU_PROCESSES,
) -> Iterator[LoadPlacement]:
    """``processes`` busy loops running while the block runs. With ``node_cgroups``, placed
    as on a node: the loops in the pods cgroup, this process and the ``measured`` ones in the
    system cgroup; otherwise (or when that is impossible) in this process's cgroup."""
    procs = [subprocess.Popen([sys.executable, "-c", _SPIN]) for _ in range(processes)]
    try:
        loops = [p.pid for p in procs]
        with _placed(NODE, node_cgroups, [os.getpid(), *measured], loops) as placement:
            time.sleep(0.2)
            yield placement
    finally:
        _stop(procs)


@contextlib.contextmanager
def io_load(
    near: str,
    processes: int = IO_PROCESSES,
    measured: Sequence[int] = (),
    node_cgroups: bool = True,
) -> Iterator[LoadPlacement]:
    """``processes`` file writers in a temporary directory beside ``near`` (same filesystem).
    With ``node_cgroups``, placed as on a node: the writers and this process in the runtime
    cgroup, the ``measured`` processes in the plugin's; otherwise (or when that is impossible)
    in this process's cgroup."""
    parent = os.path.dirname(os.path.abspath(near))
    top = tempfile.mkdtemp(prefix="nri-plrm-ioload-", dir=parent)
    procs = []
    try:
        for i in range(processes):
            sub = os.path.join(top, str(i))
            os.mkdir(sub)
            code = f"from bench.load import write_files; write_files({sub!r})"
            procs.append(subprocess.Popen([sys.executable, "-c", code], cwd=_ROOT))
        runtime = [os.getpid(), *(p.pid for p in procs)]
        with _placed(units(), node_cgroups, runtime, measured) as placement:
            time.sleep(0.5)
            yield placement
    finally:
        _stop(procs)
        shutil.rmtree(top, ignore_errors=True)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main() -> None:
    """Run one load until interrupted (Ctrl-C or SIGTERM: both clean up)."""
    signal.signal(signal.SIGTERM, _interrupt)
    kind = sys.argv[1] if len(sys.argv) > 1 else "cpu"
    if kind == "io":
        load = io_load(sys.argv[2] if len(sys.argv) > 2 else ".")
    else:
        load = cpu_load(node_cgroups=kind != "cpu-one-cgroup")
    with contextlib.suppress(KeyboardInterrupt), load as placement:
        print(f"bench.load: {placement.detail}", file=sys.stderr)
        while True:
            time.sleep(1)


if __name__ == "__main__":
    main()
