"""``nri-plrm scheduler-extender`` over HTTP against the fake API server: requests decoded as
kube-scheduler sends them (the Go field names of ``k8s.io/kube-scheduler/extender/v1``, which
has no JSON tags), answers checked field by field against those types, filter verdicts with the
kubelet's reason and cause, unresolvable pods, scoring, bind and the assume cache, metrics and
health."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from extender_diff import LedgerNode, spec_of
from fakekube import FakeKube, api_pod, free_port, kubeconfig_text

from nri_plrm.podsource.client import load_kube_config, new_pod_api
from nri_plrm.scheduler.extender import Extender
from nri_plrm.scheduler.server import ExtenderServer
from nri_plrm.scheduler.settings import ExtenderSettings
from nri_plrm.topology.synthetic import synthetic_topology

# The upstream Go types (staging/src/k8s.io/kube-scheduler/extender/v1/types.go): field names
# and their JSON kinds; no JSON tags, so these names are the wire names.
EXTENDER_FILTER_RESULT = {
    "Nodes": (dict, type(None)),
    "NodeNames": (list, type(None)),
    "FailedNodes": (dict,),
    "FailedAndUnresolvableNodes": (dict,),
    "Error": (str,),
}
HOST_PRIORITY = {"Host": (str,), "Score": (int,)}
EXTENDER_BINDING_RESULT = {"Error": (str,)}

MACHINE = "sockets=1,numa_per_socket=2,cores_per_numa=2,threads_per_core=2,memory_per_numa=8Gi"
CONFIG = """
[topology_manager]
policy = "single-numa-node"
scope = "pod"
[cpu_manager]
reserved_cpus = "0"
options = { "full-pcpus-only" = true }
[memory_manager]
reserved_memory = [ { numa_node = 0, memory = "512Mi" } ]
"""


def pod(name: str, cpu: str, memory: str = "256Mi") -> dict[str, Any]:
    obj = api_pod(name, "", cpu=cpu, memory=memory)
    del obj["spec"]["nodeName"]
    return obj


def node(name: str, busy: int = 0) -> LedgerNode:
    """A 2-NUMA node (4 CPUs each, SMT2, CPU 0 reserved) with ``busy`` 2-CPU pods admitted."""
    ledger = LedgerNode(name, synthetic_topology(MACHINE), CONFIG)
    for i in range(busy):
        assert ledger.admit(spec_of(pod(f"{name}-busy-{i}", "2"))) is None
    return ledger


def check_fields(doc: dict[str, Any], types: dict[str, tuple[type, ...]]) -> None:
    assert set(doc) == set(types), doc
    for key, kinds in types.items():
        assert isinstance(doc[key], kinds), (key, doc[key])


class Client:
    """A keep-alive HTTP/1.1 client, as the scheduler's Go client talks."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def request(self, method: str, path: str, body: Any = None) -> tuple[int, bytes]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
        assert self.reader is not None
        data = b"" if body is None else json.dumps(body).encode()
        head = (
            f"{method} {path} HTTP/1.1\r\nHost: extender\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\nAccept-Encoding: gzip\r\n\r\n"
        )
        self.writer.write(head.encode() + data)
        await self.writer.drain()
        raw = await self.reader.readuntil(b"\r\n\r\n")
        lines = raw.decode().split("\r\n")
        status = int(lines[0].split(" ")[1])
        length = next(
            int(v) for k, _, v in (ln.partition(": ") for ln in lines) if k == "Content-Length"
        )
        return status, await self.reader.readexactly(length)

    async def post(self, verb: str, body: Any) -> Any:
        status, data = await self.request("POST", f"/scheduler/{verb}", body)
        assert status == 200, data
        return json.loads(data)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


@pytest.fixture
def kube_env(tmp_path: Path) -> Iterator[tuple[FakeKube, Path]]:
    fk = FakeKube()
    path = tmp_path / "kubeconfig"
    yield fk, path


async def _start(fk: FakeKube, path: Path, **settings: Any) -> tuple[ExtenderServer, Client]:
    await fk.start()
    path.write_text(kubeconfig_text(fk.url))
    config = ExtenderSettings(**{"address": "127.0.0.1:0", "resync": 0.05, **settings})
    kube = load_kube_config(str(path))
    extender = Extender(config, asyncio.get_running_loop().time)
    server = ExtenderServer(config, new_pod_api(kube).http, extender)
    await server.start()
    for _ in range(200):
        if server.health()[0]:
            break
        await asyncio.sleep(0.01)
    return server, Client(server.port)


