"""Kubelet lifecycle corners over the wire: a restarted container keeps its CPUs, a recreated
sandbox keeps the pod's reservation, removing the dead sandbox releases nothing."""

from __future__ import annotations

import asyncio
from pathlib import Path

from plrm_harness import serve, stored_plugin

from nri_plrm.translate.manifest_to_pod import load_manifests
from nri_plrm.translate.pod_to_cri import nri_container, nri_pod_sandbox

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_restarted_container_gets_its_cpus_back(tmp_path: Path) -> None:
    (spec,) = load_manifests([EXAMPLES / "pod-scope-mixed.yaml"])
    plugin = stored_plugin(tmp_path / "state")

    async def main() -> None:
        async with serve(plugin, str(tmp_path / "nri.sock")) as s:
            rt = s.runtime
            pod = await rt.launch(spec)
            first = rt.id_of(pod, "main-app")
            cpus = rt.cpus_of(pod, "main-app")
            pool = rt.cpus_of(pod, "metrics-sidecar")
            await rt.stop(first)
            resp = await rt.create(pod, spec, spec.containers[0], attempt=1)
            assert resp.adjust.linux.resources.cpu.cpus == str(cpus)
            assert resp.adjust.linux.resources.cpu.quota.value == -1
            await rt.remove(first)
            await rt.settle()
            assert rt.cpus_of(pod, "metrics-sidecar") == pool
            (view,) = plugin.ledger.pods()
            (main,) = [c for c in view.containers if c.name == "main-app"]
            assert main.assignment is not None and main.assignment.cpus == cpus
        assert plugin.ledger.engine.verify() == []

    asyncio.run(main())


def test_recreated_sandbox_keeps_the_reservation(tmp_path: Path) -> None:
    (spec,) = load_manifests([EXAMPLES / "tightly-coupled-database.yaml"])
    plugin = stored_plugin(tmp_path / "state")

    async def main() -> None:
        async with serve(plugin, str(tmp_path / "nri.sock")) as s:
            old = nri_pod_sandbox(spec)
            await s.sim.run_pod_sandbox(old)
            db = nri_container(spec, spec.containers[0])
            first = await s.sim.create_container(old, db)
            assert first is not None
            cpus = first.adjust.linux.resources.cpu.cpus
            bubble = plugin.ledger.engine.pod_cpus(spec.uid)
            new = nri_pod_sandbox(spec, attempt=1)
            assert new.id != old.id
            await s.sim.run_pod_sandbox(new)
            assert plugin.ledger.engine.pod_cpus(spec.uid) == bubble
            again = nri_container(spec, spec.containers[0], attempt=1)
            again.pod_sandbox_id = new.id
            second = await s.sim.create_container(new, again)
            assert second is not None and second.adjust.linux.resources.cpu.cpus == cpus
            await s.sim.remove_container(old, db)
            await s.sim.remove_pod_sandbox(old)
            assert plugin.ledger.engine.pod_cpus(spec.uid) == bubble
            assert [v.uid for v in plugin.ledger.pods()] == [spec.uid]
            await s.sim.remove_container(new, again)
            await s.sim.remove_pod_sandbox(new)
            assert plugin.ledger.pods() == ()
            assert plugin.ledger.engine.pod_cpus(spec.uid) is None
        reader = stored_plugin(tmp_path / "state")
        assert reader.ledger.pods() == ()

    asyncio.run(main())
