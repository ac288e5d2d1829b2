"""``nri-plrm simulate --devices``: the README's GPU example prints what the README shows, the
JSON carries each container's devices and the free devices per NUMA node, the kubelet's own
policy can refuse a pod, and bad values name the value and the rule."""

from __future__ import annotations

import io
import json
import shlex
from pathlib import Path

import pytest

from nri_plrm.cli import main

REPO = Path(__file__).resolve().parents[2]
README = REPO / "examples" / "README.md"
GPU_POD = REPO / "examples" / "devices" / "gpu-training.yaml"
SPLIT = """apiVersion: v1
kind: Pod
metadata: {name: two-gpus, namespace: ml}
spec:
  containers:
  - name: trainer
    resources:
      limits: {cpu: "2", memory: "2Gi", nvidia.com/gpu: 2}
"""


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(list(argv), out=out)
    return code, out.getvalue()


def test_the_readme_example_prints_what_the_readme_shows() -> None:
    section = README.read_text().split("## Devices: a GPU training pod", 1)[1]
    command = section.split("```sh\n", 1)[1].split("```", 1)[0].strip()
    shown = section.split("```text\n", 1)[1].split("```", 1)[0]
    argv = shlex.split(command)
    assert argv[:2] == ["nri-plrm", "simulate"]
    code, out = run(*[str(REPO / a) if a.startswith("examples/") else a for a in argv[1:]])
    assert code == 0 and out == shown


def test_json_carries_the_devices_and_the_free_devices_per_node() -> None:
    code, out = run(
        "simulate", "--output", "json", "--devices", "nvidia.com/gpu=1:1,3:1", str(GPU_POD)
    )
    assert code == 0
    doc = json.loads(out)
    trainer, proxy = doc["pods"][0]["containers"]
    assert trainer["devices"] == [{"resource": "nvidia.com/gpu", "id": "gpu0", "numa": [1]}]
    assert "devices" not in proxy
    assert trainer["mems"] == "1"
    gpus = {n: r.get("nvidia.com/gpu") for n, r in doc["free_per_numa"].items()}
    assert gpus["1"] == {"capacity": 1, "allocatable": 1, "available": 0}
    assert gpus["3"] == {"capacity": 1, "allocatable": 1, "available": 1}
    assert gpus["0"] is None


def test_without_devices_the_document_is_unchanged(tmp_path: Path) -> None:
    code, out = run("simulate", "--output", "json", str(REPO / "examples" / "besteffort.yaml"))
    assert code == 0
    doc = json.loads(out)
    assert all("devices" not in c for p in doc["pods"] for c in p["containers"])


@pytest.mark.parametrize(
    ("policy", "cause"),
    [
        ("none", "pod holds nvidia.com/gpu gpu0 (NUMA 0), gpu1 (NUMA 1)"),
        ("single-numa-node", "the kubelet's Device Manager could not give the pod its devices"),
    ],
)
def test_gpus_on_two_nodes_are_refused(tmp_path: Path, policy: str, cause: str) -> None:
    manifest = tmp_path / "split.yaml"
    manifest.write_text(SPLIT)
    code, out = run(
        "simulate",
        "--output",
        "json",
        "--devices",
        "nvidia.com/gpu=0:1,1:1",
        "--kubelet-topology-policy",
        policy,
        str(manifest),
    )
    assert code == 0
    (pod,) = json.loads(out)["pods"]
    assert (pod["admitted"], pod["reason"]) == (False, "TopologyAffinityError")
    assert cause in pod["explanation"]


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        (["--devices", "gpu=0:1"], "the resource is a device plugin's"),
        (["--devices", "nvidia.com/gpu=0-1"], "expected RESOURCE=NODE:COUNT"),
        (["--devices", "nvidia.com/gpu=9:1"], "NUMA node 9: the machine has nodes 0, 1, 2, 3"),
        (["--devices", "nvidia.com/gpu=0:1", "--devices", "nvidia.com/gpu=1:1"], "named twice"),
        (["--kubelet-topology-policy", "strict"], "one of none, best-effort"),
    ],
)
def test_bad_values_name_the_value_and_the_rule(
    argv: list[str], error: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _ = run("simulate", *argv, str(GPU_POD))
    assert code == 2
    assert error in capsys.readouterr().err


@pytest.mark.parametrize(
    ("flag", "cause"),
    [
        ([], "Topology Manager policy single-numa-node (topology_manager.kubelet_policy)"),
        (
            ["--kubelet-topology-policy", "single-numa-node"],
            "Topology Manager policy single-numa-node (--kubelet-topology-policy)",
        ),
        (["--kubelet-topology-policy", "none"], "pod holds nvidia.com/gpu gpu0 (NUMA 0)"),
    ],
    ids=["key", "flag-same", "flag-overrides"],
)
def test_the_config_key_names_the_kubelets_policy_and_the_flag_overrides_it(
    tmp_path: Path, flag: list[str], cause: str
) -> None:
    manifest = tmp_path / "split.yaml"
    manifest.write_text(SPLIT)
    config = tmp_path / "config.toml"
    config.write_text('[topology_manager]\nkubelet_policy = "single-numa-node"\n')
    argv = ["simulate", "--config", str(config), "--output", "json"]
    code, out = run(*argv, "--devices", "nvidia.com/gpu=0:1,1:1", *flag, str(manifest))
    assert code == 0
    (pod,) = json.loads(out)["pods"]
    assert (pod["admitted"], pod["reason"]) == (False, "TopologyAffinityError")
    assert cause in pod["explanation"]


def test_a_bad_kubelet_policy_key_is_refused_with_its_key_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "config.toml"
    config.write_text('[topology_manager]\nkubelet_policy = "strict"\n')
    code, _ = run("simulate", "--config", str(config), str(GPU_POD))
    assert code == 2
    err = capsys.readouterr().err
    assert 'topology_manager.kubelet_policy: "strict": must be one of none, best-effort' in err
