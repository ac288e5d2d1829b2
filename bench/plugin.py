"""Plugin benchmark: CreateContainer and Synchronize end to end on a 256-CPU machine.

The plugin (engine, journal and checkpoints on disk, wire stub) runs in its own process, as in
production; the runtime side is the test simulator (``tests/support/nrisim``) driven through
the test runtime model, with NRI messages from the kubelet translation.

- ``create_container_p50_ms_500live`` / ``..._p99_...``: round trip of CreateContainer with
  500 live containers (80 pod-level pods of 5 containers, 100 BestEffort pods), measured on new
  pod-level pods (one exclusive CPU, one pod-shared container) created and removed in turn; the
  first container of each carries the node-shared pool updates (100 containers) unless the
  runtime already has that pool: the previous pod held the same CPUs and the growth after its
  removal was still waiting (``nri_plrm.plugin.pool_updates``: until decisions pause for 50 ms, 1 s
  at
  most; most pods here).
- ``synchronize_1000_ms``: the Synchronize a restarted plugin answers with its checkpoint, for
  1,000 containers (100 pod-level pods of 5, 500 BestEffort pods).
- ``synchronize_1000_adopt_ms``: the same without a checkpoint (every container adopted).
- ``create_container_p99_ms_500live_cpu_load`` / ``..._io_load`` (and their p50): the same
  CreateContainer figures, on the same 500 live containers, while two busy processes keep the
  CPUs busy, or while four processes write and sync files on the state directory's filesystem
  (``bench.load``; the benchmark starts and stops them). Each load is placed as on a Kubernetes
  node with the packaged unit: the busy processes in a pods cgroup, the plugin and the simulator
  in a system cgroup, with the weights of ``kubepods.slice`` and ``system.slice``; the writers
  (containerd's image pulls) and the simulator (containerd) in a runtime cgroup of weight 100,
  the plugin in its own with the ``CPUWeight=`` of ``systemd/nri-plrm.service``
  (``cpu_load_node_cgroups`` and ``io_load_node_cgroups`` are 1; 0 when that could not be done
  and every process shared one cgroup).
- ``create_container_p99_ms_500live_cpu_load_one_cgroup`` and ``..._io_load_one_cgroup`` (and
  their p50): the same with the load beside the plugin and the simulator in one cgroup, as on a
  node where the plugin runs without its unit's weight.
Targets: CreateContainer p99 <= 5 ms (<= 5 ms under io load, <= 8 ms under cpu load),
Synchronize <= 200 ms. While it samples, this process (the runtime side) holds its
cyclic collector, as ``timeit`` does: containerd's runs beside its work, and a pause of the
simulator's would count as the plugin's latency.

``BENCH_PLUGIN_CODE=DIR`` runs the plugin process from another checkout's ``nri_plrm`` (to
measure an older mechanism, e.g. the journal ``fdatasync`` before every reply, on this harness).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import inspect
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from bench.common import main, percentile
from bench.load import LoadPlacement, cpu_load, io_load

ROOT = Path(__file__).resolve().parent.parent

SPEC_256 = "sockets=2,numa_per_socket=4,cores_per_numa=16,threads_per_core=2,memory_per_numa=64Gi"
CONFIG = '[topology_manager]\npolicy = "single-numa-node"\nscope = "pod"\n'
SAMPLES = 1000
"""Pods per load, two CreateContainer samples each: a p99 of 2,000 samples. With 200 pods the
p99 was the fourth-slowest of 400, and the short load phase measured mostly the writers' start;
it swung by a factor of three between runs of the same code."""
GI = 1 << 30
LOADS = ("quiet", "cpu", "cpu_one_cgroup", "io", "io_one_cgroup")
SUFFIXES = {
    "quiet": "",
    "cpu": "_cpu_load",
    "cpu_one_cgroup": "_cpu_load_one_cgroup",
    "io": "_io_load",
    "io_one_cgroup": "_io_load_one_cgroup",
}
PLACED = ("cpu", "io")
"""The loads placed as on a node; ``<load>_load_node_cgroups`` says whether that was done."""
CODE_ENV = "BENCH_PLUGIN_CODE"


def _plugin_code() -> None:
    """Import ``nri_plrm`` from ``$BENCH_PLUGIN_CODE`` when set (before any import of it)."""
    code = os.environ.get(CODE_ENV)
    if code and code not in sys.path:
        sys.path.insert(0, code)


def serve_plugin(socket_path: str, state_dir: str) -> None:
    """Run the plugin behind the stub until the runtime goes away (child process)."""
    _plugin_code()
    from nri_plrm.checkpoint.store import CheckpointStore
    from nri_plrm.config.file import parse_config
    from nri_plrm.engine.facade import Engine
    from nri_plrm.ledger import NodeLedger
    from nri_plrm.nri.stub import Stub
    from nri_plrm.plugin.handlers import Plugin
    from nri_plrm.topology.synthetic import synthetic_topology

    engine = Engine(synthetic_topology(SPEC_256), parse_config(CONFIG).engine_config())
    plugin = Plugin(NodeLedger(engine, store=CheckpointStore(state_dir)))
    plugin.ledger.open()
    stub = Stub(
        plugin,
        name="bench",
        index="50",
        socket_path=socket_path,
        reconnect=False,
        request_timeout=10.0,
    )
    if "nri_version" in inspect.signature(plugin.attach).parameters:
        plugin.attach(stub.update_containers, nri_version=lambda: stub.runtime_nri_version)
    else:  # an older checkout (BENCH_PLUGIN_CODE): no choice of the update path
        plugin.attach(stub.update_containers)
    try:
        from nri_plrm.daemon.service import freeze_startup_objects
    except ImportError:  # an older checkout (BENCH_PLUGIN_CODE) without it
        pass
    else:
        freeze_startup_objects()
    asyncio.run(stub.run())


def pod_level(i: int, shared: int) -> object:
    from nri_plrm.engine.spec import ContainerKind, ContainerSpec, PodSpec

    one = {"cpu": 1000, "memory": GI}
    budget = {"cpu": 2000, "memory": 2 * GI}
    sidecars = tuple(ContainerSpec(f"side-{k}", ContainerKind.SIDECAR) for k in range(shared))
    return PodSpec(
        uid=f"bench-pl-{i}",
        name=f"bench-pl-{i}",
        init_containers=sidecars,
        containers=(ContainerSpec("main", requests=one, limits=one),),
        requests=budget,
        limits=budget,
    )


def best_effort(i: int) -> object:
    from nri_plrm.engine.spec import ContainerSpec, PodSpec

    return PodSpec(uid=f"bench-be-{i}", name=f"bench-be-{i}", containers=(ContainerSpec("c"),))


def serve_logged(socket_path: str, state_dir: str) -> None:
    """:func:`serve_plugin`, logging as the daemon does at its default level (the parent
    discards the lines)."""
    _plugin_code()
    from nri_plrm.daemon.service import setup_logging

    setup_logging("info", "text")
    serve_plugin(socket_path, state_dir)


class PluginChild:
    """The plugin child process: ``serve(socket_path, state_dir)`` from the module ``module``,
    run from the repository root; its stderr discarded when ``quiet``."""

    def __init__(
        self,
        socket_path: str,
        state_dir: str,
        module: str = "bench.plugin",
        serve: str = "serve_plugin",
        quiet: bool = False,
    ) -> None:
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-c",
                f"from {module} import {serve}; {serve}({socket_path!r}, {state_dir!r})",
            ],
            cwd=ROOT,
            stderr=subprocess.DEVNULL if quiet else None,
        )

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()


async def _populate(rt: object, n_pod_level: int, shared: int, n_best_effort: int) -> None:
    for i in range(n_pod_level):
        await rt.launch(pod_level(i, shared))  # type: ignore[attr-defined]
    for i in range(n_best_effort):
        await rt.launch(best_effort(i))  # type: ignore[attr-defined]


CONNECT_TIMEOUT = 60.0


async def _connect(sim: object, proc: PluginChild, old: object = None) -> object:
    """Wait for the plugin child's new session and its registration; raises RuntimeError when
    the child exits or does not connect within ``CONNECT_TIMEOUT`` seconds."""
    deadline = time.monotonic() + CONNECT_TIMEOUT
    while sim.session is old:  # type: ignore[attr-defined]
        if proc.proc.poll() is not None:
            raise RuntimeError(f"plugin child exited with {proc.proc.returncode} before connecting")
        if time.monotonic() > deadline:
            raise RuntimeError(f"plugin child not connected after {CONNECT_TIMEOUT:g} s")
        await asyncio.sleep(0.01)
    return await sim.wait_registered(timeout=CONNECT_TIMEOUT)  # type: ignore[attr-defined]


@contextlib.contextmanager
def _runtime_collector_held() -> Iterator[None]:
    """This process (the runtime side) with its cyclic collector held, as ``timeit`` does.
    containerd's Go collector runs beside its goroutines; this process's stops the world
    (measured: a dozen generation-1 collections of 2-7 ms per phase, and one of generation 2 of
    30-60 ms), and a pause here would count as the plugin's latency. The plugin's own collector
    runs as in production."""
    gc.collect()
    gc.freeze()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
        gc.unfreeze()


async def _create_samples(sim: object, rt: object, first: int) -> list[float]:
    with _runtime_collector_held():
        return await _timed_creates(sim, rt, first)


async def _timed_creates(sim: object, rt: object, first: int) -> list[float]:
    samples: list[float] = []
    for i in range(first, first + SAMPLES):
        spec = pod_level(i, 1)
        pod = await rt.run_pod(spec)  # type: ignore[attr-defined]
        for ctr in spec.all_containers():  # type: ignore[attr-defined]
            start = len(sim.records)  # type: ignore[attr-defined]
            await rt.create(pod, spec, ctr)  # type: ignore[attr-defined]
            record = sim.records[start]  # type: ignore[attr-defined]
            assert record.method == "CreateContainer" and record.error is None
            samples.append(record.seconds)
        await rt.remove_pod(pod)  # type: ignore[attr-defined]
    return samples


def _load(
    name: str, state_dir: str, plugin_pid: int
) -> contextlib.AbstractContextManager[LoadPlacement | None]:
    """The context manager running load ``name`` (one of ``LOADS``)."""
    if name == "quiet":
        return contextlib.nullcontext()
    if name.startswith("io"):
        return io_load(state_dir, measured=[plugin_pid], node_cgroups=name == "io")
    return cpu_load(measured=[plugin_pid], node_cgroups=name == "cpu")


async def _create_latency(
    tmp: str, loads: tuple[str, ...]
) -> tuple[dict[str, list[float]], dict[str, bool]]:
    """CreateContainer samples with 500 live containers, per load (``LOADS``), and whether each
    of the ``PLACED`` loads that ran had its node placement."""
    from nrisim import NRISimulator
    from plrm_runtime import FakeRuntime

    sock = os.path.join(tmp, "create.sock")
    state = os.path.join(tmp, "create-state")
    sim = await NRISimulator.start(sock, request_timeout=10.0)
    plugin = PluginChild(sock, state, serve="serve_logged", quiet=True)
    try:
        await _connect(sim, plugin)
        rt = FakeRuntime(sim)
        await _populate(rt, 80, 4, 100)
        assert len(rt.containers) == 500
        by_load: dict[str, list[float]] = {}
        node_cgroups: dict[str, bool] = {}
        for n, load in enumerate(loads):
            with _load(load, state, plugin.proc.pid) as placement:
                by_load[load] = await _create_samples(sim, rt, 1000 + n * SAMPLES)
            if load in PLACED and placement is not None:
                node_cgroups[load] = placement.node_cgroups
        return by_load, node_cgroups
    finally:
        plugin.kill()
        await sim.close()


async def _synchronize(tmp: str) -> tuple[float, float]:
    from nrisim import NRISimulator
    from plrm_runtime import FakeRuntime

    sock = os.path.join(tmp, "sync.sock")
    state = os.path.join(tmp, "sync-state")
    sim = await NRISimulator.start(sock, request_timeout=10.0)
    plugin = PluginChild(sock, state, serve="serve_logged", quiet=True)
    try:
        await _connect(sim, plugin)
        rt = FakeRuntime(sim)
        await _populate(rt, 100, 4, 500)
        assert len(rt.containers) == 1000
        plugin.kill()
        figures = []
        for keep_checkpoint in (True, False):
            if not keep_checkpoint:
                os.unlink(os.path.join(state, "state.json"))
            sim.pods, sim.containers = rt.sync_lists()
            old = sim.session
            plugin = PluginChild(sock, state, serve="serve_logged", quiet=True)
            await _connect(sim, plugin, old)
            sync = [r for r in sim.records if r.method == "Synchronize"][-1]
            figures.append(sync.seconds)
            plugin.kill()
        return figures[0], figures[1]
    finally:
        plugin.kill()
        await sim.close()


def run(loads: tuple[str, ...] = LOADS) -> dict[str, float]:
    """Measure and return the figures (milliseconds)."""
    with tempfile.TemporaryDirectory(prefix="nri-plrm-bench-") as tmp:
        by_load, node_cgroups = asyncio.run(_create_latency(tmp, loads))
        sync_ms, adopt_ms = asyncio.run(_synchronize(tmp))
    results: dict[str, float] = {}
    for load, samples in by_load.items():
        suffix = SUFFIXES[load]
        results[f"create_container_p50_ms_500live{suffix}"] = percentile(samples, 50) * 1000
        results[f"create_container_p99_ms_500live{suffix}"] = percentile(samples, 99) * 1000
    for load, placed in node_cgroups.items():
        results[f"{load}_load_node_cgroups"] = int(placed)
    results["synchronize_1000_ms"] = sync_ms * 1000
    results["synchronize_1000_adopt_ms"] = adopt_ms * 1000
    return results


if __name__ == "__main__":
    main(run)
