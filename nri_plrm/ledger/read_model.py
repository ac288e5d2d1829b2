"""The ledger's read model: an immutable snapshot of every pod for other threads.

The PodResources server's workers, the metrics scrape and ``nri-plrm state`` read
:meth:`ReadModel.pods`; the ledger rebuilds the pods a decision changed and publishes a new
snapshot (readers never see a half-applied decision, and an unchanged snapshot keeps its
identity).

When the node shared pool moves, every container on it moves with it: a hundred best-effort
pods would be a hundred views to rebuild after each decision that reserves or frees CPUs. Their
views are left as they are instead, and a snapshot carries the pool it was published with: the
first read of a snapshot gives each node-shared container that pool's CPUs (on the reader's
thread, from immutable data), and later reads return the same tuple.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Collection
from collections.abc import Set as AbstractSet

from nri_plrm.base.cpuset import CPUSet
from nri_plrm.engine.facade import Engine
from nri_plrm.engine.spec import AssignmentType, ContainerAssignment
from nri_plrm.ledger.tables import ContainerKey, PodRecord, Tables
from nri_plrm.ledger.view import ContainerView, PodView


class ReadModel:
    """Pod views, rebuilt per pod."""

    def __init__(self) -> None:
        self._views: dict[str, PodView] = {}
        self._on_pool: set[ContainerKey] = set()
        """The containers whose views show them on the node shared pool."""
        self._snapshot = _Snapshot((), None)

    def pods(self) -> tuple[PodView, ...]:
        """The current snapshot (the same object until something changes)."""
        return self._snapshot.pods()

    def rebuild(
        self,
        engine: Engine,
        tables: Tables,
        uids: Collection[str] | None = None,
        followed_pool: AbstractSet[ContainerKey] = frozenset(),
    ) -> None:
        """Rebuild the views of ``uids`` (every pod when None) and publish a new snapshot.
        ``followed_pool``: containers that only moved with the node shared pool; their pods are
        rebuilt only when their views do not show them on that pool already."""
        if uids is None:
            self._views.clear()
            self._on_pool.clear()
            uids = list(tables.pods)
        stale = {uid for uid, _ in followed_pool - self._on_pool}
        stale.difference_update(uids)
        pool = engine.node_shared_assignment()
        if not uids and not stale and pool is self._snapshot.pool:
            return
        for uid in (*uids, *stale):
            old = self._views.get(uid)
            if old is not None:
                self._on_pool.difference_update((uid, c.name) for c in old.containers)
            record = tables.pods.get(uid)
            if record is None:
                self._views.pop(uid, None)
            else:
                view = self._views[uid] = _pod_view(engine, record)
                self._on_pool.update(
                    (uid, c.name) for c in view.containers if _follows_pool(c.assignment)
                )
        self._snapshot = _Snapshot(tuple(self._views.values()), pool)


class _Snapshot:
    """The views of one publication and the node shared pool at that time."""

    def __init__(self, views: tuple[PodView, ...], pool: ContainerAssignment | None) -> None:
        self.views = views
        self.pool = pool
        self._pods: tuple[PodView, ...] | None = None
        self._lock = threading.Lock()

    def pods(self) -> tuple[PodView, ...]:
        """The views with every node-shared container on this snapshot's pool (built once)."""
        pods = self._pods
        if pods is None:
            with self._lock:
                if self._pods is None:
                    self._pods = tuple(_on_pool(view, self.pool) for view in self.views)
                pods = self._pods
        return pods


def _follows_pool(assignment: ContainerAssignment | None) -> bool:
    return assignment is not None and assignment.assignment is AssignmentType.NODE_SHARED


def _on_pool(view: PodView, pool: ContainerAssignment | None) -> PodView:
    """``view`` with its node-shared containers on ``pool`` (the same object when they are)."""
    if pool is None:
        return view
    containers = tuple(_container_on_pool(c, pool) for c in view.containers)
    if all(new is old for new, old in zip(containers, view.containers, strict=True)):
        return view
    return dataclasses.replace(view, containers=containers)


def _container_on_pool(container: ContainerView, pool: ContainerAssignment) -> ContainerView:
    """A node-shared container on ``pool``'s CPUs (its memory pinning, if any, kept)."""
    old = container.assignment
    if old is None or old is pool or old.assignment is not AssignmentType.NODE_SHARED:
        return container
    new = pool if not old.mems and not old.memory else dataclasses.replace(old, cpus=pool.cpus)
    return dataclasses.replace(container, assignment=new)


def _pod_view(engine: Engine, record: PodRecord) -> PodView:
    uid = record.uid
    containers = []
    for name in record.containers:
        spec = record.spec.container(name) if record.spec is not None else None
        containers.append(
            ContainerView(
                name=name,
                assignment=engine.assignment(uid, name),
                kind=spec.kind if spec is not None else None,
            )
        )
    return PodView(
        uid=uid,
        namespace=record.intent.spec.namespace,
        name=record.intent.spec.name,
        containers=tuple(containers),
        cpus=engine.pod_cpus(uid) or CPUSet(),
        memory=tuple(engine.pod_memory(uid) or ()),
    )
