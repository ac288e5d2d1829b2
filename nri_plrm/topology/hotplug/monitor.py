"""CPU hotplug under the plugin's allocations: detected, reported, metered, handled by one rule.

The rule (docs/security.md, "CPU hotplug"):

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
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge

from nri_plrm.cpuset import CPUSet
from nri_plrm.ledger.view import PodView
from nri_plrm.topology.hotplug.watcher import HotplugAction, HotplugEvent, HotplugSubsystem
from nri_plrm.topology.model import Topology, TopologyError
from nri_plrm.topology.sysfs import discover

log = logging.getLogger(__name__)


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
    worker thread). :meth:`register` exports the metrics.
    """

    def __init__(
        self,
        pods: Callable[[], Sequence[PodView]],
        topology: Topology,
        sysfs_root: str,
    ) -> None:
        self._pods = pods
        self.known = topology.all_cpus
        self.sysfs_root = sysfs_root
        self.online = self.known
        self._reported: dict[tuple[str, str], CPUSet] = {}
        self._events: Counter | None = None

    def register(self, registry: CollectorRegistry) -> None:
        """Export the module's metrics on ``registry`` (once hotplug events can be received)."""
        self._events = Counter(
            "nri_plrm_cpu_hotplug_events",
            "CPU hotplug events received from the kernel, by action (lost: events may have "
            "been dropped, the machine was rediscovered).",
            ["action"],
            registry=registry,
        )
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
        if self._events is not None:
            self._events.labels(event.action.value).inc()
        if event.subsystem is not HotplugSubsystem.CPU and event.action is not HotplugAction.LOST:
            return None
        return await self.rescan(str(event))

    async def rescan(self, why: str = "start") -> HotplugReport | None:
        """Rediscover the machine (in a worker thread) and apply the rule; None when the tree
        cannot be read (logged with ``why``; the previous view of online CPUs is kept)."""
        loop = asyncio.get_running_loop()
        try:
            fresh = await loop.run_in_executor(None, discover, self.sysfs_root)
        except TopologyError as exc:
            log.error("hotplug: cannot rediscover %s after %s: %s", self.sysfs_root, why, exc)
            return None
        return self.update(fresh.all_cpus)

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
