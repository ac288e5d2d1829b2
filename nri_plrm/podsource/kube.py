"""An informer-style cache of this node's pods from the Kubernetes API.

``KubePodCache.run`` lists the pods with ``fieldSelector=spec.nodeName=<node>`` in pages of
``limit`` pods, then watches from the list's ``resourceVersion``; after a dropped connection it
watches again from the last ``resourceVersion`` it saw, and on ``410 Gone`` (an HTTP status or a
watch ``ERROR`` event) it lists again. Errors are retried with bounded exponential back-off and
full jitter; so is a watch that ends at once without an event.

The API server's answers are bounded (``ApiLimits``): pages per list, bytes per page and per
list, bytes per watch line. An answer past a cap is refused (logged at WARNING and counted by
``nri_plrm_pod_cache_refusals_total``), the cache says it is unavailable (NRI-only decisions) and
lists again after a back-off. Pages are decoded and stored in slices of at most ``SLICE``
seconds between which the event loop serves NRI requests.

``lookup`` only reads the cache: a pod not seen yet is waited for (an ``asyncio.Event`` per uid)
for at most the given timeout. While the API is unreachable the cache says it is unavailable
(the plugin then decides from NRI data alone); the outage is logged once and shown by the
``nri_plrm_pod_cache_available`` gauge, and the cache recovers by itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import httpx2

from nri_plrm.engine.spec import PodSpec
from nri_plrm.observability.metrics import Metrics
from nri_plrm.podsource.background import BackgroundTask
from nri_plrm.podsource.convert import PodObjectError, pod_key, pod_spec_from_api
from nri_plrm.podsource.pages import Refused
from nri_plrm.podsource.podapi import ApiStatusError, PodApi

WATCH_TIMEOUT = 300
"""Seconds the API server keeps one watch request open (``timeoutSeconds``)."""
IDLE_TIMEOUT = 2 * WATCH_TIMEOUT + 60.0
"""Seconds without any watch event after which the watch is restarted (a half-open TCP
connection never ends by itself; the client reopens the watch after each server timeout)."""
UNAVAILABLE_AFTER = 2
"""Consecutive failed requests after which a synced cache counts as unavailable."""
STABLE_WATCH = 10.0
"""Seconds after which a watch that breaks counts as a fresh first failure (quiet watches cut
by load balancers' idle timeouts are not an outage); a watch that ends sooner without any event
is reopened after a back-off."""
SLICE = 0.001
"""Seconds of list decoding between two returns to the event loop."""


@dataclass(frozen=True)
class Backoff:
    """Bounded exponential back-off with full jitter: ``uniform(0, min(cap, base * 2**n))``."""

    initial: float = 0.5
    maximum: float = 30.0

    def delay(self, attempt: int, rand: Callable[[], float] = random.random) -> float:
        """The pause before retry number ``attempt`` (1 for the first retry)."""
        ceiling = min(self.maximum, self.initial * 2.0 ** min(attempt - 1, 32))
        return max(self.initial / 10, ceiling * rand())


class _Waiter:
    __slots__ = ("count", "event")

    def __init__(self) -> None:
        self.event = asyncio.Event()
        self.count = 0


class KubePodCache:
    """``PodSpecSource`` backed by list+watch of the pods bound to ``node_name``.

    ``api`` makes the requests within its caps (see ``nri_plrm.podsource.client.new_pod_api``);
    ``server`` names the API server in log lines. Call ``run()`` in a task (or ``start()``),
    ``stop()`` at shutdown.
    """

    def __init__(
        self,
        api: PodApi,
        node_name: str,
        *,
        metrics: Metrics | None = None,
        logger: logging.Logger | None = None,
        server: str = "",
        backoff: Backoff | None = None,
        watch_timeout: int = WATCH_TIMEOUT,
        idle_timeout: float = IDLE_TIMEOUT,
        unavailable_after: int = UNAVAILABLE_AFTER,
        stable_watch: float = STABLE_WATCH,
    ) -> None:
        if not node_name:
            raise ValueError("kubernetes.node_name '': the pod cache needs this node's name")
        self.api = api
        self.node_name = node_name
        self.metrics = metrics
        self.log = logger or logging.getLogger("nri_plrm.podsource")
        self.server = server or "the Kubernetes API"
        self.backoff = backoff or Backoff()
        self.watch_timeout = watch_timeout
        self.idle_timeout = idle_timeout
        self.unavailable_after = unavailable_after
        self.stable_watch = stable_watch
        self._specs: dict[str, PodSpec] = {}
        self._invalid: dict[str, str] = {}
        self._waiters: dict[str, _Waiter] = {}
        self._rv: str | None = None
        self._synced = False
        self._healthy = False
        self._failures = 0
        self._outage_logged = False
        self._missing_logged = False
        self._lists = 0
        self._refusals = 0
        self._empty_watches = 0
        self._runner = BackgroundTask("pod-cache", self.run)
        self._synced_event = asyncio.Event()
        self.on_change: Callable[[PodSpec], None] | None = None
        """Called with a known pod whose resources changed (an in-place resize)."""
        self.on_object: Callable[[str, Mapping[str, Any]], None] | None = None
        """Called with each pod object stored (its uid key and the object as listed or
        watched), e.g. to fetch its DRA claims."""
        self.on_gone: Callable[[str], None] | None = None
        """Called with the uid key of each pod forgotten."""
        if metrics is not None:
            metrics.set_pod_cache_available(False)

    # ----------------------------------------------------------------- PodSpecSource

    @property
    def available(self) -> bool:
        """True once the first list succeeded and while the API answers."""
        return self._synced and self._healthy

    async def lookup(self, uid: str, namespace: str, name: str, timeout: float) -> PodSpec | None:
        """The pod's spec from the cache, waiting at most ``timeout`` seconds for a pod not seen
        yet; None (counted as a fallback) when unavailable, unknown or unusable."""
        if not self.available:
            self._fallback("unavailable", uid, namespace, name)
            return None
        spec = self._specs.get(uid)
        if spec is None and uid not in self._invalid and timeout > 0:
            waiter = self._waiters.get(uid)
            if waiter is None:
                waiter = self._waiters[uid] = _Waiter()
            waiter.count += 1
            try:
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(waiter.event.wait(), timeout)
            finally:
                waiter.count -= 1
                if waiter.count == 0 and self._waiters.get(uid) is waiter:
                    del self._waiters[uid]
            spec = self._specs.get(uid)
        if spec is not None:
            return spec
        if uid in self._invalid:
            self._fallback("invalid", uid, namespace, name, self._invalid[uid])
        else:
            self._fallback("not_found", uid, namespace, name)
        return None

    # ----------------------------------------------------------------- running

    def start(self) -> asyncio.Task[None]:
        """Run the list+watch loop in a task of the running loop."""
        return self._runner.start()

    async def stop(self) -> None:
        """Stop the loop and close the connections."""
        await self._runner.stop()
        await self.api.close()

    async def wait_synced(self, timeout: float) -> bool:
        """Wait until the first list succeeded; False after ``timeout`` seconds."""
        try:
            await asyncio.wait_for(self._synced_event.wait(), timeout)
        except asyncio.TimeoutError:
            return False
        return True

    def specs(self) -> Mapping[str, PodSpec]:
        """The cached specs by uid (a copy)."""
        return dict(self._specs)

    @property
    def resource_version(self) -> str | None:
        """The last resourceVersion seen (None before the first list or after a 410)."""
        return self._rv

    async def run(self) -> None:
        """List, then watch, forever: resume after drops, relist after 410 or a refused
        answer, back off on errors and on watches that end at once without an event."""
        loop = asyncio.get_running_loop()
        gone = 0
        while True:
            watch_started: float | None = None
            try:
                if self._rv is None:
                    await self._list()
                watch_started = loop.time()
                events = await self._watch()
                if events:
                    gone = 0
                    self._refusals = 0
                    self._empty_watches = 0
                elif loop.time() - watch_started < self.stable_watch:
                    self._empty_watches += 1
                    delay = self.backoff.delay(self._empty_watches)
                    self.log.debug(
                        "pod cache: watch ended without an event, reopening in %.2f s", delay
                    )
                    await asyncio.sleep(delay)
            except asyncio.CancelledError:
                raise
            except Refused as refusal:
                self._rv = None
                await asyncio.sleep(self._refused(refusal))
            except Exception as exc:  # any failure of the API or the connection: retry
                if _is_gone(exc):
                    gone += 1
                    self._rv = None
                    self.log.info("pod cache: resourceVersion expired (410 Gone), listing again")
                    if gone > 1:
                        await asyncio.sleep(self.backoff.delay(gone - 1))
                    continue
                if watch_started is not None and loop.time() - watch_started >= self.stable_watch:
                    self._failures = 0  # a long-lived watch was cut (e.g. an idle timeout)
                self._failed(exc)
                await asyncio.sleep(self.backoff.delay(self._failures))

    async def _list(self) -> None:
        """List every pod page by page within the caps, storing them in slices; pods absent
        from a complete list are forgotten."""
        limits = self.api.limits
        fields = {"spec.nodeName": self.node_name}
        slices = _Slices()
        fresh: dict[str, PodSpec | str] = {}
        cont = rv = ""
        size = pages = 0
        try:
            while True:
                if pages == limits.max_pages:
                    raise Refused(
                        "list_pages",
                        f"pod list still continued after {pages} pages of {limits.page_size}",
                    )
                page = await self.api.list_page(fields, cont, limits.max_list_bytes - size)
                pages += 1
                size += page.size
                for item in page.items():
                    key = pod_key(item) if isinstance(item, dict) else ""
                    if key:
                        fresh[key] = _converted(item)
                        self._observe(key, item)
                    else:
                        self.log.warning("pod cache: ignoring a pod object without metadata.uid")
                    await slices.step()
                cont, rv = page.continue_token, page.resource_version or rv
                if not cont:
                    break
        except Exception:
            while fresh:  # freed in slices too: 100,000 pods at once hold the loop for 0.1 s
                fresh.popitem()
                await slices.step()
            raise
        for key in (self._specs.keys() | self._invalid.keys()) - fresh.keys():
            self._forget(key)
        for key, converted in fresh.items():
            self._store(key, converted)
            await slices.step()
        self._rv = rv
        self._lists += 1
        if self._lists > 1 and self.metrics is not None:
            self.metrics.pod_cache_relisted()
        first = not self._synced
        self._synced = True
        self._synced_event.set()
        self._succeeded()
        if first:
            self.log.info(
                "pod cache synced: %d pods on node %s from %s in %d pages (resourceVersion %s)",
                len(self._specs) + len(self._invalid),
                self.node_name,
                self.server,
                pages,
                rv,
            )

    async def _watch(self) -> int:
        """Apply watch events until the stream ends or stays idle (returns how many arrived)
        or fails (raises)."""
        events = 0
        stream = self.api.watch(
            {"spec.nodeName": self.node_name}, self._rv or "", self.watch_timeout, self.idle_timeout
        )
        try:
            async for kind, obj in stream:
                self._apply(kind, obj)
                self._succeeded()
                events += 1
        finally:
            with contextlib.suppress(Exception):
                await stream.aclose()
        return events

    def _apply(self, kind: str, obj: Mapping[str, Any]) -> None:
        meta = obj.get("metadata")
        rv = meta.get("resourceVersion") if isinstance(meta, Mapping) else None
        if kind in ("ADDED", "MODIFIED"):
            self._put(pod_key(obj), obj)
        elif kind == "DELETED":
            self._forget(pod_key(obj))
        elif kind != "BOOKMARK":
            self.log.warning("pod cache: ignoring watch event of unknown type %r", kind)
        if isinstance(rv, str) and rv:
            self._rv = rv

    def _put(self, key: str, obj: Mapping[str, Any]) -> None:
        if not key:
            self.log.warning("pod cache: ignoring a pod object without metadata.uid")
            return
        self._store(key, _converted(obj))
        self._observe(key, obj)

    def _observe(self, key: str, obj: Mapping[str, Any]) -> None:
        if self.on_object is not None:
            try:
                self.on_object(key, obj)
            except Exception:  # a follower's bug must not stop the watch
                self.log.exception("pod cache: following pod %s failed", key)

    def _store(self, key: str, converted: PodSpec | str) -> None:
        """Keep a converted pod (or why it cannot be used) and wake its waiters."""
        if isinstance(converted, str):
            if self._invalid.get(key) != converted:
                self.log.warning(
                    "pod cache: %s; its containers are placed from NRI data", converted
                )
            self._specs.pop(key, None)
            self._invalid[key] = converted
        else:
            self._invalid.pop(key, None)
            previous = self._specs.get(key)
            self._specs[key] = converted
            if previous is not None and self.on_change is not None and resized(previous, converted):
                try:
                    self.on_change(converted)
                except Exception:  # a follower's bug must not stop the watch
                    self.log.exception("pod cache: following the resize of %s failed", key)
        waiter = self._waiters.get(key)
        if waiter is not None:
            waiter.event.set()

    def _forget(self, key: str) -> None:
        self._specs.pop(key, None)
        self._invalid.pop(key, None)
        if self.on_gone is not None:
            self.on_gone(key)

    # ----------------------------------------------------------------- health

    def _succeeded(self) -> None:
        self._failures = 0
        if self._healthy:
            return
        self._healthy = True
        if self.metrics is not None:
            self.metrics.set_pod_cache_available(self.available)
        if self._outage_logged:
            self._outage_logged = False
            self.log.warning(
                "Kubernetes API reachable again at %s: pod cache synced, whole-pod admission "
                "resumed",
                self.server,
            )

    def _refused(self, refusal: Refused) -> float:
        """Count and log a refused answer, mark the cache unavailable; the pause before the
        next list."""
        self._refusals += 1
        self._failures = 0
        self._healthy = False
        self._outage_logged = True
        if self.metrics is not None:
            self.metrics.set_pod_cache_available(False)
            self.metrics.pod_cache_refused(refusal.reason)
        delay = self.backoff.delay(self._refusals)
        self.log.warning(
            "pod cache: answer of %s refused (%s): %s; deciding from NRI data only, listing "
            "again in %.1f s",
            self.server,
            refusal.reason,
            refusal,
            delay,
        )
        return delay

    def _failed(self, exc: BaseException) -> None:
        self._failures += 1
        if self._healthy and self._failures >= self.unavailable_after:
            self._healthy = False
            if self.metrics is not None:
                self.metrics.set_pod_cache_available(False)
        if not self.available and not self._outage_logged:
            self._outage_logged = True
            self.log.warning(
                "Kubernetes API unreachable at %s (%s); deciding from NRI data only until it is "
                "back (retrying with back-off)",
                self.server,
                describe_failure(exc),
            )
        else:
            self.log.debug("pod cache: request failed: %s", describe_failure(exc))

    def _fallback(self, reason: str, uid: str, namespace: str, name: str, detail: str = "") -> None:
        if self.metrics is not None:
            self.metrics.pod_cache_fallback(reason)
        if reason == "unavailable":
            return
        level = logging.INFO
        if reason == "not_found" and not self._missing_logged:
            self._missing_logged = True
            level = logging.WARNING
            detail = (
                f"not seen on node {self.node_name!r}; if no pod is ever found, check "
                "kubernetes.node_name against `kubectl get nodes`"
            )
        self.log.log(
            level,
            "pod=%s/%s uid=%s: no usable spec in the pod cache (%s)%s; NRI-only inference",
            namespace,
            name,
            uid,
            reason,
            f": {detail}" if detail else "",
        )


def _converted(obj: Mapping[str, Any]) -> PodSpec | str:
    try:
        return pod_spec_from_api(obj)
    except PodObjectError as exc:
        return str(exc)


def resized(old: PodSpec, new: PodSpec) -> bool:
    """True when a pod's pod-level or container resources differ between two specs."""

    def resources(pod: PodSpec) -> object:
        return (
            pod.requests,
            pod.limits,
            [(c.name, c.requests, c.limits) for c in pod.all_containers()],
        )

    return resources(old) != resources(new)


def _is_gone(exc: BaseException) -> bool:
    if isinstance(exc, ApiStatusError):
        return exc.code == 410
    if isinstance(exc, httpx2.HTTPStatusError):
        return exc.response.status_code == 410
    return False


def describe_failure(exc: BaseException) -> str:
    """A failed API request in one line: the HTTP status (and message) or the exception."""
    if isinstance(exc, ApiStatusError):
        return str(exc)
    if isinstance(exc, httpx2.HTTPStatusError):
        return f"HTTP {exc.response.status_code}"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


class _Slices:
    """Returns to the event loop once ``SLICE`` seconds of work went by since the last return."""

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._until = self._loop.time() + SLICE

    async def step(self) -> None:
        """Yield to the loop if this slice is spent."""
        if self._loop.time() >= self._until:
            await asyncio.sleep(0)
            self._until = self._loop.time() + SLICE