def scheduler_args(obj: dict[str, Any], names: list[str]) -> dict[str, Any]:
    """ExtenderArgs as encoding/json marshals it with nodeCacheCapable: true."""
    return {"Pod": obj, "Nodes": None, "NodeNames": names}


def test_filter_prioritize_bind_and_the_assume_cache(kube_env: tuple[FakeKube, Path]) -> None:
    fk, path = kube_env

    async def scenario() -> None:
        free, full = node("free"), node("full", busy=3)
        for ledger in (free, full):
            fk.store_nrt(ledger.published())
        server, client = await _start(fk, path)
        try:
            # fits only on "free": one NUMA node with 2 whole free cores
            result = await client.post(
                "filter", scheduler_args(pod("web", "4"), ["free", "full", "gone"])
            )
            check_fields(result, EXTENDER_FILTER_RESULT)
            assert result["NodeNames"] == ["free", "gone"]  # no object: passed (unknown_nodes)
            assert result["Nodes"] is None and result["Error"] == ""
            assert set(result["FailedNodes"]) == {"full"}
            assert result["FailedNodes"]["full"].startswith(
                "TopologyAffinityError: Resources cannot be allocated with Topology locality; "
                "cause: "
            )
            # an odd CPU count under full-pcpus-only: no node of this type can ever admit it
            odd = await client.post("filter", scheduler_args(pod("odd", "3"), ["free", "full"]))
            assert odd["NodeNames"] == [] and odd["FailedNodes"] == {}
            assert set(odd["FailedAndUnresolvableNodes"]) == {"free", "full"}
            assert odd["FailedAndUnresolvableNodes"]["free"].startswith("SMTAlignmentError: ")
            assert "cause: full-pcpus-only" in odd["FailedAndUnresolvableNodes"]["free"]

            scores = await client.post(
                "prioritize", scheduler_args(pod("small", "2"), ["free", "full"])
            )
            for entry in scores:
                check_fields(entry, HOST_PRIORITY)
            by_host = {e["Host"]: e["Score"] for e in scores}
            assert 0 <= by_host["full"] < by_host["free"] <= 10

            # bind "web" (4 CPUs) to "free": the node's object does not show it yet, so a
            # second 4-CPU pod must not pass there (the other NUMA node has 3 allocatable CPUs)
            fk.add(pod("web", "4"))
            bound = await client.post(
                "bind",
                {"PodName": "web", "PodNamespace": "default", "PodUID": "uid-web", "Node": "free"},
            )
            check_fields(bound, EXTENDER_BINDING_RESULT)
            assert bound == {"Error": ""}
            assert fk.pods[("default", "web")]["spec"]["nodeName"] == "free"
            second = await client.post("filter", scheduler_args(pod("web2", "4"), ["free"]))
            assert set(second["FailedNodes"]) == {"free"}
            # the node admits it and publishes: the assumed pod is now in the numbers
            assert free.admit(spec_of(pod("web", "4"))) is None
            fk.store_nrt(free.published())
            assert len(server.extender.assumed) == 1
            await asyncio.sleep(0.2)  # listed again
            await client.post("filter", scheduler_args(pod("web3", "2"), ["free"]))
            assert len(server.extender.assumed) == 0
            status, body = await client.request("GET", "/metrics")
            text = body.decode()
            assert status == 200
            assert 'nri_plrm_extender_requests_total{result="ok",verb="filter"} 4.0' in text
            assert 'nri_plrm_extender_verdicts_total{verdict="unresolvable"} 2.0' in text
            assert "nri_plrm_extender_request_seconds_bucket" in text
            assert (await client.request("GET", "/healthz"))[0] == 200
        finally:
            client.close()
            await server.stop()
            await fk.stop()

    asyncio.run(scenario())


def _extender(**settings: Any) -> Extender:
    extender = Extender(ExtenderSettings(**settings), lambda: 0.0)
    for ledger in (node("free"), node("half", busy=1), node("full", busy=3)):
        obj = ledger.published()
        obj["metadata"]["resourceVersion"] = "1"
        extender.update_node(obj)
    return extender


def test_a_node_list_request_is_answered_with_the_passing_node_objects() -> None:
    """nodeCacheCapable: false: the scheduler sends the NodeList and reads ``Nodes`` back."""
    nodes = {
        "apiVersion": "v1",
        "kind": "NodeList",
        "metadata": {},
        "items": [{"metadata": {"name": n}, "status": {}} for n in ("free", "full")],
    }
    result = _extender().filter({"Pod": pod("web", "4"), "Nodes": nodes, "NodeNames": None})
    check_fields(result, EXTENDER_FILTER_RESULT)
    assert result["NodeNames"] is None
    assert [i["metadata"]["name"] for i in result["Nodes"]["items"]] == ["free"]
    assert set(result["FailedNodes"]) == {"full"}


