"""A CPU going offline under an exclusive allocation (issue 7, fault 1): reported, metered and
handled by the documented rule (``nri_plrm.daemon.hotplug.monitor``, docs/security.md):
assignments are kept, every degraded exclusive container is named, the gauges follow the live state,
and the CPU coming back clears it all. The machine is a real sysfs tree whose ``cpu/online`` file
changes as the kernel's would.
"""

from __future__ import annotations

import asyncio
import logging
import urllib.request
from pathlib import Path

import pytest
from fakesysfs import write_sysfs
from plrm_daemon import running_daemon
from prometheus_client import CollectorRegistry, generate_latest

from nri_plrm.base.cpuset import CPUSet
from nri_plrm.config.file import parse_config
from nri_plrm.daemon.hotplug.monitor import HotplugMonitor
from nri_plrm.daemon.hotplug.uevent import HotplugAction, HotplugEvent, HotplugSubsystem
from nri_plrm.daemon.hotplug.watcher import HotplugUnavailableError, HotplugWatcher
from nri_plrm.engine.facade import Engine
from nri_plrm.engine.spec import ContainerKind, ContainerSpec, PodSpec
from nri_plrm.ledger import NodeLedger
from nri_plrm.observability.metrics import Metrics
from nri_plrm.plugin.handlers import Plugin
from nri_plrm.proto import nri_api_pb2 as api
from nri_plrm.topology.machines import MACHINES
from nri_plrm.translate.pod_to_cri import creation_order, nri_container, nri_pod_sandbox

POD_SCOPE = '[topology_manager]\npolicy = "single-numa-node"\nscope = "pod"\n'
GI = 1 << 30
MACHINE = MACHINES["default"]


def mixed(uid: str) -> PodSpec:
    two = {"cpu": 2000, "memory": GI}
    budget = {"cpu": 4000, "memory": 2 * GI}
    return PodSpec(
        uid=uid,
        name=uid,
        init_containers=(ContainerSpec("proxy", ContainerKind.SIDECAR),),
        containers=(ContainerSpec("main", requests=two, limits=two),),
        requests=budget,
        limits=budget,
    )


def populated() -> Plugin:
    plugin = Plugin(NodeLedger(Engine(MACHINE, parse_config(POD_SCOPE).engine_config())))

    async def fill() -> None:
        for i in range(3):
            spec = mixed(f"hp-{i}")
            sandbox = nri_pod_sandbox(spec)
            await plugin.run_pod_sandbox(sandbox)
            for ctr in creation_order(spec):
                await plugin.create_container(sandbox, nri_container(spec, ctr))

    asyncio.run(fill())
    return plugin


def set_online(root: Path, cpus: CPUSet) -> None:
    (root / "devices" / "system" / "cpu" / "online").write_text(f"{cpus}\n")


def metric(registry: CollectorRegistry, name: str) -> float:
    for line in generate_latest(registry).decode().splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    raise KeyError(name)


def cpu_event(action: HotplugAction, cpu: int | None) -> HotplugEvent:
    subsystem = None if action is HotplugAction.LOST else HotplugSubsystem.CPU
    return HotplugEvent(subsystem, action, cpu, f"/devices/system/cpu/cpu{cpu}")


def test_cpu_offline_under_an_exclusive_slice(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "sys"
    write_sysfs(MACHINE, str(root))
    plugin = populated()
    metrics = Metrics()
    registry = metrics.registry
    monitor = HotplugMonitor(plugin.ledger.pods, MACHINE, str(root), metrics=metrics)
    monitor.register(registry)
    decided = plugin.ledger.engine.assignments()
    main = plugin.ledger.engine.assignment("hp-1", "main")
    assert main is not None and main.exclusive
    victim = min(main.cpus)
    assert metric(registry, "nri_plrm_exclusive_containers_degraded") == 0

    async def main_flow() -> None:
        set_online(root, MACHINE.all_cpus - CPUSet([victim]))
        with caplog.at_level(logging.INFO, logger="nri_plrm.topology.hotplug.monitor"):
            report = await monitor.handle(cpu_event(HotplugAction.OFFLINE, victim))
        assert report is not None
        assert report.offline == CPUSet([victim])
        ((hit),) = report.affected
        assert (hit.uid, hit.container, hit.offline) == ("hp-1", "main", CPUSet([victim]))
        assert hit.left == main.cpus - CPUSet([victim])
        named = [
            r.getMessage()
            for r in caplog.records
            if r.name == "nri_plrm.topology.hotplug.monitor" and "hp-1" in r.getMessage()
        ]
        assert named and "main" in named[0] and str(victim) in named[0]
        # the rule: nothing moved
        assert plugin.ledger.engine.assignments() == decided
        assert metric(registry, "nri_plrm_cpus_offline") == 1
        assert metric(registry, "nri_plrm_exclusive_cpus_offline") == 1
        assert metric(registry, "nri_plrm_exclusive_containers_degraded") == 1
        assert metric(registry, "nri_plrm_cpu_hotplug_events_total") == 1
        # the same event again reports nothing new
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="nri_plrm.topology.hotplug.monitor"):
            await monitor.handle(cpu_event(HotplugAction.OFFLINE, victim))
        assert not caplog.records

        # back online: all clear
        set_online(root, MACHINE.all_cpus)
        with caplog.at_level(logging.INFO, logger="nri_plrm.topology.hotplug.monitor"):
            report = await monitor.handle(cpu_event(HotplugAction.ONLINE, victim))
        assert report is not None and report.affected == () and report.offline == CPUSet()
        assert any("online again" in r.getMessage() for r in caplog.records)
        assert metric(registry, "nri_plrm_exclusive_containers_degraded") == 0
        assert plugin.ledger.engine.assignments() == decided

    asyncio.run(main_flow())


