"""Hostile API server benchmark: the daemon's NRI latency and memory while its pod cache faces a
broken or malicious Kubernetes API server (issue 28, findings 2 to 6).

The daemon (``python -m nri_plrm.daemon.service``, ``[kubernetes] enabled``, default caps) runs on
the
fake 256-CPU machine; the fake API server (``tests/support/fakekube.py``) runs in a process of
its own, so serving the flood costs the daemon nothing but what it reads. Once the daemon is
registered and its cache synced, the case's mode is turned on (the cache meets it at once: a
410 makes it list again, or its watch is ended) and the simulator runs one BestEffort pod after
another for ``DURATION`` seconds (RunPodSandbox, CreateContainer, StartContainer, removal; the
pods are known to the API) while the daemon's VmRSS is sampled. Per case ``CASE``:

- ``hostile_CASE_create_p99_ms``: CreateContainer round trip p99 (target < 20 ms);
- ``hostile_CASE_request_max_ms``: the slowest NRI request of any kind (a stalled event loop
  shows here first: one stall is one slow request, below the p99 of thousands);
- ``hostile_CASE_rss_max_mb``: the highest VmRSS sampled (target < 200 MiB);
- ``hostile_CASE_sigterm_s``: SIGTERM to exit at the end;
- ``hostile_CASE_nri_failures``: NRI requests that failed or timed out (target 0).

Cases: ``huge_list`` (41,500 pods, paged), ``huge_page`` (the same in one 8 MB page: a server
ignoring ``limit``), ``endless_continue``, ``huge_watch_line`` (a 300 MB line on each watch),
``empty_watch`` (every watch ends at once; ``hostile_empty_watch_watches`` counts the watch
requests). ``hostile_unknown_pods_8_synchronize_ms``: the Synchronize of 8 pods the synced API
cache does not know (as with a wrong ``node_name``), which the runtime must have within 2 s
(``..._synchronize_failed`` 1 when it did not).
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import signal
import tempfile
import time
import urllib.request
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from bench.common import main, percentile
from bench.rss import status_mib
from bench.startup import Daemon, daemon_config, write_machine
from nri_plrm.engine.spec import ContainerSpec, PodSpec

NODE = "node-a"
DURATION = 10.0
HUGE_LIST = 41_500
WATCH_LINE = 300 << 20
UNKNOWN = 8
PROBES = 50
"""Distinct probe pods known to the API (reused in turn)."""
CASES = ("huge_list", "huge_page", "endless_continue", "huge_watch_line", "empty_watch")


def probe(i: int) -> PodSpec:
    """A BestEffort probe pod of one container."""
    return PodSpec(uid=f"probe-{i}", name=f"probe-{i}", containers=(ContainerSpec("c"),))


def _probe_object(spec: PodSpec, node: str) -> dict[str, Any]:
    meta = {"name": spec.name, "namespace": spec.namespace, "uid": spec.uid}
    return {"metadata": meta, "spec": {"nodeName": node, "containers": [{"name": "c"}]}}


def _serve_api(pipe: Connection) -> None:
    """The fake API server: sends its URL, then obeys ``("hostile", CASE)`` (turn the mode on
    and make the cache meet it: a relist or a new watch) and ``("stop",)`` (answer the count of
    watch requests, stop)."""
    from fakekube import FakeKube

    async def serve() -> None:
        fk = FakeKube()
        for i in range(PROBES):
            fk.add(_probe_object(probe(i), NODE))
        await fk.start()
        pipe.send(fk.url)
        loop = asyncio.get_running_loop()
        while True:
            command = await loop.run_in_executor(None, pipe.recv)
            if command[0] == "stop":
                pipe.send(len(fk.pod_requests(watch=True)))
                break
            _hostile(fk, command[1])
            pipe.send("ok")
        await fk.stop()

    asyncio.run(serve())


def _hostile(fk: Any, case: str) -> None:
    """Turn ``case`` on; the cache meets it at its next list (410) or watch."""
    if case in ("huge_list", "huge_page"):
        fk.fill(HUGE_LIST, NODE)
        fk.ignore_limit = case == "huge_page"
    fk.endless_continue = case == "endless_continue"
    fk.watch_line_bytes = WATCH_LINE if case == "huge_watch_line" else 0
    fk.watch_ends_at_once = case == "empty_watch"
    if case in ("huge_list", "huge_page", "endless_continue"):
        fk.expire_watches()
    else:
        fk.end_watches()


class FakeApi:
    """The fake API server in a process of its own."""

    def __init__(self) -> None:
        ctx = multiprocessing.get_context("spawn")
        self._pipe, child = ctx.Pipe()
        self._proc = ctx.Process(target=_serve_api, args=(child,), daemon=True)
        self._proc.start()
        self.url: str = self._pipe.recv()

    def hostile(self, case: str) -> None:
        """Turn the case's mode on."""
        self._pipe.send(("hostile", case))
        self._pipe.recv()

    def stop(self) -> int:
        """Stop the server; the count of watch requests it answered."""
        self._pipe.send(("stop",))
        watches: int = self._pipe.recv()
        self._proc.join(10)
        if self._proc.is_alive():
            self._proc.kill()
        return watches


