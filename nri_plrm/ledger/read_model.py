"""The ledger's read model: an immutable snapshot of every pod for other threads.

The PodResources server's workers, the metrics scrape and ``nri-plrm state`` read
:meth:`ReadModel.pods`; the ledger rebuilds the pods a decision changed and publishes a new
tuple (readers never see a half-applied decision, and an unchanged tuple keeps its identity).
"""

from __future__ import annotations

from collections.abc import Collection

from nri_plrm.cpuset import CPUSet
from nri_plrm.engine.facade import Engine
from nri_plrm.ledger.tables import PodRecord, Tables
from nri_plrm.ledger.view import ContainerView, PodView


class ReadModel:
    """Pod views, rebuilt per pod."""

    def __init__(self) -> None:
        self._views: dict[str, PodView] = {}
        self._pods: tuple[PodView, ...] = ()

    def pods(self) -> tuple[PodView, ...]:
        """The current snapshot (the same object until something changes)."""
        return self._pods

    def rebuild(self, engine: Engine, tables: Tables, uids: Collection[str] | None = None) -> None:
        """Rebuild the views of ``uids`` (every pod when None) and publish a new snapshot."""
        if uids is None:
            self._views.clear()
            uids = list(tables.pods)
        elif not uids:
            return
        for uid in uids:
            record = tables.pods.get(uid)
            if record is None:
                self._views.pop(uid, None)
            else:
                self._views[uid] = _pod_view(engine, record)
        self._pods = tuple(self._views.values())


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
