"""A PodResources client that shares no code with ours: raw gRPC calls with identity
serializers, replies decoded by field number with the kubelet's numbers (spec section 5)."""

from __future__ import annotations

from typing import Any

import grpc
import pbwire

SERVICE = "/v1.PodResourcesLister/"


class RawPodResourcesClient:
    """Calls List, Get and GetAllocatableResources and returns plain dicts."""

    def __init__(self, socket_path: str) -> None:
        self.channel = grpc.insecure_channel(f"unix:{socket_path}")

    def call(self, method: str, request: bytes = b"") -> bytes:
        fn = self.channel.unary_unary(SERVICE + method)
        reply: bytes = fn(request, timeout=5)
        return reply

    def list(self) -> list[dict[str, Any]]:
        msg = pbwire.fields(self.call("List"))
        return [decode_pod(p) for p in pbwire.messages(msg, 1)]

    def get(self, namespace: str, name: str) -> dict[str, Any]:
        request = pbwire.encode_string(1, name) + pbwire.encode_string(2, namespace)
        msg = pbwire.fields(self.call("Get", request))
        pods = pbwire.messages(msg, 1)
        assert len(pods) == 1
        return decode_pod(pods[0])

    def allocatable(self) -> dict[str, Any]:
        msg = pbwire.fields(self.call("GetAllocatableResources"))
        return {
            "devices": [decode_devices(d) for d in pbwire.messages(msg, 1)],
            "cpu_ids": pbwire.ints(msg, 2),
            "memory": [decode_memory(m) for m in pbwire.messages(msg, 3)],
        }

    def close(self) -> None:
        self.channel.close()


def decode_numa(topology: dict[int, list[int | bytes]]) -> list[int]:
    return [
        pbwire.ints(node, 1)[0] if pbwire.ints(node, 1) else 0
        for node in pbwire.messages(topology, 1)
    ]


def decode_memory(msg: dict[int, list[int | bytes]]) -> tuple[str, int, list[int]]:
    sizes = pbwire.ints(msg, 2)
    topo = pbwire.messages(msg, 3)
    return pbwire.string(msg, 1), sizes[0] if sizes else 0, decode_numa(topo[0]) if topo else []


def decode_devices(msg: dict[int, list[int | bytes]]) -> tuple[str, list[str]]:
    ids = [raw.decode() for raw in msg.get(2, []) if isinstance(raw, bytes)]
    return pbwire.string(msg, 1), ids


def decode_container(msg: dict[int, list[int | bytes]]) -> dict[str, Any]:
    return {
        "name": pbwire.string(msg, 1),
        "devices": [decode_devices(d) for d in pbwire.messages(msg, 2)],
        "cpu_ids": pbwire.ints(msg, 3),
        "memory": [decode_memory(m) for m in pbwire.messages(msg, 4)],
        "dynamic_resources": [pbwire.string(d, 2) for d in pbwire.messages(msg, 5)],
    }


def decode_pod(msg: dict[int, list[int | bytes]]) -> dict[str, Any]:
    return {
        "name": pbwire.string(msg, 1),
        "namespace": pbwire.string(msg, 2),
        "containers": [decode_container(c) for c in pbwire.messages(msg, 3)],
        "cpu_ids": pbwire.ints(msg, 4),
        "memory": [decode_memory(m) for m in pbwire.messages(msg, 5)],
    }
