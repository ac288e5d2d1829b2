"""The assume cache: pods the extender placed on a node that the node's object does not show yet.

The node's NodeResourceTopology trails its admissions by up to one write window (a second). A
pod bound in that window is not in the numbers the extender reads, so two pods could both be
given the last free CPUs. The cache holds each pod placed on a node, in placement order, until
the node's object accounts for it (its ``nriPlrmPods``, the pods behind
``nodeTopologyPodsFingerprint``) or ``ttl`` seconds pass (a pod the node refused, or one that
left before the next write, is never shown). :meth:`AssumeCache.pending` gives the pods still to
add on top of the published state. Pure: the clock is passed in.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from nri_plrm.engine.spec import PodSpec
from nri_plrm.podsource.nrt_exact_state import PublishedNode

DEFAULT_TTL = 60.0
"""Seconds an assumed pod is kept when its node's object never shows it."""
MAX_PER_NODE = 256
"""Assumed pods kept per node (the oldest go first); more than a node's pod capacity."""


@dataclass(frozen=True)
class Assumed:
    """One placed pod."""

    spec: PodSpec
    at: float


class AssumeCache:
    """Placed pods per node until the node's object shows them (see the module docstring)."""

    def __init__(self, ttl: float = DEFAULT_TTL) -> None:
        self.ttl = ttl
        self._nodes: dict[str, dict[str, Assumed]] = {}

    def assume(self, node: str, pod: PodSpec, now: float) -> None:
        """Note that ``pod`` was placed on ``node`` (a pod placed again moves there)."""
        for entries in self._nodes.values():
            entries.pop(pod.uid, None)
        entries = self._nodes.setdefault(node, {})
        entries[pod.uid] = Assumed(pod, now)
        while len(entries) > MAX_PER_NODE:
            del entries[next(iter(entries))]

    def forget(self, uid: str) -> None:
        """Drop a pod (deleted, or its binding failed)."""
        for entries in self._nodes.values():
            entries.pop(uid, None)

    def pending(self, published: PublishedNode, now: float) -> tuple[PodSpec, ...]:
        """The pods placed on this node that its object does not show yet, oldest first; the
        ones it shows and the expired ones are dropped."""
        entries = self._nodes.get(published.name)
        if not entries:
            return ()
        for uid, entry in list(entries.items()):
            spec = entry.spec
            if now - entry.at > self.ttl or published.shows(spec.namespace, spec.name):
                del entries[uid]
        if not entries:
            del self._nodes[published.name]
            return ()
        return tuple(e.spec for e in entries.values())

    def __len__(self) -> int:
        return sum(len(e) for e in self._nodes.values())

    def __iter__(self) -> Iterator[tuple[str, str]]:
        """(node, pod uid) of every assumed pod."""
        for node, entries in self._nodes.items():
            for uid in entries:
                yield node, uid
