"""Absurd pod values in the manifests given to ``simulate`` (issue 7, bad input): 0 CPUs,
10,000 CPUs, negative quantities, memory and hugepages larger than the machine, exclusive
requests above the pod budget, quantities overflowing the runtime's 64-bit fields, and the
quantity parser's regressions found here. Each manifest ends in a ``ManifestError`` naming
the field, or in a simulation where the pod is admitted or rejected with the kubelet's
reason; the other pods of the same run are placed as if the bad one were not there.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nri_plrm.base.quantity import QuantityError, cpu_millis, memory_bytes
from nri_plrm.cli.simulate import SimulatedPod, simulate
from nri_plrm.config.file import parse_config
from nri_plrm.topology.machines import MACHINES
from nri_plrm.topology.synthetic import with_memory
from nri_plrm.translate.manifest_to_pod import ManifestError

MACHINE = with_memory(MACHINES["default"], {"memory": 16 << 30, "hugepages-2Mi": 1 << 30})
CONFIG = parse_config('[topology_manager]\npolicy = "single-numa-node"\nscope = "pod"\n')

GOOD = """
apiVersion: v1
kind: Pod
metadata: {name: good, uid: good-uid}
spec:
  containers:
  - name: main
    resources: {limits: {cpu: "2", memory: 1Gi}}
"""


def pod(name: str, pod_resources: str, container_resources: str) -> str:
    """A pod with one container; with pod-level resources, also a sidecar sharing the pool.
    (A classic pod with a second container without resources would be Burstable: nothing
    exclusive, nothing for the resource managers to refuse.)"""
    spec = f"  resources: {pod_resources}\n" if pod_resources else ""
    sidecar = "  - name: sidecar\n    resources: {}\n" if pod_resources else ""
    return f"""
apiVersion: v1
kind: Pod
metadata: {{name: {name}, uid: {name}-uid}}
spec:
{spec}  containers:
  - name: main
    resources: {container_resources}
{sidecar}"""


REJECTED = "rejected"
INVALID = "invalid"
ADMITTED = "admitted"
CASES = {
    # name: (pod resources, container resources, expected outcome)
    "zero-cpus": ("", '{limits: {cpu: "0", memory: 1Gi}}', ADMITTED),
    "ten-thousand-cpus-pod": (
        '{limits: {cpu: "10000", memory: 4Gi}}',
        '{limits: {cpu: "2", memory: 1Gi}}',
        REJECTED,
    ),
    "ten-thousand-cpus-container": ("", '{limits: {cpu: "10000", memory: 1Gi}}', REJECTED),
    "negative-cpu": ("", '{limits: {cpu: "-2", memory: 1Gi}}', INVALID),
    "negative-memory": ("", '{limits: {cpu: "2", memory: "-1Gi"}}', INVALID),
    "memory-beyond-the-machine": ("", '{limits: {cpu: "2", memory: 1Pi}}', REJECTED),
    "hugepages-beyond-the-machine": (
        "",
        '{limits: {cpu: "2", memory: 1Gi, hugepages-2Mi: 1Ti}}',
        REJECTED,
    ),
    "exclusive-above-the-budget": (
        '{limits: {cpu: "2", memory: 2Gi}}',
        '{limits: {cpu: "4", memory: 1Gi}}',
        INVALID,
    ),
    "garbage-quantity": ("", '{limits: {cpu: "two", memory: 1Gi}}', INVALID),
    "cpu-overflowing-the-quota-field": ("", '{limits: {cpu: "1e400", memory: 1Gi}}', INVALID),
    "memory-overflowing-int64": ("", '{limits: {cpu: "1", memory: "9Ei"}}', INVALID),
    "pod-budget-overflowing-int64": ('{limits: {cpu: "1", memory: "9Ei"}}', "{}", INVALID),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_absurd_manifest_values(tmp_path: Path, name: str) -> None:
    pod_res, ctr_res, expected = CASES[name]
    bad = tmp_path / "bad.yaml"
    bad.write_text(pod(name, pod_res, ctr_res))
    good = tmp_path / "good.yaml"
    good.write_text(GOOD)
    if expected == INVALID:
        with pytest.raises(ManifestError) as info:
            simulate([bad], MACHINE, CONFIG)
        assert str(bad) in str(info.value) and "resources" in str(info.value), info.value
        assert "Traceback" not in str(info.value)
        return
    result = simulate([bad, good], MACHINE, CONFIG)
    by_name: dict[str, SimulatedPod] = {p.name: p for p in result.pods}
    outcome = by_name[name]
    if expected == REJECTED:
        assert not outcome.admitted
        assert outcome.reason and outcome.message, outcome
    else:
        assert outcome.admitted, outcome
    alone = simulate([good], MACHINE, CONFIG)
    placed = by_name["good"]
    assert placed.admitted
    if expected == REJECTED:
        assert placed.containers == alone.pods[0].containers


def test_containers_whose_total_overflows_are_refused(tmp_path: Path) -> None:
    """Each value fits, their sum (the sandbox's aggregate) would not."""
    half = "92233720368547"  # cores: just under the largest CPU quantity
    bad = tmp_path / "sum.yaml"
    bad.write_text(
        f"""
apiVersion: v1
kind: Pod
metadata: {{name: sum}}
spec:
  containers:
  - {{name: a, resources: {{limits: {{cpu: "{half}", memory: 1Gi}}}}}}
  - {{name: b, resources: {{limits: {{cpu: "{half}", memory: 1Gi}}}}}}
"""
    )
    with pytest.raises(ManifestError, match=r"containers' total is larger"):
        simulate([bad], MACHINE, CONFIG)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("9Ei", 9 << 60), ("1E", 10**18), ("3E2", 300), ("1e30", 10**30), ("2Ki", 2048)],
)
def test_regression_exa_and_exbi_suffixes_are_not_exponents(text: str, expected: int) -> None:
    """``9Ei`` once raised a bare ValueError (read as an exponent ``e`` with digits ``i``)."""
    assert memory_bytes(text) == expected


@pytest.mark.parametrize("text", ["1e400", "1e999999999", "5E-31", "1e+31"])
def test_regression_huge_exponents_are_refused_not_expanded(text: str) -> None:
    """``1e999999999`` would have become a billion-digit integer."""
    with pytest.raises(QuantityError, match="exponent"):
        cpu_millis(text)


@given(st.text(alphabet="0123456789.+-eEkKmMGTPiun ", max_size=24))
def test_fuzz_quantities_parse_or_raise_quantity_error(text: str) -> None:
    """``0EE`` once raised a bare ValueError (any suffix starting with E read as an exponent)."""
    try:
        value = memory_bytes(text)
    except QuantityError:
        return
    assert isinstance(value, int)
