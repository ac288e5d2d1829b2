"""Device hints benchmark: what knowing a pod's devices adds to RunPodSandbox.

The plugin's handler (engine, journal and checkpoints on disk) decides 500 pod-level pods in
turn (Guaranteed budgets of 250m CPU and 64Mi memory, scope pod, single-numa-node on the
default 4-NUMA machine) in three configurations: without a kubelet socket; with one (a
PodResources server in its own process, as the kubelet is, answering each pod's ``Get`` with
one GPU on the pod's NUMA node, and ``GetAllocatableResources`` with 8 GPUs, 2 per node); and
with the socket and the kubelet's device checkpoint, which the "kubelet" rewrites (temporary
file and rename, as the kubelet does) with each pod's allocation ``GAP`` seconds before the
pod's RunPodSandbox: the admission-to-sandbox delay, far shorter than on a node (the kubelet
polls for the pod's volumes every 300 ms first, and containerd sets up the pod's network before
the NRI event), so the background parse has often not run yet and the lookup reads the file
itself. The checkpoint holds every admitted pod (up to 500 entries, 70 KB), far more than a node
with a few GPUs (one entry per allocated device). Pods are paced by ``GAP`` in every
configuration. Each
configuration decides the 500 pods ``ROUNDS`` times on a fresh state, in alternation, after a
warm-up round and the daemon's start-up freeze of the collector's objects.

- ``run_pod_sandbox_p99_ms_devices`` / ``..._p50_...``: the handler's time per pod with the
  kubelet answering, as deployed (checkpoint and socket);
- ``run_pod_sandbox_p99_ms_devices_get`` / ``..._p50_...``: the same with the socket only
  (a ``Get`` per pod);
- ``run_pod_sandbox_p99_ms_no_devices`` / ``..._p50_...``: the same pods without devices;
- ``device_lookup_p99_ms`` / ``device_lookup_get_p99_ms`` (and p50s): the device lookup step
  of each;
- ``device_checkpoint_hit_ratio``: lookups the checkpoint answered (the rest asked ``Get``);
- ``device_lookup_unanswered``: lookups of either configuration the kubelet's socket did not
  answer within the deadline (those pods are decided without device hints; every other pod's
  hint is checked to be its GPU's node);
- ``run_pod_sandbox_p99_added_ms_devices`` (``..._get``): p99 of what devices add to each
  decision: the lookup step plus the difference of the p50s beyond it (the device hint in the
  merge). The whole-handler p99s differ by the node's noise (journal compaction, other
  processes) more than by the lookup, so their difference is not used.
Target: added p99 <= 1 ms.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import tempfile
import time
from concurrent import futures
from pathlib import Path

import grpc

from bench.common import main, percentile
from nri_plrm.checkpoint.store import CheckpointStore
from nri_plrm.config.file import parse_config
from nri_plrm.daemon.service import freeze_startup_objects
from nri_plrm.engine.facade import Engine
from nri_plrm.engine.spec import ContainerSpec, PodSpec
from nri_plrm.ledger import NodeLedger
from nri_plrm.plugin.handlers import Plugin
from nri_plrm.podresources.device_checkpoint import CHECKPOINT_NAME, DeviceCheckpoint
from nri_plrm.podresources.devices import DevicesByContainer, KubeletDevices
from nri_plrm.proto import nri_api_pb2 as api
from nri_plrm.proto import podresources_api_pb2 as pb
from nri_plrm.topology.machines import MACHINES
from nri_plrm.translate.pod_to_cri import nri_pod_sandbox

PODS = 500
ROUNDS = 3
"""Rounds of 500 pods per configuration, alternated: each p99 is over 1,500 samples."""
GPU = "nvidia.com/gpu"
NUMA_NODES = 4
CONFIG = '[topology_manager]\npolicy = "single-numa-node"\nscope = "pod"\n'
DEADLINE = 0.1
"""``[pod_resources] device_timeout``'s default."""
GAP = 0.005
"""Seconds between a pod's admission (its allocation in the checkpoint) and its sandbox."""


