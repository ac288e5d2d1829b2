"""The containers the engine keeps in the node shared pool, indexed by pod.

Removing a pod or listing one pod's node-shared containers scanned every such container of the
node (20,000 on a 10,000-pod node; issue 28): the index makes both cost the pod's own.
"""

from __future__ import annotations

from collections.abc import Iterable

ContainerKey = tuple[str, str]
"""(pod uid, container name)."""


class NodeSharedSet(set[ContainerKey]):
    """A set of (pod uid, container name) with a per-pod index. Change it only through
    :meth:`add`, :meth:`discard` and :meth:`discard_pod` (the index follows those)."""

    def __init__(self, keys: Iterable[ContainerKey] = ()) -> None:
        super().__init__()
        self._by_pod: dict[str, set[str]] = {}
        for key in keys:
            self.add(key)

    def add(self, key: ContainerKey) -> None:
        super().add(key)
        self._by_pod.setdefault(key[0], set()).add(key[1])

    def discard(self, key: object) -> None:
        super().discard(key)
        if not isinstance(key, tuple) or len(key) != 2:
            return
        names = self._by_pod.get(key[0])
        if names is not None:
            names.discard(key[1])
            if not names:
                del self._by_pod[key[0]]

    def discard_pod(self, pod_uid: str) -> None:
        """Forget every container of the pod."""
        for name in self._by_pod.pop(pod_uid, ()):
            super().discard((pod_uid, name))

    def names(self, pod_uid: str) -> list[str]:
        """The pod's containers in the set, sorted by name."""
        return sorted(self._by_pod.get(pod_uid, ()))