def test_offline_cpu_outside_exclusive_slices_and_lost_events(tmp_path: Path) -> None:
    root = tmp_path / "sys"
    write_sysfs(MACHINE, str(root))
    plugin = populated()
    metrics = Metrics()
    registry = metrics.registry
    monitor = HotplugMonitor(plugin.ledger.pods, MACHINE, str(root), metrics=metrics)
    monitor.register(registry)
    exclusive = CPUSet().union(
        *(a.cpus for a in plugin.ledger.engine.assignments().values() if a.exclusive)
    )
    spare = max(MACHINE.all_cpus - exclusive)

    async def flow() -> None:
        set_online(root, MACHINE.all_cpus - CPUSet([spare]))
        # events were dropped: LOST makes the monitor rediscover anyway
        report = await monitor.handle(cpu_event(HotplugAction.LOST, None))
        assert report is not None and report.offline == CPUSet([spare]) and not report.affected
        assert metric(registry, "nri_plrm_cpus_offline") == 1
        assert metric(registry, "nri_plrm_exclusive_cpus_offline") == 0
        # memory events are counted, not acted on
        memory = HotplugEvent(HotplugSubsystem.MEMORY, HotplugAction.OFFLINE, 7)
        assert await monitor.handle(memory) is None

    asyncio.run(flow())
    text = generate_latest(registry).decode()
    assert 'nri_plrm_cpu_hotplug_events_total{action="lost"} 1.0' in text
    assert 'nri_plrm_cpu_hotplug_events_total{action="offline"} 1.0' in text
    assert 'nri_plrm_hotplug_events_ignored_total{reason="memory"} 1.0' in text