def _gpu(device_id: str, node: int) -> pb.ContainerDevices:
    return pb.ContainerDevices(
        resource_name=GPU,
        device_ids=[device_id],
        topology=pb.TopologyInfo(nodes=[pb.NUMANode(ID=node)]),
    )


def serve_kubelet(path: str) -> None:
    """A kubelet PodResources endpoint: pod ``bench-dev-<i>``'s container ``main`` holds
    ``gpu-<i % 4>`` on NUMA ``i % 4``. Runs until killed."""

    def get(request: bytes, context: object) -> bytes:
        req = pb.GetPodResourcesRequest.FromString(request)
        node = int(req.pod_name.rsplit("-", 1)[1]) % NUMA_NODES
        main = pb.ContainerResources(name="main", devices=[_gpu(f"gpu-{node}", node)])
        pod = pb.PodResources(name=req.pod_name, namespace=req.pod_namespace, containers=[main])
        return pb.GetPodResourcesResponse(pod_resources=pod).SerializeToString()

    def allocatable(request: bytes, context: object) -> bytes:
        gpus = [_gpu(f"gpu-{i}", i % NUMA_NODES) for i in range(2 * NUMA_NODES)]
        return pb.AllocatableResourcesResponse(devices=gpus).SerializeToString()

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    handlers = {
        "Get": grpc.unary_unary_rpc_method_handler(get),
        "GetAllocatableResources": grpc.unary_unary_rpc_method_handler(allocatable),
    }
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("v1.PodResourcesLister", handlers),)
    )
    server.add_insecure_port(f"unix:{path}")
    server.start()
    server.wait_for_termination()


class TimedDevices(KubeletDevices):
    """The plugin's device lookups, each timed (the step devices add to the handler): the
    checkpoint's answer, else the ``Get``."""

    def __init__(self, socket_path: str, checkpoint: str = "") -> None:
        super().__init__(
            socket_path,
            DEADLINE,
            count=self._result,
            checkpoint=DeviceCheckpoint(checkpoint) if checkpoint else None,
        )
        self.samples: list[float] = []
        self.results: list[str] = []
        """Each lookup's result (``LOOKUP_RESULTS``), in order."""
        self.hits = 0
        self._known_took = 0.0

    def _result(self, result: str) -> None:
        self.results.append(result)

    def known(self, uid: str) -> DevicesByContainer | None:
        started = time.perf_counter()
        found = super().known(uid)
        took = time.perf_counter() - started
        if found is not None:
            self.hits += 1
            self.samples.append(took)
        else:
            self._known_took = took
        return found

    async def lookup(self, namespace: str, name: str) -> DevicesByContainer | None:
        started = time.perf_counter()
        try:
            return await super().lookup(namespace, name)
        finally:
            self.samples.append(time.perf_counter() - started + self._known_took)
            self._known_took = 0.0


def _admit(path: str, admitted: int) -> None:
    """The kubelet's checkpoint after admitting pods 0..``admitted``-1 (``gpu-<i % 4>`` on
    NUMA ``i % 4`` for each pod's container ``main``)."""
    entries = [
        {
            "PodUID": f"bench-dev-{i}",
            "ContainerName": "main",
            "ResourceName": GPU,
            "DeviceIDs": {str(i % NUMA_NODES): [f"gpu-{i % NUMA_NODES}"]},
            "AllocResp": "CgA=",
        }
        for i in range(admitted)
    ]
    doc = {"Data": {"PodDeviceEntries": entries, "RegisteredDevices": {}}, "Checksum": 0}
    with open(path + ".tmp", "w") as out:
        json.dump(doc, out)
    os.rename(path + ".tmp", path)


def _pods() -> list[api.PodSandbox]:
    budget = {"cpu": 250, "memory": 64 << 20}
    specs = [
        PodSpec(
            uid=f"bench-dev-{i}",
            name=f"bench-dev-{i}",
            containers=(ContainerSpec("main"),),
            requests=budget,
            limits=budget,
        )
        for i in range(PODS)
    ]
    return [nri_pod_sandbox(spec) for spec in specs]


