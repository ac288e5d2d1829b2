"""``nri-plrm run``: topology, engine, checkpoint, metrics, PodResources and the NRI stub, wired.

Start-up order: logging, the host checks (``nri_plrm.config.host_checks``), topology discovery, the
kubelet-conflict check, engine, checkpoint restore, metrics HTTP server, PodResources server,
the Kubernetes API pod cache and event recorder (``[kubernetes] enabled``), NRI stub; once first
registered, the CPU hotplug watcher (``nri_plrm.daemon.hotplug.monitor``, when the kernel's
uevent socket can be opened). ``SIGTERM``/``SIGINT`` stop cleanly; ``SIGHUP`` re-reads the
configuration file in a thread of its own, in bounded time, one read at a time, never delaying
the exit (``nri_plrm.config.reload``; the loop keeps serving) and applies ``[log]`` changes live
(every other change is logged as needing a restart; a bad file keeps the running configuration).
``on_ready`` is called each time the plugin is registered and synchronized with the runtime
(systemd ``READY=1`` by default); a lost connection is reported as systemd ``STATUS=``.
``/healthz`` and the systemd watchdog (when armed) follow
:class:`~nri_plrm.daemon.liveness.Liveness`: a
stuck event loop or an NRI request held past the runtime's timeout turns ``/healthz`` to 503 and
stops ``WATCHDOG=1``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import logging
import os
import signal
import sys
from collections.abc import Callable, Sequence
from typing import Any

from nri_plrm.checkpoint.flusher import Flusher
from nri_plrm.checkpoint.kubelet import check_kubelet_cpu_manager
from nri_plrm.checkpoint.store import CheckpointError, CheckpointStore
from nri_plrm.config.file import load_config
from nri_plrm.config.host_checks import validate_for_host
from nri_plrm.config.reload import ConfigReader, ReloadTimeout
from nri_plrm.config.settings import (
    Config,
    ConfigError,
    diff_configs,
    startup_warnings,
    validate_for_topology,
)
from nri_plrm.daemon import sdnotify
from nri_plrm.daemon.hotplug.monitor import HotplugMonitor
from nri_plrm.daemon.hotplug.uevent import HotplugEvent
from nri_plrm.daemon.hotplug.watcher import HotplugWatcher, start_hotplug_watcher
from nri_plrm.daemon.liveness import Liveness
from nri_plrm.engine.availability import free_per_numa
from nri_plrm.engine.facade import Engine
from nri_plrm.ledger import NodeLedger
from nri_plrm.nri.stub import ENV_SOCKET, RuntimeUnreachable, Stub
from nri_plrm.observability.log_output import close_logging, setup_logging
from nri_plrm.observability.metrics import Metrics
from nri_plrm.observability.metrics_server import MetricsServer
from nri_plrm.plugin.cri_updates import CRIUpdater
from nri_plrm.plugin.handlers import Plugin
from nri_plrm.podresources.device_checkpoint import DeviceCheckpoint
from nri_plrm.podresources.devices import KubeletDevices
from nri_plrm.podresources.server import PodResourcesServer
from nri_plrm.podsource.access import open_kubernetes
from nri_plrm.podsource.base import PodEventSink, PodRefusalSink, PodSpecSource
from nri_plrm.podsource.dra import ClaimDevices
from nri_plrm.podsource.nrt_exact_state import exact_attributes
from nri_plrm.topology.device_numa import DeviceNUMA
from nri_plrm.topology.model import Topology
from nri_plrm.topology.sysfs import discover

log = logging.getLogger("nri_plrm.daemon")

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_CONFIG = 2
RELOAD_TIMEOUT = 5.0
"""Seconds a SIGHUP waits for the configuration file to be read and parsed."""


def build_plugin(
    config: Config,
    topology: Topology,
    metrics: Metrics | None = None,
    *,
    pod_specs: PodSpecSource | None = None,
    events: PodEventSink | None = None,
    refused: PodRefusalSink | None = None,
    on_change: Callable[[], None] | None = None,
    claims: ClaimDevices | None = None,
) -> Plugin:
    """The node ledger (opened from ``config.state.dir``) and the plugin for ``config`` on
    ``topology``."""
    ledger = NodeLedger(
        Engine(topology, config.engine_config()),
        store=CheckpointStore(
            config.state.dir,
            flusher=Flusher(on_failure=metrics.record_checkpoint_sync_failure if metrics else None),
        ),
        kubelet_state_path=config.state.kubelet_state_dir or None,
        observer=metrics,
        on_change=on_change,
    )
    ledger.open()
    pr = config.pod_resources
    devices = (
        KubeletDevices(
            pr.kubelet_socket,
            pr.device_timeout,
            count=metrics.device_lookup if metrics is not None else None,
            count_source=metrics.device_lookup_source if metrics is not None else None,
            checkpoint=DeviceCheckpoint(pr.kubelet_device_checkpoint)
            if pr.kubelet_device_checkpoint
            else None,
        )
        if pr.kubelet_socket
        else None
    )
    return Plugin(
        ledger,
        metrics=metrics,
        lookup_timeout=config.kubernetes.lookup_timeout,
        pod_specs=pod_specs,
        events=events,
        refused=refused,
        devices=devices,
        device_nodes=DeviceNUMA(config.topology.sysfs_root),
        claims=claims,
    )


async def run(config: Config, *, on_ready: Callable[[], Any] | None = None) -> int:
    """Run the plugin until SIGTERM/SIGINT; returns the process exit code."""
    setup_logging(config.log.level, config.log.format)
    try:
        return await _serve(config, on_ready)
    finally:
        close_logging()


async def _serve(config: Config, on_ready: Callable[[], Any] | None) -> int:
    try:
        validate_for_host(config, nri_socket=ENV_SOCKET not in os.environ)
        topology = discover(config.topology.sysfs_root)
        validate_for_topology(config, topology)
        if config.state.kubelet_cpu_manager_state:
            check_kubelet_cpu_manager(config.state.kubelet_cpu_manager_state)
    except ConfigError as exc:
        for line in exc.errors:
            log.error("configuration: %s", line)
        return EXIT_CONFIG
    except (ValueError, OSError) as exc:
        log.error("not starting: %s", exc)
        return EXIT_FAILURE
    for warning in startup_warnings(config):
        log.warning("configuration: %s", warning)

    metrics = Metrics(request_timeout=config.nri.request_timeout)
    kube = open_kubernetes(
        config.kubernetes,
        metrics,
        topology=topology,
        topology_manager=config.topology_manager,
        sysfs_root=config.topology.sysfs_root,
    )
    exporter = kube.topology if kube is not None else None
    try:
        plugin = build_plugin(
            config,
            topology,
            metrics,
            pod_specs=kube.cache if kube is not None else None,
            events=kube.events if kube is not None else None,
            refused=kube.refused if kube is not None else None,
            on_change=exporter.mark_dirty if exporter is not None else None,
            claims=kube.claims if kube is not None else None,
        )
    except (CheckpointError, OSError) as exc:
        log.error("not starting: state directory %s: %s", config.state.dir, exc)
        if kube is not None:
            await kube.stop()
        return EXIT_FAILURE
    metrics.attach_view(plugin.ledger, topology)
    if plugin.devices is not None:
        plugin.devices.start()  # the device checkpoint is parsed before the first pod
    if exporter is not None:
        exporter.attach(
            lambda: free_per_numa(plugin.ledger.engine),
            lambda: ((p.namespace, p.name) for p in plugin.ledger.pods()),
            lambda: exact_attributes(plugin.ledger.engine),
        )
    if kube is not None:
        kube.cache.on_change = plugin.follow_pod
    stub = Stub(
        plugin,
        name=config.nri.plugin_name,
        index=config.nri.plugin_index,
        socket_path=config.nri.socket,
        registration_timeout=config.nri.registration_timeout,
        request_timeout=config.nri.request_timeout,
        reconnect=config.nri.reconnect,
        observer=metrics,
    )
    cri = CRIUpdater(config.nri.cri_socket, plugin.log) if config.nri.cri_socket else None
    plugin.attach(stub.update_containers, cri=cri, nri_version=lambda: stub.runtime_nri_version)
    liveness = Liveness(stub, metrics.health)

    http: MetricsServer | None = None
    podresources: PodResourcesServer | None = None
    try:
        if config.metrics.address:
            http = _metrics_server(metrics, config.metrics.address, liveness.health)
            http.start()
        if config.pod_resources.enabled:
            podresources = PodResourcesServer.from_settings(
                plugin.ledger, config.pod_resources, metrics.observe_podresources
            )
            podresources.start()
    except (OSError, ValueError) as exc:
        log.error("not starting: %s", exc)
        if http is not None:
            http.stop()
        if kube is not None:
            await kube.stop()
        return EXIT_FAILURE

    ready_hook = on_ready or (lambda: sdnotify.ready("registered and synchronized"))
    loop = asyncio.get_running_loop()
    state = {"config": config}

    reloading: list[asyncio.Task[None]] = []
    reader = ConfigReader()

    async def reload() -> None:
        source = state["config"].source
        try:
            new = await reader.load(source, RELOAD_TIMEOUT)
        except ReloadTimeout:
            log.error(
                "SIGHUP: keeping the running configuration, reading %s took longer than %g s",
                source,
                RELOAD_TIMEOUT,
            )
            return
        except ConfigError as exc:
            log.error("SIGHUP: keeping the running configuration, %s is invalid: %s", source, exc)
            return
        changes = diff_configs(state["config"], new)
        if changes.live:
            setup_logging(new.log.level, new.log.format)
            log.info("SIGHUP: applied %s", ", ".join(changes.live))
        if changes.restart:
            log.warning("SIGHUP: %s change(s) need a restart", ", ".join(changes.restart))
        state["config"] = new

    def on_sighup() -> None:
        # The file is read by the reader's thread, in bounded time (nri_plrm.config.reload):
        # the event loop keeps answering containerd meanwhile, one reader runs at a time, and
        # SIGTERM does not wait for it.
        if reader.busy or (reloading and not reloading[-1].done()):
            log.warning("SIGHUP: a reload is still running; this one is ignored")
            return
        reloading[:] = [loop.create_task(reload())]

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, lambda: loop.create_task(stub.stop()))
    loop.add_signal_handler(signal.SIGHUP, on_sighup)

    notifier = sdnotify.Notifier.from_environment()

    async def announce() -> None:
        while True:
            await stub.ready.wait()
            log.info("registered and synchronized with %s %s", *plugin.runtime)
            metrics.set_synchronized()
            ready_hook()
            while stub.ready.is_set():
                await asyncio.sleep(0.2)
            notifier.status("connection to the runtime lost; reconnecting")

    hotplug = HotplugMonitor(
        plugin.ledger.pods,
        topology,
        config.topology.sysfs_root,
        reassert=plugin.reassert,
        cgroup_root=config.topology.cgroup_root,
        kubepods_cgroup=config.topology.kubepods_cgroup,
        metrics=metrics,
    )
    watchers: list[HotplugWatcher] = []

    async def on_hotplug(event: HotplugEvent) -> None:
        await hotplug.handle(event)

    async def watch_hotplug() -> None:
        # after the first registration, so opening the uevent socket never delays it
        await stub.ready.wait()
        watcher = await start_hotplug_watcher(
            on_hotplug, on_unreadable=lambda: metrics.hotplug_ignored_event("unreadable")
        )
        if watcher is None:
            return
        watchers.append(watcher)
        hotplug.register(metrics.registry)
        await hotplug.rescan()

    announcer = loop.create_task(announce())
    heartbeat = loop.create_task(liveness.run(notifier))
    hotplug_start = loop.create_task(watch_hotplug())
    if kube is not None:
        kube.start()
    exit_code = EXIT_OK
    freeze_startup_objects()
    try:
        await stub.run()
    except RuntimeUnreachable as exc:
        log.error(
            "not starting: %s; is NRI enabled in containerd and is [nri] socket its path? "
            "([nri] reconnect = false: the plugin does not wait for the socket)",
            exc,
        )
        exit_code = EXIT_FAILURE
    finally:
        if kube is not None:
            await kube.stop()
        for task in (announcer, heartbeat, hotplug_start, *reloading):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for watcher in watchers:
            await watcher.aclose()
        sdnotify.stopping()
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            loop.remove_signal_handler(signum)
        plugin.ledger.close()
        if plugin.devices is not None:
            await plugin.devices.close()
        gc.unfreeze()
        if podresources is not None:
            podresources.stop()
        if http is not None:
            http.stop()
    log.info("stopped")
    return exit_code


def _metrics_server(
    metrics: Metrics, address: str, health: Callable[[], tuple[bool, str]]
) -> MetricsServer:
    """The metrics endpoint bound to ``address``; an OSError names the address and its key."""
    try:
        return MetricsServer(metrics, address, health)
    except OSError as exc:
        raise OSError(
            f"[metrics] address {address}: cannot listen: {exc.strerror or exc} (another "
            "process holds it, maybe another nri-plrm; change [metrics] address or stop it)"
        ) from exc


def freeze_startup_objects() -> None:
    """Move everything allocated by start-up (modules, the restored state) out of the cyclic
    garbage collector's reach: they live as long as the process, and a full collection walking
    them stalls whatever request it interrupts (docs/performance.md). :func:`run` gives them
    back to the collector when it returns."""
    gc.collect()
    gc.freeze()


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m nri_plrm.daemon.service --config FILE``: the daemon without the CLI around it."""
    parser = argparse.ArgumentParser(prog="nri_plrm.daemon.service", description=__doc__)
    parser.add_argument("--config", required=True, help="TOML configuration file")
    args = parser.parse_args(argv)
    try:
        config = load_config(args.config)
    except ConfigError as exc:
        for line in exc.located(args.config):
            print(line, file=sys.stderr)
        return EXIT_CONFIG
    except OSError as exc:
        print(f"{args.config}: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    os.umask(0o077)
    return asyncio.run(run(config))


if __name__ == "__main__":
    sys.exit(main())
