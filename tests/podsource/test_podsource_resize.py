"""The pod cache follows in-place resizes from the watch: a MODIFIED pod whose resources changed
is handed to ``on_change`` (the plugin's resize); other changes are not."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from fakekube import FakeKube, api_pod, kubeconfig_text

from nri_plrm.engine.spec import PodSpec
from nri_plrm.podsource.client import load_kube_config, new_pod_api
from nri_plrm.podsource.kube import Backoff, KubePodCache

NODE = "node-a"


async def eventually(check: object, timeout: float = 5.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not check():  # type: ignore[operator]
        if loop.time() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.01)


def test_resized_pod_is_followed(tmp_path: Path) -> None:
    seen: list[PodSpec] = []

    async def main() -> None:
        fk = FakeKube()
        await fk.start()
        path = tmp_path / "kubeconfig"
        path.write_text(kubeconfig_text(fk.url))
        cache = KubePodCache(
            new_pod_api(load_kube_config(str(path))),
            NODE,
            logger=logging.getLogger("test.podsource.resize"),
            backoff=Backoff(0.01, 0.05),
        )
        cache.on_change = seen.append
        try:
            fk.add(api_pod("p", NODE, cpu="2", memory="1Gi"))
            cache.start()
            assert await cache.wait_synced(5)
            fk.modify(api_pod("p", NODE, cpu="2", memory="1Gi", annotations={"a": "b"}))
            fk.modify(api_pod("p", NODE, cpu="4", memory="1Gi"))
            await eventually(lambda: len(seen) == 1)
            await asyncio.sleep(0.05)
            (spec,) = seen
            app = spec.container("app")
            assert app is not None and app.requests["cpu"] == 4000
            assert cache.specs()["uid-p"] == spec
        finally:
            await cache.stop()
            await fk.stop()

    asyncio.run(main())
