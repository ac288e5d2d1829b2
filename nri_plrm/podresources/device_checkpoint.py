"""Pods' allocated devices from the kubelet's Device Manager checkpoint, keyed by pod UID and
kept current in the background, so ``RunPodSandbox`` finds them with a dict lookup instead of a
PodResources ``Get`` round trip.

The kubelet's Device Manager writes ``kubelet_internal_checkpoint`` (in its device-plugins
directory) after allocating a container's devices at admission, before the pod's sandbox is
asked for: when ``RunPodSandbox`` reaches the plugin the file already holds the pod's
allocation. Each entry names the pod by UID, the container, the resource and its device ids by
NUMA node (``-1``: no topology), as the kubelet's PodResources replies derive them. The file is
replaced by rename; an inotify watch on its directory tells every change. The snapshot is
*current* when every change event was read and the parse after the last one finished: then the
pod's entry (or its absence: the kubelet allocated it no device) is what the kubelet holds, and
a UID never names another pod, so a pod recreated under the same name cannot be mistaken for
its predecessor. Otherwise (a change not yet parsed, the file absent, unreadable or in the
pre-1.20 format without NUMA nodes, no inotify) the answer is "unknown" and the caller asks the
kubelet's socket.

Reading the events at a lookup is one non-blocking ``read`` of the inotify descriptor; the
parse (the whole file, which grows with the node) runs in a worker thread.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import json
import logging
import os
import struct
from typing import Any

from nri_plrm.engine.spec import Device, DeviceMap
from nri_plrm.util.bounded_file import InputFileError, read_regular_file

CHECKPOINT_NAME = "kubelet_internal_checkpoint"
"""The file name the kubelet's Device Manager checkpoints to (in its device-plugins dir)."""
MAX_BYTES = 64 << 20
"""Largest checkpoint read (the kubelet's entries carry the device plugins' Allocate replies)."""
NOW_BYTES = 128 << 10
"""Largest checkpoint a lookup reads itself when the background parse has not caught up (about
0.6 ms; a node's checkpoint holds one entry per allocated device, a few KiB on a GPU node);
a larger one is left to the background and the lookup asks the socket."""

_IN_MODIFY = 0x2
_IN_CLOSE_WRITE = 0x8
_IN_MOVED_FROM = 0x40
_IN_MOVED_TO = 0x80
_IN_CREATE = 0x100
_IN_DELETE = 0x200
_IN_DELETE_SELF = 0x400
_IN_MOVE_SELF = 0x800
_IN_Q_OVERFLOW = 0x4000
_IN_IGNORED = 0x8000
_WATCHED = (
    _IN_MODIFY
    | _IN_CLOSE_WRITE
    | _IN_MOVED_FROM
    | _IN_MOVED_TO
    | _IN_CREATE
    | _IN_DELETE
    | _IN_DELETE_SELF
    | _IN_MOVE_SELF
)
_WATCH_GONE = _IN_DELETE_SELF | _IN_MOVE_SELF | _IN_IGNORED
_EVENT = struct.Struct("iIII")

PodDevices = dict[str, DeviceMap]
"""One pod's devices: container name -> resource -> devices."""

_log = logging.getLogger(__name__)


class CheckpointFormatError(ValueError):
    """The checkpoint's content is not the kubelet's NUMA-aware format."""


Entries = list[dict[str, Any]]
"""One pod's checkpoint entries, as decoded."""


def index_checkpoint(data: bytes) -> dict[str, Entries]:
    """The kubelet's checkpoint ``data``: each pod's entries by pod UID (what :func:`pod_devices`
    reads when the pod is looked up: the whole file is only indexed, the little Python work
    per entry keeps the parse short). Raises :class:`CheckpointFormatError` naming what does
    not fit the format."""
    try:
        doc = json.loads(data)
    except ValueError as exc:
        raise CheckpointFormatError(f"not JSON: {exc}") from exc
    body = doc.get("Data") if isinstance(doc, dict) else None
    entries = body.get("PodDeviceEntries") if isinstance(body, dict) else None
    if entries is None and isinstance(body, dict):
        entries = []
    if not isinstance(entries, list):
        raise CheckpointFormatError("no Data.PodDeviceEntries list")
    index: dict[str, Entries] = {}
    try:
        for entry in entries:
            index.setdefault(entry["PodUID"], []).append(entry)
    except (KeyError, TypeError) as exc:
        raise CheckpointFormatError(f"an entry without a PodUID: {entry!r}") from exc
    return index


