"""CPU hotplug under the plugin's allocations: detected, reported, metered, repaired, one rule.

The rule (docs/security.md, "CPU hotplug"; docs/design.md, "CPU hotplug"):

1. Assignments are never moved because a CPU went offline. The kernel already takes an offline
   CPU out of every cgroup's effective cpuset and gives it back when it returns online, so an
   exclusive container keeps running on the rest of its slice, and no other container is
   squeezed to make room. Moving a pinned workload (NUMA memory, caches, a latency-critical
   process) is worse than running it one CPU short for the duration of a maintenance action.
2. Every exclusive container whose slice holds an offline CPU is reported: one WARNING per
   container and CPU set naming the pod, the container, its slice and the CPUs it is left
   with; one INFO when its CPUs are all back.
3. It is metered: ``nri_plrm_cpu_hotplug_events_total{action}``,
   ``nri_plrm_cpus_offline`` (CPUs of the start-up topology that are offline now),
   ``nri_plrm_exclusive_cpus_offline`` (exclusively assigned CPUs that are offline now) and
   ``nri_plrm_exclusive_containers_degraded`` (exclusive containers with an offline CPU). The
   gauges are computed at scrape time from the live assignments, so a container placed on an
   offline CPU after the event is counted too.
4. Decisions keep using the topology discovered at start-up (as the kubelet's CPU manager
   does); a permanent change (CPUs removed or added for good) needs a restart of the plugin,
   which rediscovers the machine and reconciles its checkpoint with it.
5. After every change of the online CPUs the node is made whole again: on cgroup v1 the CPUs
   that came back are given back to the ``kubepods`` cpuset hierarchy top-down
   (:mod:`nri_plrm.daemon.hotplug.cgroupv1`), then every container is re-asserted with
   ``UpdateContainers`` on its decided cpuset (on cgroup v1 restricted to the online CPUs, the
   only ones the kernel accepts there; a container none of whose CPUs is online is skipped).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from prometheus_client import CollectorRegistry, Gauge

from nri_plrm.base.cpuset import CPUSet
from nri_plrm.daemon.hotplug.cgroupv1 import (
    CgroupVersion,
    CpusetWrite,
    cgroup_version,
    give_back,
    kubepods_cpuset,
    stranded_tasks,
)
from nri_plrm.daemon.hotplug.uevent import HotplugAction, HotplugEvent, HotplugSubsystem
from nri_plrm.engine.spec import ContainerAssignment
from nri_plrm.ledger.view import PodView
from nri_plrm.observability.metrics import Metrics
from nri_plrm.topology.model import Topology, TopologyError
from nri_plrm.topology.sysfs import discover

log = logging.getLogger("nri_plrm.topology.hotplug.monitor")

Reasserter = Callable[[Callable[[ContainerAssignment], CPUSet]], Awaitable[tuple[int, int]]]
"""Sends every container its assignment with the cpuset a function gives (``Plugin.reassert``)."""


@dataclass(frozen=True)
class OfflineExclusive:
    """An exclusive container with offline CPUs in its slice."""

    uid: str
    pod: str
    """``namespace/name``."""
    container: str
    cpus: CPUSet
    """The container's exclusive slice."""
    offline: CPUSet
    """The part of the slice that is offline now."""

    @property
    def left(self) -> CPUSet:
        """The CPUs of the slice it runs on meanwhile."""
        return self.cpus - self.offline


@dataclass(frozen=True)
class HotplugReport:
    """The state of the start-up topology's CPUs against the machine as it is now."""

    offline: CPUSet
    """CPUs of the start-up topology that are not online now."""
    unknown: CPUSet
    """CPUs online now that the start-up topology does not have (used after a restart)."""
    affected: tuple[OfflineExclusive, ...]


def assess(pods: Sequence[PodView], known: CPUSet, online: CPUSet) -> HotplugReport:
    """Which exclusive slices hold CPUs of ``known`` that are not in ``online``."""
    offline = known - online
    affected = []
    if offline:
        for pod in pods:
            for ctr in pod.containers:
                a = ctr.assignment
                if a is None or not a.exclusive or not a.cpus & offline:
                    continue
                affected.append(
                    OfflineExclusive(
                        uid=pod.uid,
                        pod=f"{pod.namespace}/{pod.name}",
                        container=ctr.name,
                        cpus=a.cpus,
                        offline=a.cpus & offline,
                    )
                )
    return HotplugReport(offline=offline, unknown=online - known, affected=tuple(affected))


