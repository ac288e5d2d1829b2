"""NRI events: subscription mask bits, handler names, and the valid mask per runtime version."""

from __future__ import annotations

import re

from nri_plrm.proto import nri_api_pb2 as api

SERVICE_PLUGIN = "nri.pkg.api.v1alpha1.Plugin"
SERVICE_RUNTIME = "nri.pkg.api.v1alpha1.Runtime"

#: Events 1..11: what NRI v0.8/v0.9 runtimes (containerd 2.0/2.1) accept.
VALID_EVENTS_V08 = 0x7FF
#: Events 1..14: NRI v0.10+ (containerd 2.2+).
VALID_EVENTS_V10 = 0x3FFF

#: Handler method name for every event, in enum order.
EVENT_HANDLERS: dict[int, str] = {
    api.RUN_POD_SANDBOX: "run_pod_sandbox",
    api.STOP_POD_SANDBOX: "stop_pod_sandbox",
    api.REMOVE_POD_SANDBOX: "remove_pod_sandbox",
    api.CREATE_CONTAINER: "create_container",
    api.POST_CREATE_CONTAINER: "post_create_container",
    api.START_CONTAINER: "start_container",
    api.POST_START_CONTAINER: "post_start_container",
    api.UPDATE_CONTAINER: "update_container",
    api.POST_UPDATE_CONTAINER: "post_update_container",
    api.STOP_CONTAINER: "stop_container",
    api.REMOVE_CONTAINER: "remove_container",
    api.UPDATE_POD_SANDBOX: "update_pod_sandbox",
    api.POST_UPDATE_POD_SANDBOX: "post_update_pod_sandbox",
    api.VALIDATE_CONTAINER_ADJUSTMENT: "validate_container_adjustment",
}

#: Events containerd may deliver through the legacy ``StateChange`` call.
POD_EVENTS = frozenset(
    {api.RUN_POD_SANDBOX, api.STOP_POD_SANDBOX, api.REMOVE_POD_SANDBOX, api.POST_UPDATE_POD_SANDBOX}
)
STATE_CHANGE_EVENTS = POD_EVENTS | frozenset(
    {
        api.POST_CREATE_CONTAINER,
        api.START_CONTAINER,
        api.POST_START_CONTAINER,
        api.POST_UPDATE_CONTAINER,
        api.REMOVE_CONTAINER,
    }
)

_NAME_RE = re.compile(r"^[a-zA-Z0-9_.+-]+$")
_INDEX_RE = re.compile(r"^[0-9]{2}$")
_VERSION_RE = re.compile(r"v?(\d+)\.(\d+)")


def event_bit(event: int) -> int:
    """The subscription mask bit of ``event`` (``1 << (event - 1)``)."""
    return 1 << (event - 1)


def mask_for(events: object) -> int:
    """The mask of every event whose handler method ``events`` (a handlers object) defines."""
    mask = 0
    for event, name in EVENT_HANDLERS.items():
        if callable(getattr(events, name, None)):
            mask |= event_bit(event)
    return mask


def event_names(mask: int) -> list[str]:
    """The enum names of the events set in ``mask`` (for logs)."""
    return [api.Event.Name(e) for e in EVENT_HANDLERS if mask & event_bit(e)]


def valid_events(runtime_name: str, runtime_version: str, nri_version: str) -> int:
    """The events mask the runtime accepts, inferred from what Configure told us.

    ``NRI_version`` is only sent by NRI v0.12+ runtimes; without it, containerd < 2.2 and
    CRI-O < 1.34 speak NRI v0.8/v0.9 (events 1..11). Unknown runtimes get the portable subset.
    """
    if nri_version:
        return VALID_EVENTS_V10 if _at_least(nri_version, (0, 10)) else VALID_EVENTS_V08
    name = runtime_name.lower()
    if name == "containerd" and _at_least(runtime_version, (2, 2)):
        return VALID_EVENTS_V10
    if name in ("cri-o", "crio") and _at_least(runtime_version, (1, 34)):
        return VALID_EVENTS_V10
    return VALID_EVENTS_V08


def _at_least(version: str, floor: tuple[int, int]) -> bool:
    m = _VERSION_RE.match(version.strip())
    if m is None:
        return False
    return (int(m.group(1)), int(m.group(2))) >= floor


def check_plugin_name(name: str) -> str:
    """Return ``name`` if NRI v0.12+ accepts it (``[a-zA-Z0-9_.+-]+``), else raise ValueError."""
    if not _NAME_RE.match(name):
        raise ValueError(
            f"NRI plugin name {name!r} is invalid: it must be non-empty and use only "
            "the characters [a-zA-Z0-9_.+-]"
        )
    return name


def check_plugin_index(index: str) -> str:
    """Return ``index`` if it is exactly two ASCII digits (as the runtime requires)."""
    if not _INDEX_RE.match(index):
        raise ValueError(f"NRI plugin index {index!r} is invalid: it must be exactly 2 digits")
    return index