def test_keys_are_matched_as_gos_decoder_matches_them() -> None:
    result = _extender().filter({"pod": pod("web", "4"), "nodenames": ["free", "full"]})
    assert result["NodeNames"] == ["free"] and set(result["FailedNodes"]) == {"full"}


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ({"NodeNames": ["free"]}, "ExtenderArgs.Pod: None: must be a Pod object"),
        ({"Pod": pod("web", "1"), "NodeNames": "free"}, "NodeNames: must be a list of names"),
    ],
)
def test_a_request_it_cannot_read_is_answered_with_the_error(
    args: dict[str, Any], expected: str
) -> None:
    result = _extender().filter(args)
    check_fields(result, EXTENDER_FILTER_RESULT)
    assert expected in result["Error"]


def test_a_pod_the_conversion_refuses_passes_every_node(caplog: pytest.LogCaptureFixture) -> None:
    """The node's pod cache refuses such a pod too and decides it from NRI data."""
    bad = {"metadata": {"name": "x", "namespace": "default"}, "spec": {"containers": []}}
    extender = _extender()
    result = extender.filter({"Pod": bad, "NodeNames": ["free", "full"]})
    check_fields(result, EXTENDER_FILTER_RESULT)
    assert result["NodeNames"] == ["free", "full"] and result["Error"] == ""
    assert "pod object default/x: metadata.uid: missing: a pod has a uid; every node" in caplog.text
    scores = extender.prioritize({"Pod": bad, "NodeNames": ["free"]})
    assert scores == [{"Host": "free", "Score": 0}]


def test_nodes_without_an_object_pass_or_fail_as_configured() -> None:
    assert _extender().filter({"Pod": pod("w", "2"), "NodeNames": ["gone"]})["NodeNames"] == [
        "gone"
    ]
    failed = _extender(unknown_nodes="fail").filter({"Pod": pod("w", "2"), "NodeNames": ["gone"]})
    assert failed["FailedNodes"] == {
        "gone": "NodeResourceTopologyUnknown: no NodeResourceTopology object for gone; "
        "cause: nri-plrm does not publish this node"
    }


def test_most_allocated_scores_the_numa_zone_left_fullest_highest() -> None:
    """Per NUMA zone: on "free" the pod takes NUMA node 0's last whole core (1 of 3 CPUs
    left there), on "half" NUMA node 1 (2 of 4 left): least-allocated prefers "half",
    most-allocated "free"; a node it does not fit scores 0."""
    args = {"Pod": pod("small", "2"), "NodeNames": ["free", "half", "full"]}
    least = {e["Host"]: e["Score"] for e in _extender().prioritize(args)}
    most = {e["Host"]: e["Score"] for e in _extender(scoring="most-allocated").prioritize(args)}
    assert least["half"] > least["free"] and least["full"] == 0
    assert most["free"] > most["half"] and most["full"] == 0
    assert all(least[h] + most[h] == 10 for h in ("free", "half"))


def test_objects_are_listed_in_pages_and_deleted_nodes_are_forgotten(
    kube_env: tuple[FakeKube, Path],
) -> None:
    fk, path = kube_env

    async def scenario() -> None:
        base = node("n").published()
        for i in range(250):
            obj = json.loads(json.dumps(base))
            obj["metadata"]["name"] = f"n-{i:03d}"
            fk.store_nrt(obj)
        server, client = await _start(fk, path)
        try:
            assert len(server.extender.node_names()) == 250
            pages = [r for r in fk.nrt_requests() if r.method == "GET"]
            assert [r.query.get("limit") for r in pages[:3]] == ["100", "100", "100"]
            assert [r.query.get("continue") for r in pages[:3]] == [None, "100", "200"]
            fk.delete_nrt("n-007")
            await asyncio.sleep(0.2)
            assert len(server.extender.node_names()) == 249
            result = await client.post("filter", scheduler_args(pod("p", "2"), ["n-007"]))
            assert result["NodeNames"] == ["n-007"]  # no object any more: passed (unknown_nodes)
            _status, body = await client.request("GET", "/metrics")
            assert 'nri_plrm_extender_nodes{state="usable"} 249.0' in body.decode()
        finally:
            client.close()
            await server.stop()
            await fk.stop()

    asyncio.run(scenario())


