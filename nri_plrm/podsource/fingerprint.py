"""The pod fingerprint of a NodeResourceTopology object (``nodeTopologyPodsFingerprint``).

scheduler-plugins' NodeResourceTopology cache (its reserve/"overreserve" cache) trusts a node's
object again only when the object says which pods its numbers account for: the
k8stopologyawareschedwg ``podfingerprint`` format, ``pfp0`` + ``v001`` + the hex of one XXH64
over the sorted per-pod hashes, each pod's hash being XXH64 of its name seeded with XXH64 of its
namespace, written little-endian. The method attribute says which pods count: ``all``.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

import xxhash

PREFIX = "pfp0"
VERSION = "v001"
METHOD_ALL = "all"
"""Every pod on the node counts (the method this exporter uses)."""


def pod_hash(namespace: str, name: str) -> int:
    """One pod's 64-bit hash."""
    seed = xxhash.xxh64_intdigest(namespace.encode())
    return xxhash.xxh64_intdigest(name.encode(), seed=seed)


def fingerprint(pods: Iterable[tuple[str, str]]) -> str:
    """The signature of a set of (namespace, name) pods; order does not matter."""
    digest = xxhash.xxh64()
    for value in sorted(pod_hash(ns, name) for ns, name in pods):
        digest.update(struct.pack("<Q", value))
    return PREFIX + VERSION + digest.hexdigest()