def _config(tmp: Path, url: str, node: str) -> Path:
    """The daemon's configuration with ``[kubernetes]`` on the fake API server."""
    from fakekube import kubeconfig_text

    path = daemon_config(tmp, pod_resources=False)
    (tmp / "kubeconfig").write_text(kubeconfig_text(url))
    text = path.read_text() + (
        f'[kubernetes]\nenabled = true\nkubeconfig = "{tmp}/kubeconfig"\n'
        f'node_name = "{node}"\nlookup_timeout = 0.5\n'
    )
    path.write_text(text)
    return path


def _stop(daemon: Daemon) -> tuple[float, int]:
    started = time.perf_counter()
    daemon.proc.send_signal(signal.SIGTERM)
    try:
        code = daemon.proc.wait(timeout=30)
    except Exception:
        daemon.proc.kill()
        code = daemon.proc.wait()
    return time.perf_counter() - started, code


async def _case(tmp: Path, case: str) -> dict[str, float]:
    from nrisim import NRISimulator
    from plrm_runtime import FakeRuntime

    api = FakeApi()
    sim = await NRISimulator.start(str(tmp / "nri.sock"), request_timeout=2.0)
    config = _config(tmp, api.url, NODE)
    daemon = Daemon(config, tmp / "daemon.log")
    rss: list[float] = []
    try:
        await sim.wait_registered(timeout=60)
        await _cache_available(config)
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, api.hostile, case)
        rt = FakeRuntime(sim)
        first = len(sim.records)
        end = loop.time() + DURATION
        i = failed = 0
        while loop.time() < end:
            i += 1
            try:
                pod = await rt.launch(probe(i % PROBES))
                rss.append(status_mib(daemon.pid, "VmRSS"))
                await rt.remove_pod(pod)
            except Exception:  # a timeout or a refusal: counted, the runtime goes on
                failed += 1
                rt = FakeRuntime(sim)
                await asyncio.sleep(0.1)
        records = sim.records[first:]
        creates = [r.seconds for r in records if r.method == "CreateContainer"]
        slowest = max(r.seconds for r in records)
        rss.append(status_mib(daemon.pid, "VmRSS"))
    finally:
        took, code = await asyncio.get_running_loop().run_in_executor(None, _stop, daemon)
        with contextlib.suppress(Exception):
            await sim.close()
        watches = api.stop()
    if code != 0:
        log = (tmp / "daemon.log").read_text()
        raise RuntimeError(f"{case}: daemon exited with {code}:\n{log}")
    out = {
        f"hostile_{case}_create_p99_ms": percentile(creates, 99) * 1000,
        f"hostile_{case}_request_max_ms": slowest * 1000,
        f"hostile_{case}_rss_max_mb": max(rss),
        f"hostile_{case}_sigterm_s": took,
        f"hostile_{case}_nri_failures": float(failed),
    }
    if case == "empty_watch":
        out["hostile_empty_watch_watches"] = float(watches)
    return out


async def _cache_available(config: Path, timeout: float = 60) -> None:
    """Wait until the daemon's metrics say its pod cache is synced."""
    text = config.read_text()
    url = "http://" + text.split('address = "', 1)[1].split('"', 1)[0] + "/metrics"
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        with contextlib.suppress(OSError):
            body = await loop.run_in_executor(None, _get, url)
            if "nri_plrm_pod_cache_available 1.0" in body.splitlines():
                return
        await asyncio.sleep(0.05)
    raise RuntimeError("the daemon's pod cache never synced")


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as reply:
        return str(reply.read().decode())


async def _unknown_pods(tmp: Path) -> dict[str, float]:
    """The daemon's cache synced first, then the runtime comes with pods it does not know."""
    from nrisim import NRISimulator

    from nri_plrm.translate.pod_to_cri import nri_pod_sandbox

    pods = [nri_pod_sandbox(probe(1000 + i)) for i in range(UNKNOWN)]
    api = FakeApi()
    config = _config(tmp, api.url, NODE)
    daemon = Daemon(config, tmp / "daemon.log")
    try:
        await _cache_available(config)
        sim = await NRISimulator.start(str(tmp / "nri.sock"), request_timeout=2.0, pods=pods)
        try:
            with contextlib.suppress(Exception):  # a Synchronize past its timeout: see below
                await sim.wait_registered(timeout=20)
            sync = next(r for r in sim.records if r.method == "Synchronize")
        finally:
            with contextlib.suppress(Exception):
                await sim.close()
    finally:
        await asyncio.get_running_loop().run_in_executor(None, _stop, daemon)
        api.stop()
    return {
        f"hostile_unknown_pods_{UNKNOWN}_synchronize_ms": sync.seconds * 1000,
        f"hostile_unknown_pods_{UNKNOWN}_synchronize_failed": float(sync.error is not None),
    }


def run() -> dict[str, float]:
    """Measure every case; returns the figures."""
    results: dict[str, float] = {}
    for case in CASES:
        with tempfile.TemporaryDirectory(prefix=f"nri-plrm-hostile-{case}-") as tmp:
            write_machine(Path(tmp))
            results.update(asyncio.run(_case(Path(tmp), case)))
    with tempfile.TemporaryDirectory(prefix="nri-plrm-hostile-unknown-") as tmp:
        write_machine(Path(tmp))
        results.update(asyncio.run(_unknown_pods(Path(tmp))))
    return results


if __name__ == "__main__":
    main(run)
