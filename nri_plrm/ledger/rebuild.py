"""Rebuilding the node's state from what runs (Synchronize after a restart; issue 12).

Whatever the durable state was (good, missing, corrupt, older than the journal, its directory
gone), Synchronize reports every pod and every running container with the cpuset, mems and
quota applied to it. Before the engine chooses anything, the plugin keeps what runs where it is
a valid allocation (:mod:`nri_plrm.engine.adoption` checks and records it); only the rest is
placed by the engine's ordinary decisions. The helpers here are pure functions of what the
runtime reports: which containers to look at in which order, what each one runs on, and which
CPUs a pod-level pod's budget must keep.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import NamedTuple

from nri_plrm.base.cpuset import EMPTY, CPUSet
from nri_plrm.proto import nri_api_pb2 as api


class Running(NamedTuple):
    """What a container runs on, as Synchronize reports it."""

    cpus: CPUSet | None
    """The applied cpuset; None when unset or unreadable (the container runs on every CPU)."""
    mems: CPUSet
    exclusive: bool
    """Quota -1: the container was pinned to an exclusive slice."""


def running(ctr: api.Container, parsed: dict[str, CPUSet | None] | None = None) -> Running:
    """The cpuset, mems and exclusivity ``ctr`` runs with; ``parsed`` (optional) remembers the
    sets already read (most containers of a node share a few cpuset strings)."""
    cpu = ctr.linux.resources.cpu  # unset messages read as their defaults: "", quota 0
    memo: dict[str, CPUSet | None] = {} if parsed is None else parsed
    cpus = _parse(cpu.cpus, memo)
    mems = _parse(cpu.mems, memo) or EMPTY
    return Running(cpus, mems, cpu.quota.value == -1)


def _parse(text: str, memo: dict[str, CPUSet | None]) -> CPUSet | None:
    if not text:
        return None
    if text not in memo:
        try:
            memo[text] = CPUSet.parse(text)
        except ValueError:
            memo[text] = None
    return memo[text]


def creation_order(containers: Iterable[api.Container]) -> list[api.Container]:
    """Containers oldest first (ties by id, so the order never depends on the report's)."""
    return sorted(containers, key=lambda c: (c.created_at, c.id))


def pods_in_start_order(
    pods: Mapping[str, api.PodSandbox], containers: Sequence[api.Container]
) -> list[str]:
    """Pod uids ordered by their oldest running container (pods without one last, by uid): an
    earlier workload keeps its CPUs when two claim the same ones."""
    by_sandbox = {p.id: uid for uid, p in pods.items()}
    first: dict[str, tuple[int, str]] = {}
    for ctr in containers:
        uid = by_sandbox.get(ctr.pod_sandbox_id)
        if uid is not None:
            key = (ctr.created_at, ctr.id)
            first[uid] = min(first.get(uid, key), key)
    late = (1 << 63, "")
    return sorted(pods, key=lambda uid: (first.get(uid, late), uid))


def pinned(running: Iterable[Running]) -> CPUSet:
    """CPUs containers run on exclusively (quota -1): a pod budget completed at adoption avoids
    them, so it never takes a slice another pod's container holds."""
    out = EMPTY
    for r in running:
        if r.exclusive and r.cpus is not None:
            out = out | r.cpus
    return out


def shared_mems(running: Iterable[Running]) -> CPUSet:
    """The memory nodes a pod's shared (not exclusive) containers run on when they agree: the
    one ``mems`` every such container that reports one has; empty when none reports one or
    two differ (nothing consistent to keep)."""
    found = {r.mems for r in running if not r.exclusive and r.mems}
    return next(iter(found)) if len(found) == 1 else EMPTY


def budget_claim(
    budget: int, members: Sequence[tuple[int, Running]], free: CPUSet, all_cpus: CPUSet
) -> CPUSet:
    """The CPUs a pod-level pod's budget keeps: its running containers' exclusive slices and
    shared pool, as far as they are consistent.

    ``members`` are (exclusive CPUs requested, what it runs on) per running container, oldest
    first; ``free`` the CPUs nobody holds. A slice is kept when it has the requested size, is
    free and does not overlap an earlier slice; later slices are dropped while they would not
    fit the budget (one CPU stays for the shared pool while a shared container runs). The
    shared containers' common cpuset (the pod shared pool) is added when it is free, disjoint
    from the slices and fits; a pool on every CPU (never pinned) claims nothing.
    """
    slices: list[CPUSet] = []
    taken = EMPTY
    for n, r in members:
        cpus = r.cpus
        if n > 0 and cpus is not None and len(cpus) == n and cpus <= free and not cpus & taken:
            slices.append(cpus)
            taken = taken | cpus
    pools = [r.cpus for n, r in members if n == 0]
    room = budget - (1 if pools else 0)
    while slices and len(taken) > room:
        taken = taken - slices.pop()
    first = pools[0] if pools else None
    if (
        first is not None
        and first != all_cpus
        and all(p == first for p in pools)
        and first <= free
        and not first & taken
        and len(first | taken) <= budget
    ):
        taken = taken | first
    return taken