class HotplugMonitor:
    """Applies the module's rule to hotplug events (``handle`` is a ``HotplugWatcher`` callback).

    ``pods`` returns the live assignments (``Plugin.pods``); ``topology`` is the start-up
    topology the engine decides on; ``sysfs_root`` is rediscovered on every CPU event (in a
    worker thread). ``reassert`` (``Plugin.reassert``) re-sends every container's cpuset;
    ``cgroup_root`` (empty: no hierarchy repair) is where the cgroup v1 ``cpuset`` hierarchy
    and its ``kubepods_cgroup`` (empty: ``kubepods`` or ``kubepods.slice``) are found.
    :meth:`register` exports the gauges.
    """

    def __init__(
        self,
        pods: Callable[[], Sequence[PodView]],
        topology: Topology,
        sysfs_root: str,
        *,
        reassert: Reasserter | None = None,
        cgroup_root: str = "",
        kubepods_cgroup: str = "",
        metrics: Metrics | None = None,
    ) -> None:
        self._pods = pods
        self.known = topology.all_cpus
        self.sysfs_root = sysfs_root
        self.online = self.known
        self._reported: dict[tuple[str, str], CPUSet] = {}
        self._reassert = reassert
        self.cgroup_root = cgroup_root
        self.kubepods_cgroup = kubepods_cgroup
        self._metrics = metrics
        self._returned = CPUSet()
        """CPUs back online whose give-back to the cgroup v1 hierarchy has not succeeded yet."""
        self._rescanning = asyncio.Lock()
        """One rescan at a time: a slow one (the start-up rescan) must not apply what it read
        after a later one applied the newer state."""

    def register(self, registry: CollectorRegistry) -> None:
        """Export the module's gauges on ``registry`` (once hotplug events can be received)."""
        for name, text, measure in (
            (
                "nri_plrm_cpus_offline",
                "CPUs of the start-up topology that are offline now.",
                self._cpus_offline,
            ),
            (
                "nri_plrm_exclusive_cpus_offline",
                "Exclusively assigned CPUs that are offline now (their containers run on the "
                "rest of their slice).",
                self._exclusive_offline,
            ),
            (
                "nri_plrm_exclusive_containers_degraded",
                "Exclusive containers with at least one offline CPU in their slice.",
                self._degraded,
            ),
        ):
            Gauge(name, text, registry=registry).set_function(measure)

    def _cpus_offline(self) -> float:
        return float(len(self.known - self.online))

    def _exclusive_offline(self) -> float:
        return float(len(CPUSet().union(*(a.offline for a in self.report().affected))))

    def _degraded(self) -> float:
        return float(len(self.report().affected))

    def report(self) -> HotplugReport:
        """The current assessment of the live assignments."""
        return assess(self._pods(), self.known, self.online)

    async def handle(self, event: HotplugEvent) -> HotplugReport | None:
        """Count the event; for a CPU event (or LOST) rediscover, then report what changed.

        Returns the new report, or None when the event needed no rediscovery or the tree could
        not be read (logged; the previous view of online CPUs is kept).
        """
        if self._metrics is not None:
            self._metrics.hotplug_seen(event.action.value)
        if event.subsystem is not HotplugSubsystem.CPU and event.action is not HotplugAction.LOST:
            self._ignored("memory")
            return None
        before, retry = self.online, bool(self._returned)
        report = await self.rescan(str(event))
        if report is not None and self.online == before and not retry:
            log.info("hotplug: %s: online cpus unchanged (%s); nothing to repair", event, before)
            self._ignored("no_change")
        return report

    def _ignored(self, reason: str) -> None:
        if self._metrics is not None:
            self._metrics.hotplug_ignored_event(reason)

    async def rescan(self, why: str = "start") -> HotplugReport | None:
        """Rediscover the machine (in a worker thread) and apply the rule; None when the tree
        cannot be read (logged with ``why``; the previous view of online CPUs is kept).
        Rescans run one after another, each reading the tree after the previous one applied."""
        async with self._rescanning:
            try:
                fresh = await asyncio.to_thread(discover, self.sysfs_root)
            except TopologyError as exc:
                log.error("hotplug: cannot rediscover %s after %s: %s", self.sysfs_root, why, exc)
                return None
            before = self.online
            report = self.update(fresh.all_cpus)
            if self.online != before or self._returned:
                await self.repair(before)
            return report

    async def repair(self, before: CPUSet) -> None:
        """Make the node whole after the online CPUs changed from ``before``: on cgroup v1 give
        the CPUs that came back to the ``kubepods`` hierarchy, then re-assert every container."""
        online = self.online
        self._returned = (self._returned | (online - before)) & online
        version = CgroupVersion.UNKNOWN
        if self.cgroup_root:
            version = await asyncio.to_thread(cgroup_version, Path(self.cgroup_root))
        if version is CgroupVersion.V1 and self._returned:
            writes = await asyncio.to_thread(self._give_back, self._returned, online)
            done = [w for w in writes if not w.error]
            if self._metrics is not None and done:
                self._metrics.hotplug_repaired("cgroup_cpuset", len(done))
            if len(done) == len(writes):
                self._returned = CPUSet()
        else:
            self._returned = CPUSet()
        if self._reassert is None:
            return

        def cpus(assignment: ContainerAssignment) -> CPUSet:
            # cgroup v1 refuses offline CPUs in cpuset.cpus; v2 keeps them (effective set only)
            return assignment.cpus & online if version is CgroupVersion.V1 else assignment.cpus

        try:
            sent, failed = await self._reassert(cpus)
        except (ConnectionError, RuntimeError, TimeoutError) as exc:
            log.warning("hotplug: containers not re-asserted: %s", exc)
            return
        log.info(
            "hotplug: re-asserted %d containers on their cpusets (cgroup %s, online cpus %s); "
            "%d failed",
            sent,
            version.value,
            online,
            failed,
            extra={"plrm": {"event": "hotplug-reassert", "sent": sent, "failed": failed}},
        )
        if failed:
            log.warning("hotplug: the runtime failed to re-assert %d containers", failed)
        if self._metrics is not None and sent > failed:
            self._metrics.hotplug_repaired("container_update", sent - failed)

    def _give_back(self, returned: CPUSet, online: CPUSet) -> list[CpusetWrite]:
        kubepods = kubepods_cpuset(Path(self.cgroup_root), self.kubepods_cgroup)
        if kubepods is None:
            log.info(
                "hotplug: cgroup v1: no %s cpuset under %s/cpuset; nothing to give back",
                self.kubepods_cgroup or "kubepods",
                self.cgroup_root,
            )
            return []
        writes = give_back(kubepods, returned, online)
        for path, count in stranded_tasks(kubepods):
            log.warning(
                "hotplug: cgroup v1: %s holds %d tasks the kernel moved out of a container whose "
                "cpus all went offline; they run on its cpus until that container restarts",
                path,
                count,
                extra={"plrm": {"event": "hotplug-stranded", "cgroup": str(path), "tasks": count}},
            )
        return writes

    def update(self, online: CPUSet) -> HotplugReport:
        """Take ``online`` as the CPUs online now; log what the rule says; return the report."""
        before = self.online
        self.online = online
        report = self.report()
        if online != before:
            went, back = before - online, online - before
            log.warning(
                "hotplug: cpus online %s (offline now: %s, back online: %s); assignments are "
                "kept, decisions use the start-up topology",
                online,
                went or "-",
                back or "-",
                extra={"plrm": {"event": "hotplug", "offline": str(report.offline)}},
            )
        current = {(a.uid, a.container): a for a in report.affected}
        for key, hit in current.items():
            if self._reported.get(key) == hit.offline:
                continue
            log.warning(
                "hotplug: pod=%s container=%s exclusive cpus %s: %s offline, running on %s "
                "until they return",
                hit.pod,
                hit.container,
                hit.cpus,
                hit.offline,
                hit.left or "none",
                extra={
                    "plrm": {
                        "event": "hotplug-degraded",
                        "pod": hit.pod,
                        "uid": hit.uid,
                        "container": hit.container,
                        "cpus": str(hit.cpus),
                        "offline": str(hit.offline),
                    }
                },
            )
        for key in [k for k in self._reported if k not in current]:
            log.info("hotplug: pod uid=%s container=%s has all its cpus online again", *key)
        self._reported = {k: v.offline for k, v in current.items()}
        return report
