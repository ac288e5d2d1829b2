"""The daemon's Kubernetes API access (``[kubernetes] enabled``): the pod cache, the event
recorder and (``node_resource_topology``) the NodeResourceTopology exporter on one client,
started and stopped together."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from lightkube import AsyncClient

from nri_plrm.config.settings import KubernetesSettings, TopologyManagerSettings
from nri_plrm.engine.topology_manager import DEFAULT_MAX_ALLOWABLE_NUMA_NODES
from nri_plrm.observability.metrics import Metrics
from nri_plrm.podsource.client import (
    SERVICE_ACCOUNT_DIR,
    KubeConfigError,
    load_kube_config,
    new_client,
    new_pod_api,
    node_name,
)
from nri_plrm.podsource.dra import ClaimDevices
from nri_plrm.podsource.events import EventRecorder
from nri_plrm.podsource.kube import KubePodCache
from nri_plrm.podsource.nrt import NodeTopologyExporter
from nri_plrm.podsource.refusals import RefusedPods
from nri_plrm.topology.device_numa import DeviceNUMA
from nri_plrm.topology.model import Topology

log = logging.getLogger("nri_plrm.podsource")


@dataclass
class KubernetesAccess:
    """The pod cache (a ``PodSpecSource``), the event recorder (a ``PodEventSink``), the
    NodeResourceTopology exporter and the refused-pod patcher (a ``PodRefusalSink``), the last
    two None when not asked for; ``client`` is the connection the events, the exporter and the
    patcher share (the cache has its own), closed by ``stop``."""

    cache: KubePodCache
    events: EventRecorder
    topology: NodeTopologyExporter | None = None
    refused: RefusedPods | None = None
    client: AsyncClient | None = None
    claims: ClaimDevices | None = None
    """The pods' DRA claim devices, fed by the cache."""

    def start(self) -> None:
        """Start listing/watching, posting and exporting in the running loop."""
        if self.claims is not None:
            self.claims.start()
        self.cache.start()
        self.events.start()
        if self.topology is not None:
            self.topology.start()
        if self.refused is not None:
            self.refused.start()

    async def stop(self) -> None:
        """Stop them all."""
        if self.refused is not None:
            await self.refused.stop()
        if self.topology is not None:
            await self.topology.stop()
        await self.events.stop()
        if self.claims is not None:
            await self.claims.stop()
        await self.cache.stop()
        if self.client is not None:
            await self.client.close()


def open_kubernetes(
    settings: KubernetesSettings,
    metrics: Metrics | None = None,
    service_account_dir: str = SERVICE_ACCOUNT_DIR,
    *,
    topology: Topology | None = None,
    topology_manager: TopologyManagerSettings | None = None,
    sysfs_root: str = "/sys",
) -> KubernetesAccess | None:
    """The API access ``settings`` ask for; None when disabled, or (logged as an error, the
    plugin then decides from NRI data only) when no usable configuration is found. The
    NodeResourceTopology exporter needs the machine's ``topology`` and ``topology_manager``
    settings; its state function is attached once the plugin exists. DRA devices given by a
    PCI address are located under ``sysfs_root``."""
    if not settings.enabled:
        return None
    node = node_name(settings)
    try:
        config = load_kube_config(settings.kubeconfig, service_account_dir)
        client = new_client(config)
        pod_api = new_pod_api(config)
    except KubeConfigError as exc:
        log.error("Kubernetes API not used, deciding from NRI data only: %s", exc)
        if metrics is not None:
            metrics.set_pod_cache_available(False)
        return None
    current = config.get()
    server = current.cluster.server if current is not None else ""
    log.info("Kubernetes API pod cache for node %s at %s", node, server or "?")
    cache = KubePodCache(pod_api, node, metrics=metrics, server=server)
    claims = ClaimDevices(
        pod_api.http,
        node,
        DeviceNUMA(sysfs_root).pci,
        count=metrics.dra_device_lookup if metrics is not None else None,
    )
    cache.on_object, cache.on_gone = claims.pod_seen, claims.pod_gone
    exporter = None
    if settings.node_resource_topology and topology is not None:
        tm = topology_manager or TopologyManagerSettings()
        exporter = NodeTopologyExporter(
            client,
            node,
            topology,
            tm.policy,
            tm.scope,
            metrics=metrics,
            max_numa_nodes=(
                tm.max_allowable_numa_nodes
                if tm.max_allowable_numa_nodes != DEFAULT_MAX_ALLOWABLE_NUMA_NODES
                else None
            ),
        )
        log.info("publishing NodeResourceTopology %s", node)
    refused = RefusedPods(client, node, metrics=metrics) if settings.fail_refused_pods else None
    events = EventRecorder(client, node, metrics=metrics)
    return KubernetesAccess(cache, events, exporter, refused, client, claims)
