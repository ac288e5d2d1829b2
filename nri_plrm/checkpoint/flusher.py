"""Background flushes: ``fsync``/``fdatasync`` of written files, batched, never on a reply path.

A write that returned is in the page cache and survives the death of the process (SIGKILL, OOM
kill, crash, upgrade); only a kernel crash or a power loss can lose it, and those end every
container on the node too. So the plugin acknowledges a decision once its ``write()`` returned
and leaves the device flush to this thread: a file marked dirty is synced within about
``interval`` seconds (plus the device's own time), all dirty files of a round at once, in the
order they were marked (a file before the directory entry that names it).

The thread owns the descriptors it is given (callers hand it a ``dup``) and is the only one to
close them, so a descriptor is never closed while it is being synced. It starts on first use;
:meth:`Flusher.flush` waits until everything marked so far is durable and :meth:`Flusher.close`
does that and stops the thread (a clean shutdown). A failed sync is logged and counted: the data
is still in the page cache, only its survival of a power loss is in doubt.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Callable

FLUSH_INTERVAL = 0.1
"""Seconds a dirty file waits for others before a round of syncs (bounds the durability lag
against power loss; a busy plugin syncs at most ten times a second)."""

log = logging.getLogger("nri_plrm.checkpoint")


class SyncTarget:
    """One open file or directory the flusher syncs when marked (see :meth:`Flusher.track`)."""

    __slots__ = ("data_only", "fd", "label", "pending", "release", "sync")

    def __init__(self, fd: int, data_only: bool, label: str) -> None:
        self.fd = fd
        self.data_only = data_only
        """``fdatasync`` (file contents and size) instead of ``fsync`` (all metadata)."""
        self.label = label
        self.pending = False
        self.sync = True
        """False once the owner no longer needs the file durable (it was replaced)."""
        self.release = False
        """Close the descriptor in the next round (the owner is done with it)."""


class Flusher:
    """A background thread syncing marked files at most every ``interval`` seconds;
    ``on_failure`` is called (from that thread) after each failed sync."""

    def __init__(
        self, interval: float = FLUSH_INTERVAL, on_failure: Callable[[], None] | None = None
    ) -> None:
        self.interval = interval
        self.on_failure = on_failure
        self.failures = 0
        """Syncs that failed (each is logged with the file and the error)."""
        self._cond = threading.Condition()
        self._queue: list[SyncTarget] = []
        self._thread: threading.Thread | None = None
        self._urgent = False
        self._stopping = False
        self._started = 0
        self._finished = 0

    def track(self, fd: int, *, data_only: bool, label: str) -> SyncTarget:
        """Take ``fd`` (the flusher closes it) and return its target for :meth:`mark`."""
        return SyncTarget(fd, data_only, label)

    def mark(self, target: SyncTarget) -> None:
        """Have ``target`` synced in the next round. Cheap when it is already pending: what
        was written before this call is covered by that round's sync."""
        if target.pending:
            return
        with self._cond:
            self._enqueue(target)

    def sync_once(self, fd: int, *, label: str) -> None:
        """Take ``fd``, ``fsync`` it in the next round, then close it."""
        target = SyncTarget(fd, False, label)
        target.release = True
        with self._cond:
            self._enqueue(target)

    def forget(self, target: SyncTarget, *, sync: bool) -> None:
        """Close ``target``'s descriptor in the next round, after a last sync if ``sync``."""
        with self._cond:
            target.release = True
            target.sync = sync
            self._enqueue(target)

    def flush(self) -> None:
        """Wait until everything marked before this call is durable."""
        with self._cond:
            if self._thread is None:
                return
            needed = self._started
            if self._queue:
                needed += 1
                self._urgent = True
                self._cond.notify_all()
            self._cond.wait_for(lambda: self._finished >= needed)

    def close(self) -> None:
        """:meth:`flush`, then stop the thread (it starts again on the next use)."""
        self.flush()
        with self._cond:
            thread = self._thread
            self._stopping = True
            self._cond.notify_all()
        if thread is not None:
            thread.join()
        with self._cond:
            self._thread = None
            self._stopping = False

    def _enqueue(self, target: SyncTarget) -> None:
        if not target.pending:
            target.pending = True
            self._queue.append(target)
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="nri-plrm-flusher", daemon=True)
            self._thread.start()
        elif len(self._queue) == 1:
            self._cond.notify_all()

    def _run(self) -> None:
        cond = self._cond
        while True:
            with cond:
                cond.wait_for(lambda: bool(self._queue) or self._stopping)
                if not self._queue:
                    return
                if not self._urgent:
                    cond.wait_for(lambda: self._urgent or self._stopping, timeout=self.interval)
                # what to do with each target is fixed here, under the lock: a target released
                # while this round syncs it is closed in the next round, never twice
                batch = [(t, t.sync, t.release) for t in self._queue]
                self._queue = []
                for target, _, _ in batch:
                    target.pending = False
                self._urgent = False
                self._started += 1
                round_number = self._started
            for target, sync, release in batch:
                self._sync(target, sync, release)
            with cond:
                self._finished = round_number
                cond.notify_all()

    def _sync(self, target: SyncTarget, sync: bool, release: bool) -> None:
        if sync:
            try:
                if target.data_only:
                    os.fdatasync(target.fd)
                else:
                    os.fsync(target.fd)
            except OSError as exc:
                self.failures += 1
                log.error(
                    "background sync of %s failed, it may not survive a power loss: %s",
                    target.label,
                    exc,
                )
                if self.on_failure is not None:
                    self.on_failure()
        if release:
            with contextlib.suppress(OSError):  # the thread must live on: flush() waits for it
                os.close(target.fd)
