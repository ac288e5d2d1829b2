"""Bounded message and request sizes on every input the plugin reads (docs/security.md).

- NRI/ttrpc: a frame declaring more than 4 MiB is refused before any buffer grows (the
  connection is closed); a 4 GiB declaration allocates nothing (``tests/ttrpc``).
- PodResources gRPC: a request over the server's 4 MiB receive limit is refused with
  RESOURCE_EXHAUSTED and the server keeps serving.
- Kernel uevents: payloads over 64 KiB are refused.
- The configuration file and manifests are bounded by what the operator gives; every value in
  them is range-checked (``tests/config``, ``tests/translate``).
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

import grpc
import pytest
from static_view import StaticView

from nri_plrm.daemon.hotplug.uevent import MAX_UEVENT_BYTES, UeventError, parse_uevent
from nri_plrm.podresources.server import PodResourcesServer, PodResourcesService
from nri_plrm.proto import podresources_api_pb2 as pb
from nri_plrm.ttrpc.codec import MAX_MESSAGE_LEN, MuxDecoder, ProtocolError

SERVICE = "/v1.PodResourcesLister/"


def test_ttrpc_message_over_4_mib_is_refused_before_buffering() -> None:
    decoder = MuxDecoder()
    body_len = MAX_MESSAGE_LEN + 1
    # mux frame header: conn id, length; ttrpc header: length, stream id, type, flags
    ttrpc = struct.pack(">IIBB", body_len, 1, 1, 0)
    frame = struct.pack(">II", 1, len(ttrpc) + 4096) + ttrpc + b"\0" * 4096
    with pytest.raises(ProtocolError, match="limit"):
        decoder.feed(frame)
    assert decoder.buffered < 2 * 4096


def test_podresources_request_over_the_receive_limit(tmp_path: Path) -> None:
    sock = str(tmp_path / "pr.sock")
    server = PodResourcesServer(PodResourcesService(StaticView()), sock)
    server.start()
    channel = grpc.insecure_channel(
        f"unix://{sock}", options=[("grpc.max_send_message_length", 64 << 20)]
    )
    try:
        huge = pb.GetPodResourcesRequest(pod_name="x" * (5 << 20), pod_namespace="default")
        call = channel.unary_unary(
            SERVICE + "Get",
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=pb.GetPodResourcesResponse.FromString,
        )
        with pytest.raises(grpc.RpcError) as info:
            call(huge, timeout=10)
        assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        listing = channel.unary_unary(
            SERVICE + "List",
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=pb.ListPodResourcesResponse.FromString,
        )
        assert list(listing(pb.ListPodResourcesRequest(), timeout=10).pod_resources) == []
    finally:
        channel.close()
        server.stop()
    assert not os.path.exists(sock)


def test_uevent_over_64_kib_is_refused() -> None:
    payload = b"online@/devices/system/cpu/cpu1\0" + b"X=" + b"y" * MAX_UEVENT_BYTES + b"\0"
    with pytest.raises(UeventError, match="larger than"):
        parse_uevent(payload)