def pod_devices(entries: Entries) -> PodDevices:
    """One pod's devices by container from its checkpoint entries (a device listed under
    several NUMA nodes has them all; ``-1``: none). Raises :class:`CheckpointFormatError`."""
    nodes: dict[tuple[str, str], dict[str, set[int]]] = {}
    for entry in entries:
        key = (entry.get("ContainerName"), entry.get("ResourceName"))
        if not all(isinstance(part, str) and part for part in key):
            raise CheckpointFormatError(f"entry without ContainerName/ResourceName: {key}")
        by_numa = entry.get("DeviceIDs")
        if not isinstance(by_numa, dict):  # pre-1.20 list: no NUMA nodes to give
            raise CheckpointFormatError("DeviceIDs is not a map of NUMA node to device ids")
        devices = nodes.setdefault(key, {})  # type: ignore[arg-type]
        for numa, ids in by_numa.items():
            try:
                node = int(numa)
            except ValueError as exc:
                raise CheckpointFormatError(f"NUMA node {numa!r} is not an integer") from exc
            if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
                raise CheckpointFormatError(f"device ids {ids!r} are not a list of strings")
            for device_id in ids:
                found = devices.setdefault(device_id, set())
                if node >= 0:
                    found.add(node)
    built: dict[str, dict[str, tuple[Device, ...]]] = {}
    for (container, resource), devices in nodes.items():
        listed = tuple(Device(i, tuple(sorted(n))) for i, n in sorted(devices.items()))
        if listed:
            built.setdefault(container, {})[resource] = listed
    return dict(built)


def _libc() -> Any:
    name = ctypes.util.find_library("c")
    libc = ctypes.CDLL(name, use_errno=True)
    if not hasattr(libc, "inotify_init1"):
        raise OSError("the C library has no inotify")
    return libc


