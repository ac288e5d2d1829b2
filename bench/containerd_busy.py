"""Pod starts on a busy node, on real containerd: nri-plrm against the kit's Go NRI plugin.

Through the containerd kit (``../shared/containerd``, root; see ``tests/support/containerd_kit``)
each containerd build (2.4-dev, 2.1.9) runs ``--pods`` BestEffort pods (100 by default), then
blocks of ``--samples`` pod starts alternate between ``nri-gopeer`` (the kit's minimal Go
plugin, which sets a cpuset) and ``nri-plrm run``, ``--rounds`` times, the order swapped every
round. One pod start is the kubelet's ``crictl runp`` of a Guaranteed pod, then ``create`` +
``start`` of a 1-CPU exclusive container (the time measured); the pod is removed before the
next one. With nri-plrm, the next start waits until every BestEffort container left the
exclusive CPU (the isolation lag, from the start's return until the last container's cgroup
shows it) and got it back.

Figures per build ``V`` (``24`` or ``21``) and pod count ``N``:
``containerd_busy_N_create_start_median_ms_{gopeer,plrm}_V``, their ratio
``containerd_busy_N_create_start_ratio_V`` (the issue's target: at most 1.10), and
``containerd_busy_N_isolation_lag_{p50,max}_ms_V``.

Not part of ``python -m bench`` (it takes minutes and needs root and the kit):
``python -m bench.containerd_busy [--json] [--pods 300] [--versions 2.4]``.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time

from containerd_kit import (
    EXCLUSIVE_1CPU,
    MIB,
    Cgroup,
    Pod,
    Testbed,
    all_follow,
    kit_unavailable,
    plugin_on,
    short_dir,
    wait_until,
)

import bench  # noqa: F401  (puts tests/support on sys.path)
from bench.common import percentile, report

GOPEER_REGISTERED = r"registered as \"10-gopeer\""
"""containerd's log line for nri-gopeer's registration."""
GOPEER_CPUS = "0-1"
"""What nri-gopeer sets every container to (the kit's machines have 2 CPUs)."""


def _start_pod(bed: Testbed, n: int) -> tuple[Pod, float]:
    pod = Pod(f"exclusive-{n}", "guaranteed", budget=(1000, 64 * MIB))
    bed.run_pod(pod)
    began = time.perf_counter()
    bed.run_container(pod, "work", EXCLUSIVE_1CPU)
    return pod, time.perf_counter() - began


def _gopeer_block(bed: Testbed, samples: int, first: int) -> list[float]:
    seen = bed.containerd_log.read_text().count(GOPEER_REGISTERED)
    peer = subprocess.Popen(
        [str(bed.kit / "bin" / "nri-gopeer"), "-socket", bed.nri_socket],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_until(
            lambda: bed.containerd_log.read_text().count(GOPEER_REGISTERED) > seen,
            10,
            lambda: "nri-gopeer did not register",
        )
        times = []
        for n in range(first, first + samples):
            pod, took = _start_pod(bed, n)
            times.append(took)
            bed.remove_pod(pod)
            time.sleep(0.2)
        return times
    finally:
        peer.kill()
        peer.wait()


def _plrm_block(
    bed: Testbed, shared: list[Cgroup], samples: int, first: int, lags: list[float]
) -> list[float]:
    plugin = plugin_on(bed)
    plugin.start(timeout=60)
    try:
        all_follow(shared, GOPEER_CPUS, 30)  # Synchronize moved every container to the pool
        times = []
        for n in range(first, first + samples):
            pod, took = _start_pod(bed, n)
            times.append(took)
            lags.append(all_follow(shared, "0", 30))
            bed.remove_pod(pod)
            all_follow(shared, GOPEER_CPUS, 30)
        return times
    finally:
        plugin.kill()


def measure_build(version: str, pods: int, rounds: int, samples: int) -> dict[str, float]:
    """The figures of one containerd build."""
    root = short_dir("plrm-bench-")
    bed = Testbed(version, root)
    try:
        bed.up()
        shared = [bed.cgroup(cid) for cid in bed.run_best_effort_pods(pods)]
        times: dict[str, list[float]] = {"gopeer": [], "plrm": []}
        lags: list[float] = []
        n = 0
        for r in range(rounds):
            order = ("gopeer", "plrm") if r % 2 == 0 else ("plrm", "gopeer")
            for mode in order:
                if mode == "gopeer":
                    times[mode] += _gopeer_block(bed, samples, n)
                else:
                    times[mode] += _plrm_block(bed, shared, samples, n, lags)
                n += samples
    finally:
        bed.down()
        shutil.rmtree(root, ignore_errors=True)
    tag = version.replace(".", "")
    prefix = f"containerd_busy_{pods}"
    go = statistics.median(times["gopeer"]) * 1000
    plrm = statistics.median(times["plrm"]) * 1000
    return {
        f"{prefix}_create_start_median_ms_gopeer_{tag}": round(go, 1),
        f"{prefix}_create_start_median_ms_plrm_{tag}": round(plrm, 1),
        f"{prefix}_create_start_ratio_{tag}": round(plrm / go, 3),
        f"{prefix}_isolation_lag_p50_ms_{tag}": round(percentile(lags, 50) * 1000, 1),
        f"{prefix}_isolation_lag_max_ms_{tag}": round(max(lags) * 1000, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.containerd_busy")
    parser.add_argument("--json", action="store_true", help="print a JSON report")
    parser.add_argument("--pods", type=int, default=100, help="running BestEffort pods")
    parser.add_argument("--rounds", type=int, default=3, help="blocks per plugin")
    parser.add_argument("--samples", type=int, default=5, help="pod starts per block")
    parser.add_argument("--versions", nargs="+", default=["2.4", "2.1"], help="kit builds")
    args = parser.parse_args()
    missing = kit_unavailable()
    if missing is not None:
        print(f"bench.containerd_busy skipped: {missing}", file=sys.stderr)
        sys.exit(0)
    results: dict[str, float] = {}
    for version in args.versions:
        results.update(measure_build(version, args.pods, args.rounds, args.samples))
    report(results, args.json)


if __name__ == "__main__":
    main()