async def _decide(state: Path, devices: TimedDevices | None, checkpoint: str = "") -> list[float]:
    """Seconds per RunPodSandbox of the handler, for every pod; checks the alignment. With
    ``checkpoint``, each pod's allocation is written there ``GAP`` before its sandbox."""
    engine = Engine(MACHINES["default"], parse_config(CONFIG).engine_config())
    plugin = Plugin(NodeLedger(engine, store=CheckpointStore(str(state))), devices=devices)
    plugin.ledger.open()
    if checkpoint:
        _admit(checkpoint, 0)
    if devices is not None:
        devices.start()
    await asyncio.sleep(0.1)  # the daemon's start: the checkpoint parsed, the inventory asked
    pods = _pods()
    samples = []
    first = len(devices.results) if devices is not None else 0
    for i, pod in enumerate(pods):
        if checkpoint:
            _admit(checkpoint, i + 1)
        await asyncio.sleep(GAP)
        started = time.perf_counter()
        await plugin.run_pod_sandbox(pod)
        samples.append(time.perf_counter() - started)
    if devices is not None:  # every pod holds a GPU: "none" would be a wrong answer
        results = devices.results[first:]
        assert len(results) == len(pods) and "none" not in results, results
        for i, pod in enumerate(pods):
            if results[i] != "found":  # the kubelet's socket did not answer in time
                continue
            record = plugin.ledger.engine.admitted(pod.uid)
            hint = record.hint if record is not None else None
            assert hint is not None and hint.numa_affinity == 1 << (i % NUMA_NODES), (i, hint)
    plugin.ledger.close()
    if devices is not None:
        await devices.close()
    return samples


def run() -> dict[str, float]:
    """Measure and return the figures (milliseconds)."""
    with tempfile.TemporaryDirectory(prefix="nri-plrm-bench-") as tmp:
        sock = os.path.join(tmp, "kubelet.sock")
        checkpoint = os.path.join(tmp, CHECKPOINT_NAME)
        kubelet = multiprocessing.get_context("spawn").Process(
            target=serve_kubelet, args=(sock,), daemon=True
        )
        kubelet.start()
        try:
            for _ in range(200):
                if os.path.exists(sock):
                    break
                time.sleep(0.05)
            warm = TimedDevices(sock, checkpoint)
            asyncio.run(_decide(Path(tmp, "warm"), warm, checkpoint))  # imports, connection
            freeze_startup_objects()  # as the daemon does once started
            cached, get = TimedDevices(sock, checkpoint), TimedDevices(sock)
            plain: list[float] = []
            with_cached: list[float] = []
            with_get: list[float] = []
            for round_ in range(ROUNDS):  # alternated: a noisy phase hits all alike
                plain += asyncio.run(_decide(Path(tmp, f"plain-{round_}"), None))
                with_get += asyncio.run(_decide(Path(tmp, f"get-{round_}"), get))
                with_cached += asyncio.run(
                    _decide(Path(tmp, f"cached-{round_}"), cached, checkpoint)
                )
        finally:
            kubelet.kill()
            kubelet.join()
    ms = 1000
    p50_without = percentile(plain, 50) * ms
    out = {
        "run_pod_sandbox_p50_ms_no_devices": p50_without,
        "run_pod_sandbox_p99_ms_no_devices": percentile(plain, 99) * ms,
        "device_checkpoint_hit_ratio": cached.hits / len(cached.samples),
        "device_lookup_unanswered": sum(
            r in ("timeout", "failed") for r in cached.results + get.results
        ),
    }
    for suffix, timed, handler in (("", cached, with_cached), ("_get", get, with_get)):
        lookup_p50 = percentile(timed.samples, 50) * ms
        lookup_p99 = percentile(timed.samples, 99) * ms
        p50_with = percentile(handler, 50) * ms
        out |= {
            f"run_pod_sandbox_p50_ms_devices{suffix}": p50_with,
            f"run_pod_sandbox_p99_ms_devices{suffix}": percentile(handler, 99) * ms,
            f"device_lookup{suffix}_p50_ms": lookup_p50,
            f"device_lookup{suffix}_p99_ms": lookup_p99,
            f"run_pod_sandbox_p99_added_ms_devices{suffix}": lookup_p99
            + max(0.0, p50_with - p50_without - lookup_p50),
        }
    return out


if __name__ == "__main__":
    main(run)
