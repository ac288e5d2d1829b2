"""Runtime-side NRI simulator and capture readers for tests (not shipped)."""

from nrisim.capture import (
    REPLY_TYPES,
    REQUEST_TYPES,
    CapturedRequest,
    Frame,
    capture_dir,
    capture_folders,
    frames,
    request,
    requests,
    trunk_messages,
    unknown_field_paths,
)
from nrisim.sim import NRISimulator, PluginSession, Record

__all__ = [
    "REPLY_TYPES",
    "REQUEST_TYPES",
    "CapturedRequest",
    "Frame",
    "NRISimulator",
    "PluginSession",
    "Record",
    "capture_dir",
    "capture_folders",
    "frames",
    "request",
    "requests",
    "trunk_messages",
    "unknown_field_paths",
]
