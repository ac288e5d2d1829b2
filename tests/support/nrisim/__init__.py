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
from nrisim.sim import CONTAINERD_UPDATE_COST, AppliedCpus, NRISimulator, PluginSession, Record

__all__ = [
    "CONTAINERD_UPDATE_COST",
    "REPLY_TYPES",
    "REQUEST_TYPES",
    "AppliedCpus",
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
