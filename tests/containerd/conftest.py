"""Fixtures of the real-containerd suite: a private containerd per test (both kit builds) and
the real plugin process against it; every test ends with nothing left on the machine."""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest
from containerd_kit import (
    VERSIONS,
    PluginProcess,
    Testbed,
    kit_unavailable,
    plugin_on,
    short_dir,
)


@pytest.fixture(params=VERSIONS, ids=[f"containerd{v}" for v in VERSIONS])
def testbed(request: pytest.FixtureRequest) -> Iterator[Testbed]:
    """containerd (2.4-dev, then v2.1.9) up in a new directory; after the test it is taken
    down and the test fails if a process, mount or pod cgroup of it is left."""
    reason = kit_unavailable()
    if reason is not None:
        pytest.skip(reason)
    root = short_dir("plrm-tb-")
    bed = Testbed(request.param, root)
    try:
        bed.up()
        yield bed
    finally:
        bed.down()
        left = bed.leftovers()
        shutil.rmtree(root, ignore_errors=True)
        assert not left, f"testbed left behind: {left}"


@pytest.fixture
def plugin(testbed: Testbed) -> Iterator[PluginProcess]:
    """The real plugin, registered with ``testbed``'s containerd (default configuration:
    single-numa-node, scope pod, CPU 0 reserved)."""
    proc = plugin_on(testbed)
    try:
        proc.start()
        yield proc
    finally:
        proc.kill()
