"""The metrics of the Kubernetes API side: the pod cache, Events, refused pods and the
NodeResourceTopology writes (a part of :class:`nri_plrm.observability.metrics.Metrics`, documented
in
``docs/metrics.md`` with the rest)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

POD_CACHE_FALLBACKS = ("unavailable", "not_found", "invalid")
EVENT_RESULTS = ("posted", "failed", "dropped", "deduplicated", "rate_limited")
REFUSED_POD_RESULTS = ("failed", "gone", "terminal", "other_node", "error", "dropped")
NRT_WRITE_RESULTS = ("written", "conflict", "failed", "foreign_writer")
POD_CACHE_REFUSALS = ("list_pages", "list_bytes", "watch_line")


def check_label(value: str, allowed: tuple[str, ...], label: str) -> None:
    """Refuse a label value outside its fixed set (labels stay low-cardinality)."""
    if value not in allowed:
        raise ValueError(f"metric label {label}={value!r}: must be one of {', '.join(allowed)}")


class KubernetesApiMetrics:
    """Counters and gauges of the Kubernetes API side; :meth:`register_kubernetes` creates them
    on the plugin's registry."""

    def register_kubernetes(self, r: CollectorRegistry) -> None:
        """Create this part's metrics on ``r``, every label value at zero."""
        self.pod_cache_available = Gauge(
            "nri_plrm_pod_cache_available",
            "1 while the Kubernetes API pod cache is synced; 0 means NRI-only inference.",
            registry=r,
        )
        self.pod_cache_fallbacks = Counter(
            "nri_plrm_pod_cache_fallbacks",
            "RunPodSandbox lookups that fell back to NRI-only inference, by reason "
            "(unavailable, not_found, invalid).",
            ["reason"],
            registry=r,
        )
        self.pod_cache_refusals = Counter(
            "nri_plrm_pod_cache_refusals",
            "API server answers the pod cache refused, by the cap they went past (list_pages, "
            "list_bytes, watch_line); the cache then decides from NRI data and lists again.",
            ["reason"],
            registry=r,
        )
        self.pod_lookups_unwaited = Counter(
            "nri_plrm_pod_lookups_unwaited",
            "Pod spec lookups made without waiting because the NRI request's lookup budget "
            "(kubernetes.lookup_timeout in all) was spent; a pod not cached is placed from NRI.",
            registry=r,
        )
        self.pod_cache_relists = Counter(
            "nri_plrm_pod_cache_relists",
            "Full lists of this node's pods after the first (watch expired: 410 Gone).",
            registry=r,
        )
        self.kubernetes_events = Counter(
            "nri_plrm_kubernetes_events",
            "Kubernetes Events the plugin recorded, by result (posted, failed, dropped, "
            "deduplicated, rate_limited).",
            ["result"],
            registry=r,
        )
        self.refused_pods = Counter(
            "nri_plrm_refused_pods",
            "Pods refused at admission in API mode, by what became of them (failed: marked "
            "Failed as the kubelet does; gone, terminal, other_node: skipped; error; dropped).",
            ["result"],
            registry=r,
        )
        self.node_resource_topology_writes = Counter(
            "nri_plrm_node_resource_topology_writes",
            "NodeResourceTopology writes, by result (written, conflict: re-read after "
            "404/409/410, failed: retried with back-off, foreign_writer: another manager "
            "found in the object's managedFields, once per manager).",
            ["result"],
            registry=r,
        )
        for reason in POD_CACHE_FALLBACKS:
            self.pod_cache_fallbacks.labels(reason=reason)
        for result in EVENT_RESULTS:
            self.kubernetes_events.labels(result=result)
        for result in REFUSED_POD_RESULTS:
            self.refused_pods.labels(result=result)
        for result in NRT_WRITE_RESULTS:
            self.node_resource_topology_writes.labels(result=result)

    def set_pod_cache_available(self, available: bool) -> None:
        """Whether the Kubernetes API pod cache is usable (False = NRI-only fallback)."""
        self.pod_cache_available.set(1 if available else 0)

    def pod_cache_fallback(self, reason: str) -> None:
        """A spec lookup fell back to NRI-only inference (``POD_CACHE_FALLBACKS``)."""
        check_label(reason, POD_CACHE_FALLBACKS, "reason")
        self.pod_cache_fallbacks.labels(reason=reason).inc()

    def pod_cache_refused(self, reason: str) -> None:
        """The pod cache refused an API answer past a cap (``POD_CACHE_REFUSALS``)."""
        check_label(reason, POD_CACHE_REFUSALS, "reason")
        self.pod_cache_refusals.labels(reason=reason).inc()

    def pod_lookup_unwaited(self) -> None:
        """A lookup made without waiting: the request's lookup budget was spent."""
        self.pod_lookups_unwaited.inc()

    def pod_cache_relisted(self) -> None:
        """The pod cache listed every pod again after its watch expired."""
        self.pod_cache_relists.inc()

    def kubernetes_event(self, result: str) -> None:
        """One recorded Kubernetes Event and what became of it (``EVENT_RESULTS``)."""
        check_label(result, EVENT_RESULTS, "result")
        self.kubernetes_events.labels(result=result).inc()

    def refused_pod(self, result: str) -> None:
        """One pod refused at admission and what became of it (``REFUSED_POD_RESULTS``)."""
        check_label(result, REFUSED_POD_RESULTS, "result")
        self.refused_pods.labels(result=result).inc()

    def node_resource_topology_write(self, result: str) -> None:
        """One NodeResourceTopology write attempt and its result (``NRT_WRITE_RESULTS``)."""
        check_label(result, NRT_WRITE_RESULTS, "result")
        self.node_resource_topology_writes.labels(result=result).inc()