def test_unreadable_tree_keeps_the_last_view(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "sys"
    write_sysfs(MACHINE, str(root))
    plugin = populated()
    monitor = HotplugMonitor(plugin.ledger.pods, MACHINE, str(root))
    (root / "devices" / "system" / "cpu" / "online").write_text("garbage\n")

    async def flow() -> None:
        with caplog.at_level(logging.ERROR, logger="nri_plrm.topology.hotplug.monitor"):
            assert await monitor.handle(cpu_event(HotplugAction.OFFLINE, 3)) is None
        assert monitor.online == MACHINE.all_cpus
        assert any("cannot rediscover" in r.getMessage() for r in caplog.records)

    asyncio.run(flow())


def test_rescan_at_watch_start_reports_without_counting_an_event(tmp_path: Path) -> None:
    """A CPU that went offline between start-up discovery and the watcher's start is found by
    the initial rescan; no event is counted for it."""
    root = tmp_path / "sys"
    write_sysfs(MACHINE, str(root))
    plugin = populated()
    metrics = Metrics()
    registry = metrics.registry
    monitor = HotplugMonitor(plugin.ledger.pods, MACHINE, str(root), metrics=metrics)
    monitor.register(registry)
    main = plugin.ledger.engine.assignment("hp-0", "main")
    assert main is not None
    set_online(root, MACHINE.all_cpus - main.cpus)
    report = asyncio.run(monitor.rescan())
    assert report is not None and [a.container for a in report.affected] == ["main"]
    assert metric(registry, "nri_plrm_exclusive_cpus_offline") == len(main.cpus)
    assert "nri_plrm_cpu_hotplug_events_total{" not in generate_latest(registry).decode()


def uevents_available() -> bool:
    """Whether this environment lets a process open the kernel's uevent socket."""

    async def probe() -> bool:
        async def ignore(event: HotplugEvent) -> None:
            return None

        watcher = HotplugWatcher(ignore)
        try:
            await watcher.open()
        except HotplugUnavailableError:
            return False
        watcher.close()
        return True

    return asyncio.run(probe())


def test_daemon_watches_hotplug_where_uevents_can_be_received(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The running daemon applies the rule: its metrics appear once it watches uevents; where
    the socket cannot be opened it says so and runs without them."""
    expected = uevents_available()

    async def main() -> None:
        with caplog.at_level(logging.WARNING):
            async with running_daemon(tmp_path, POD_SCOPE) as d:
                deadline = asyncio.get_running_loop().time() + 10
                while True:
                    text = await asyncio.to_thread(scrape, d.metrics_url + "/metrics")
                    exported = "nri_plrm_exclusive_containers_degraded" in text
                    unavailable = any(
                        "without CPU/memory hotplug" in r.getMessage() for r in caplog.records
                    )
                    if exported or unavailable:
                        break
                    assert asyncio.get_running_loop().time() < deadline, "hotplug never started"
                    await asyncio.sleep(0.05)
                assert exported is expected
                assert unavailable is not expected

    asyncio.run(main())


def scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as reply:
        return str(reply.read().decode())


def test_reassert_sends_every_container_and_skips_one_with_no_cpu_left() -> None:
    """``Plugin.reassert`` (the monitor's hook): one UpdateContainers with every container's
    cpuset as the monitor's function gives it; a container it leaves empty is not sent."""
    plugin = populated()
    sent: list[list[api.ContainerUpdate]] = []

    async def sender(updates: list[api.ContainerUpdate]) -> list[api.ContainerUpdate]:
        sent.append(updates)
        return updates[:1]  # the runtime failed the first one

    main = plugin.ledger.engine.assignment("hp-1", "main")
    assert main is not None and main.exclusive
    online = MACHINE.all_cpus - main.cpus
    assert asyncio.run(plugin.reassert(lambda a: a.cpus)) == (0, 0)  # no sender attached
    plugin.attach(sender)
    count, failed = asyncio.run(plugin.reassert(lambda a: a.cpus & online))
    (updates,) = sent
    ids = {
        nri_container(spec, ctr).id: (spec.uid, ctr.name)
        for spec in (mixed(f"hp-{i}") for i in range(3))
        for ctr in creation_order(spec)
    }
    by_key = {ids[u.container_id]: CPUSet.parse(u.linux.resources.cpu.cpus) for u in updates}
    assert ("hp-1", "main") not in by_key
    assert by_key == {
        key: assignment.cpus & online
        for key in ids.values()
        if (assignment := plugin.ledger.engine.assignment(*key)) is not None
        and assignment.cpus & online
    }
    assert len(by_key) == len(ids) - 1
    assert (count, failed) == (len(updates), 1)


def test_a_slow_rescan_never_applies_what_it_read_after_a_newer_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The start-up rescan reads the tree while a CPU goes offline and its event arrives: the
    event's rescan must read after it and win (it used to finish first and be overwritten by
    the stale start-up view, re-asserting an offline CPU)."""
    import threading

    from nri_plrm.daemon.hotplug import monitor as monitor_module
    from nri_plrm.topology.sysfs import discover

    root = tmp_path / "sys"
    write_sysfs(MACHINE, str(root))
    plugin = populated()
    first_read = threading.Event()
    release_first = threading.Event()

    def slow_first_discover(sysfs_root: str) -> object:
        found = discover(sysfs_root)
        if not first_read.is_set():
            first_read.set()
            release_first.wait(10)
        return found

    monkeypatch.setattr(monitor_module, "discover", slow_first_discover)
    monitor = HotplugMonitor(plugin.ledger.pods, MACHINE, str(root))
    main = plugin.ledger.engine.assignment("hp-1", "main")
    assert main is not None
    victim = min(main.cpus)

    async def flow() -> None:
        start = asyncio.create_task(monitor.rescan())
        await asyncio.to_thread(first_read.wait, 10)
        set_online(root, MACHINE.all_cpus - CPUSet([victim]))
        event = asyncio.create_task(monitor.handle(cpu_event(HotplugAction.OFFLINE, victim)))
        await asyncio.sleep(0.2)
        release_first.set()
        await start
        await event

    asyncio.run(flow())
    assert monitor.online == MACHINE.all_cpus - CPUSet([victim])
    assert victim not in monitor.online