def test_a_chunked_body_is_refused_with_411(kube_env: tuple[FakeKube, Path]) -> None:
    fk, path = kube_env

    async def scenario() -> None:
        server, _client = await _start(fk, path)
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            writer.write(
                b"POST /filter HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                b"2\r\n{}\r\n0\r\n\r\n"
            )
            await writer.drain()
            head = await reader.readuntil(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 411 ")
            writer.close()
        finally:
            await server.stop()
            await fk.stop()

    asyncio.run(scenario())


def test_the_command_serves_until_sigterm(kube_env: tuple[FakeKube, Path]) -> None:
    """``nri-plrm scheduler-extender`` as a process: lists the objects through the kubeconfig,
    answers a filter, ends with 0 on SIGTERM."""
    fk, path = kube_env

    async def scenario() -> None:
        await fk.start()
        fk.store_nrt(node("free").published())
        path.write_text(kubeconfig_text(fk.url))
        port = free_port()
        settings = path.parent / "extender.toml"
        settings.write_text(f'[scheduler_extender]\naddress = "127.0.0.1:{port}"\nresync = 0.1\n')
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "nri_plrm.cli",
            "scheduler-extender",
            "--config",
            str(settings),
            "--kubeconfig",
            str(path),
            stderr=asyncio.subprocess.PIPE,
        )
        client = Client(port)
        try:
            for _ in range(300):
                try:
                    status, _body = await client.request("GET", "/healthz")
                except OSError:
                    client.writer = None
                    await asyncio.sleep(0.05)
                    continue
                if status == 200:
                    break
                await asyncio.sleep(0.05)
            result = await client.post("filter", scheduler_args(pod("web", "3"), ["free"]))
            assert set(result["FailedAndUnresolvableNodes"]) == {"free"}
        finally:
            client.close()
            proc.send_signal(signal.SIGTERM)
            _out, err = await asyncio.wait_for(proc.communicate(), 10)
            await fk.stop()
        assert proc.returncode == 0, err.decode()
        assert b"scheduler extender listening on 127.0.0.1:" in err

    asyncio.run(scenario())


def test_a_state_no_node_holds_any_more_is_forgotten() -> None:
    extender = _extender()
    args = {"Pod": pod("small", "2"), "NodeNames": ["free", "half", "full"]}
    extender.filter(args)
    models = extender.models()
    assert models == 3
    half = node("half", busy=2).published()
    half["metadata"]["resourceVersion"] = "2"
    extender.update_node(half)  # "half" has another state now
    extender.filter(args)
    assert extender.models() == 3
    extender.remove_node("full")
    assert extender.models() == 2


def test_changes_arrive_through_the_watch_and_a_compacted_version_lists_again(
    kube_env: tuple[FakeKube, Path],
) -> None:
    fk, path = kube_env

    async def until(check: Any) -> None:
        for _ in range(200):
            if check():
                return
            await asyncio.sleep(0.02)
        raise AssertionError("not reached")

    async def scenario() -> None:
        fk.store_nrt(node("a").published())
        server, client = await _start(fk, path, resync=3600.0)  # no periodic list
        try:
            assert server.extender.node_names() == ["a"]
            lists = sum(1 for r in fk.nrt_requests() if "watch" not in r.query)
            fk.store_nrt(node("b", busy=3).published())
            await until(lambda: "b" in server.extender.node_names())
            full = await client.post("filter", scheduler_args(pod("p", "4"), ["b"]))
            assert set(full["FailedNodes"]) == {"b"}  # decided on b's object from the watch
            fk.delete_nrt("a")
            await until(lambda: server.extender.node_names() == ["b"])
            assert sum(1 for r in fk.nrt_requests() if "watch" not in r.query) == lists
            watches = [r for r in fk.nrt_requests() if r.query.get("watch") == "true"]
            assert watches and watches[0].query["allowWatchBookmarks"] == "true"
            # the server forgets old versions and ends the watch: reopened from its last
            # version, it gets 410 and the feed lists again, then watches from the new list
            fk.nrt_compacted = fk.rv + 1
            fk.end_nrt_watches()
            await until(lambda: sum(1 for r in fk.nrt_requests() if "watch" not in r.query) > lists)
            fk.store_nrt(node("c").published())
            await until(lambda: "c" in server.extender.node_names())
            _status, body = await client.request("GET", "/metrics")
            assert 'nri_plrm_extender_node_lists_total{result="failed"}' not in body.decode()
        finally:
            client.close()
            await server.stop()
            await fk.stop()

    asyncio.run(scenario())
