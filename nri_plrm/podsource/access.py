"""The daemon's Kubernetes API access (``[kubernetes] enabled``): the pod cache and the event
recorder on one client, started and stopped together."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from nri_plrm.config import KubernetesSettings
from nri_plrm.metrics import Metrics
from nri_plrm.podsource.client import (
    SERVICE_ACCOUNT_DIR,
    KubeConfigError,
    load_kube_config,
    new_client,
    node_name,
)
from nri_plrm.podsource.events import EventRecorder
from nri_plrm.podsource.kube import KubePodCache

log = logging.getLogger("nri_plrm.podsource")


@dataclass
class KubernetesAccess:
    """The pod cache (a ``PodSpecSource``) and the event recorder (a ``PodEventSink``)."""

    cache: KubePodCache
    events: EventRecorder

    def start(self) -> None:
        """Start listing/watching and posting in the running loop."""
        self.cache.start()
        self.events.start()

    async def stop(self) -> None:
        """Stop both and close the client."""
        await self.events.stop()
        await self.cache.stop()


def open_kubernetes(
    settings: KubernetesSettings,
    metrics: Metrics | None = None,
    service_account_dir: str = SERVICE_ACCOUNT_DIR,
) -> KubernetesAccess | None:
    """The API access ``settings`` ask for; None when disabled, or (logged as an error, the
    plugin then decides from NRI data only) when no usable configuration is found."""
    if not settings.enabled:
        return None
    node = node_name(settings)
    try:
        config = load_kube_config(settings.kubeconfig, service_account_dir)
        client = new_client(config)
    except KubeConfigError as exc:
        log.error("Kubernetes API not used, deciding from NRI data only: %s", exc)
        if metrics is not None:
            metrics.set_pod_cache_available(False)
        return None
    current = config.get()
    server = current.cluster.server if current is not None else ""
    log.info("Kubernetes API pod cache for node %s at %s", node, server or "?")
    cache = KubePodCache(client, node, metrics=metrics, server=server)
    return KubernetesAccess(cache, EventRecorder(client, node, metrics=metrics))
