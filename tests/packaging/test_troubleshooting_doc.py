"""docs/troubleshooting.md quotes output and log lines exactly as the plugin emits them."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from nri_plrm.cli.simulate import simulate
from nri_plrm.nri.stub import Stub
from nri_plrm.observability.log_output import TEXT_FORMAT
from nri_plrm.topology.machines import load_topology
from nri_plrm.topology.synthetic import DEFAULT_SPEC

REPO = Path(__file__).resolve().parents[2]
GUIDE = (REPO / "docs" / "troubleshooting.md").read_text()


def test_simulate_cause_and_decision_log_are_quoted_verbatim(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="nri_plrm.plugin")
    result = simulate([REPO / "examples" / "empty-shared-pool.yaml"], load_topology(DEFAULT_SPEC))
    table = result.to_table().splitlines()
    rejected = next(i for i, line in enumerate(table) if ": rejected: " in line)
    assert table[rejected + 1].startswith("  cause: ")
    assert f"{table[rejected]}\n{table[rejected + 1]}\n" in GUIDE
    formatter = logging.Formatter(TEXT_FORMAT)
    (decision,) = [r for r in caplog.records if "reason=rejected" in r.getMessage()]
    assert f"\n{formatter.format(decision)}\n" in GUIDE


class _Handlers:
    def run_pod_sandbox(self, pod: object) -> None:
        return None


def test_cannot_connect_warning_is_quoted_verbatim(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    missing = tmp_path / "nri.sock"
    stub = Stub(_Handlers(), name="nri-plrm", index="50", socket_path=str(missing))

    async def attempt_once() -> None:
        task = asyncio.create_task(stub.run())
        while not any("cannot connect" in r.getMessage() for r in caplog.records):
            await asyncio.sleep(0.01)
        await stub.stop()
        await task

    caplog.set_level(logging.WARNING, logger="nri_plrm.nri.stub")
    asyncio.run(asyncio.wait_for(attempt_once(), 30))
    line = caplog.records[0].getMessage().replace(str(missing), "/var/run/nri/nri.sock")
    assert f"| `{line}` |" in GUIDE