class DeviceCheckpoint:
    """The kubelet's device checkpoint at ``path``, parsed in the background on each change.

    :meth:`start` (on the event loop) sets the watch and the first parse; :meth:`pod` answers a
    pod's devices when the snapshot is current, else None.
    """

    def __init__(self, path: str, *, log: logging.Logger | None = None) -> None:
        self.path = path
        self.log = log or _log
        self.pods: dict[str, Entries] | None = None
        """The last parsed snapshot; None when none is usable (absent, unreadable, unknown
        format)."""
        self.changes = 0
        """Change events read so far."""
        self._parsed = -1
        """``changes`` when the published snapshot's parse started (-1: none)."""
        self._fd = -1
        self._loop: asyncio.AbstractEventLoop | None = None
        self._parse: asyncio.Future[None] | None = None
        self._problem = ""

    def start(self) -> bool:
        """Watch the checkpoint's directory and parse it in the background; False (warned)
        when the directory cannot be watched (lookups then always answer unknown)."""
        self._loop = asyncio.get_running_loop()
        directory = os.path.dirname(self.path) or "."
        try:
            libc = _libc()
            fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
            if fd < 0:
                raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
            if libc.inotify_add_watch(fd, os.fsencode(directory), _WATCHED) < 0:
                err = ctypes.get_errno()
                os.close(fd)
                raise OSError(err, os.strerror(err))
        except OSError as exc:
            self.log.warning(
                "kubelet device checkpoint %s: cannot watch %s (%s); pods' devices are asked "
                "on the kubelet's socket at each RunPodSandbox",
                self.path,
                directory,
                exc,
            )
            return False
        self._fd = fd
        self._loop.add_reader(fd, self._read_events)
        self._changed()
        return True

    def pod(self, uid: str) -> PodDevices | None:
        """The pod's devices by container ({} when the kubelet allocated it none), or None
        when the snapshot may not be current."""
        if self._fd < 0:
            return None
        self._read_events()
        if self._parsed != self.changes:
            self._parse_now()
        if self.pods is None or self._parsed != self.changes:
            return None
        entries = self.pods.get(uid)
        if entries is None:
            return {}
        try:
            return pod_devices(entries)
        except CheckpointFormatError as exc:
            self._unusable(f"{self.path}: pod {uid}: {exc}")
            return None

    def _parse_now(self) -> None:
        """Read a small checkpoint on the spot: every change event before the lookup was read,
        so what the file holds now is at least that current (a worker thread may not have
        been scheduled yet on a loaded node)."""
        changes = self.changes
        try:
            if os.stat(self.path).st_size > NOW_BYTES:
                return
            index = index_checkpoint(read_regular_file(self.path, NOW_BYTES, "checkpoint"))
        except (OSError, ValueError):  # the background parse reports it
            return
        self.pods, self._parsed = index, changes

    def _read_events(self) -> None:
        """Read the pending inotify events; a change of the checkpoint starts a parse."""
        name = os.fsencode(os.path.basename(self.path))
        changed = gone = False
        while True:
            try:
                data = os.read(self._fd, 65536)
            except BlockingIOError:
                break
            except OSError as exc:
                self.log.warning("kubelet device checkpoint %s: inotify: %s", self.path, exc)
                gone = True
                break
            offset = 0
            while offset + _EVENT.size <= len(data):
                _, mask, _, length = _EVENT.unpack_from(data, offset)
                event_name = data[offset + _EVENT.size : offset + _EVENT.size + length]
                offset += _EVENT.size + length
                if mask & _WATCH_GONE:
                    gone = True
                elif mask & _IN_Q_OVERFLOW or event_name.rstrip(b"\0") == name:
                    changed = True
        if gone:
            self._stop_watch()
        elif changed:
            self._changed()

    def _changed(self) -> None:
        self.changes += 1
        self._start_parse()

    def _start_parse(self) -> None:
        if self._parse is None and self._loop is not None:
            self._parse = self._loop.run_in_executor(None, self._read_and_parse, self.changes)

    def _read_and_parse(self, changes: int) -> None:
        """Worker thread: parse the file and hand the snapshot to the loop."""
        try:
            pods: dict[str, Entries] | None = index_checkpoint(
                read_regular_file(self.path, MAX_BYTES, "kubelet device checkpoint")
            )
            problem = ""
        except InputFileError as exc:
            pods, problem = None, str(exc)
        except CheckpointFormatError as exc:
            pods, problem = None, f"{self.path}: {exc}"
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._publish, changes, pods, problem)

    def _publish(self, changes: int, pods: dict[str, Entries] | None, problem: str) -> None:
        self._parse = None
        if self._fd < 0:  # closed meanwhile
            return
        if changes >= self._parsed:  # else a lookup read a newer one meanwhile
            self.pods, self._parsed = pods, changes
            if problem:
                self._unusable(problem)
            else:
                self._problem = ""
        if self._parsed != self.changes:  # changed while parsing
            self._start_parse()

    def _unusable(self, problem: str) -> None:
        """Warn once per distinct problem."""
        if problem != self._problem:
            self.log.warning(
                "kubelet device checkpoint unusable (%s); pods' devices are asked on the "
                "kubelet's socket",
                problem,
            )
        self._problem = problem

    def _stop_watch(self) -> None:
        if self._fd < 0:
            return
        self.log.warning(
            "kubelet device checkpoint %s: its directory is gone or no longer watched; pods' "
            "devices are asked on the kubelet's socket",
            self.path,
        )
        self.close()

    def close(self) -> None:
        """Stop watching (lookups then answer unknown)."""
        if self._fd >= 0:
            if self._loop is not None and not self._loop.is_closed():
                self._loop.remove_reader(self._fd)
            os.close(self._fd)
            self._fd = -1
        self.pods = None
