"""A slow path inside a handler (issue 7, fault 1): the pod-spec source (the Kubernetes API
cache) lags, so ``RunPodSandbox`` waits for a pod it does not know yet. The plugin must answer
that request inside the runtime's budget (falling back to the NRI-only decision after
``kubernetes.lookup_timeout``) and never stall the connection: requests for other pods are
answered while it waits. A lookup timeout that could exceed the runtime's budget is refused
by the configuration.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from plrm_harness import serve
from plrm_invariants import check

from nri_plrm.config.file import parse_config
from nri_plrm.config.settings import ConfigError
from nri_plrm.engine.facade import Engine
from nri_plrm.engine.spec import ContainerKind, ContainerSpec, PodSpec
from nri_plrm.ledger import NodeLedger
from nri_plrm.plugin.handlers import Plugin
from nri_plrm.topology.machines import MACHINES
from nri_plrm.translate.pod_to_cri import creation_order

POD_SCOPE = '[topology_manager]\npolicy = "single-numa-node"\nscope = "pod"\n'
GI = 1 << 30
LOOKUP_TIMEOUT = 1.0
REQUEST_TIMEOUT = 2.0


class LaggingSource:
    """A pod-spec source that knows a pod only once ``publish`` is called, and waits for it
    (at most the given timeout) like the Kubernetes API cache does."""

    def __init__(self) -> None:
        self.specs: dict[str, PodSpec] = {}
        self.arrived: dict[str, asyncio.Event] = {}
        self.waiting: set[str] = set()

    @property
    def available(self) -> bool:
        return True

    def publish(self, spec: PodSpec) -> None:
        self.specs[spec.uid] = spec
        self.arrived.setdefault(spec.uid, asyncio.Event()).set()

    async def lookup(self, uid: str, namespace: str, name: str, timeout: float) -> PodSpec | None:
        if uid not in self.specs:
            self.waiting.add(uid)
            event = self.arrived.setdefault(uid, asyncio.Event())
            try:
                await asyncio.wait_for(event.wait(), timeout)
            except asyncio.TimeoutError:
                return None
            finally:
                self.waiting.discard(uid)
        return self.specs.get(uid)


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


def test_lagging_api_cache_neither_misses_the_budget_nor_stalls_the_connection(
    tmp_path: Path,
) -> None:
    source = LaggingSource()
    engine = Engine(MACHINES["default"], parse_config(POD_SCOPE).engine_config())
    plugin = Plugin(NodeLedger(engine), pod_specs=source, lookup_timeout=LOOKUP_TIMEOUT)

    async def main() -> None:
        sock = str(tmp_path / "nri.sock")
        async with serve(plugin, sock, request_timeout=REQUEST_TIMEOUT) as s:
            rt = s.runtime
            late = mixed("late")  # never published: the API cache does not have it in time
            known = [mixed(f"known-{i}") for i in range(3)]
            for spec in known:
                source.publish(spec)
            pending = asyncio.get_running_loop().create_task(rt.run_pod(late))
            while "late" not in source.waiting:
                await asyncio.sleep(0.001)
            # the connection keeps serving other pods while RunPodSandbox(late) waits
            for spec in known:
                await rt.launch(spec)
            assert not pending.done(), "the lookup returned before its timeout"
            assert "late" in source.waiting
            sandbox = await pending
            for ctr in creation_order(late):
                await rt.create(sandbox, late, ctr)
            await rt.settle()
            late_run = next(
                r
                for r in s.sim.records
                if r.method == "RunPodSandbox" and r.request.pod.uid == "late"
            )
            assert late_run.error is None, f"RunPodSandbox(late) failed: {late_run.error}"
            assert all(r.error is None for r in s.sim.records), [
                (r.method, r.error) for r in s.sim.records if r.error is not None
            ]
            assert len(rt.cpus_of(sandbox, "main")) == 2  # the NRI-only decision
            uids = {p.uid for p in rt.pods.values()}
            assert check(plugin.ledger.engine, rt, uids) == []

    asyncio.run(main())


def test_spec_published_while_waiting_is_used(tmp_path: Path) -> None:
    source = LaggingSource()
    engine = Engine(MACHINES["default"], parse_config(POD_SCOPE).engine_config())
    plugin = Plugin(NodeLedger(engine), pod_specs=source, lookup_timeout=LOOKUP_TIMEOUT)

    async def main() -> None:
        async with serve(plugin, str(tmp_path / "nri.sock")) as s:
            spec = mixed("arrives")
            pending = asyncio.get_running_loop().create_task(s.runtime.run_pod(spec))
            while "arrives" not in source.waiting:
                await asyncio.sleep(0.001)
            source.publish(spec)
            await pending
            (view,) = [v for v in plugin.ledger.pods() if v.uid == "arrives"]
            assert {c.name for c in view.containers} == set()
            assert plugin.ledger.engine.pod_cpus("arrives") is not None

    asyncio.run(main())


@pytest.mark.parametrize("lookup", [2, 2.5, 3600])
def test_lookup_timeout_not_below_the_request_budget_is_refused(lookup: float) -> None:
    with pytest.raises(ConfigError, match=r"kubernetes\.lookup_timeout"):
        parse_config(f"[nri]\nrequest_timeout = 2\n[kubernetes]\nlookup_timeout = {lookup}\n")
