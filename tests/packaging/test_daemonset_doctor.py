"""``kubectl exec`` into the plugin's pod runs ``nri-plrm doctor`` with its defaults: every file
and socket it reads there is mounted from the host, read-only except the state directory
(issue 31 item 4). The pod has no host PID namespace, so doctor finds no kubelet process and
reads the kubelet's configuration at its default path."""

from __future__ import annotations

import os
import posixpath
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from nri_plrm.config.file import parse_config
from nri_plrm.doctor import containerd, containerd_version, kubelet
from nri_plrm.doctor.runner import DoctorInputs

if os.environ.get("NRI_PLRM_REQUIRE_HELM") != "1":
    pytest.importorskip("helm_python", reason="helm-python-sdk renders the chart")

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_helm_chart import config_of, container, daemonset


def _mount_of(ds: dict[str, Any], path: str) -> tuple[dict[str, Any], dict[str, Any], str]:
    """The mount holding ``path`` in the pod, its volume, and the host path it shows."""
    volumes = {v["name"]: v for v in ds["spec"]["template"]["spec"]["volumes"]}
    best: tuple[dict[str, Any], dict[str, Any], str] | None = None
    for mount in container(ds)["volumeMounts"]:
        root = mount["mountPath"].rstrip("/")
        inside = path == root or path.startswith(root + "/")
        if inside and (best is None or len(root) > len(best[0]["mountPath"].rstrip("/"))):
            volume = volumes[mount["name"]]
            host = ""
            if "hostPath" in volume:
                host = posixpath.join(volume["hostPath"]["path"], path[len(root) :].lstrip("/"))
            best = (mount, volume, host.rstrip("/"))
    assert best is not None, f"{path}: not mounted in the pod (doctor reads it)"
    return best


def test_doctor_defaults_find_the_hosts_files_read_only() -> None:
    ds = daemonset({"hostPaths": {"kubeletConfig": kubelet.DEFAULT_CONFIG_PATH}})
    spec = ds["spec"]["template"]["spec"]
    assert not spec.get("hostPID") and not spec.get("hostNetwork")
    inputs = DoctorInputs()
    text, _ = config_of()
    config = parse_config(text, "configmap")
    assert inputs.config == "/etc/nri-plrm/config.toml"
    mount, volume, _ = _mount_of(ds, inputs.config)
    assert mount["readOnly"] is True and "configMap" in volume
    same_path = (
        inputs.containerd_config,  # and the files its imports name, in the same directory
        kubelet.DEFAULT_CONFIG_PATH,  # no kubelet process is visible without hostPID
        containerd_version.DEFAULT_ADDRESS,
    )
    for path in same_path:
        mount, volume, host = _mount_of(ds, path)
        assert mount["readOnly"] is True, path
        assert host == path, f"{path}: shows the host's {host}"
    assert inputs.containerd_config == containerd.DEFAULT_CONFIG_PATH
    for path in (
        config.nri.socket,
        config.state.kubelet_cpu_manager_state,
        config.topology.sysfs_root,
        config.pod_resources.socket,
    ):
        mount, volume, host = _mount_of(ds, path)
        assert "hostPath" in volume, path
        if path != config.pod_resources.socket:
            assert mount["readOnly"] is True, path


def test_kubelet_config_follows_the_value_or_is_left_out() -> None:
    ds = daemonset({"hostPaths": {"kubeletConfig": "/etc/kubernetes/kubelet.yaml"}})
    mount, volume, _ = _mount_of(ds, "/etc/kubernetes/kubelet.yaml")
    assert mount["readOnly"] is True
    assert volume["hostPath"] == {"path": "/etc/kubernetes/kubelet.yaml", "type": "File"}
    ds = daemonset({"hostPaths": {"kubeletConfig": ""}})
    names = {m["name"] for m in container(ds)["volumeMounts"]}
    assert "kubelet-config" not in names and "containerd-config" in names


def test_install_guide_runs_doctor_in_the_pod_and_says_what_differs() -> None:
    guide = (Path(__file__).resolve().parents[2] / "docs" / "install.md").read_text()
    assert "kubectl -n nri-plrm exec daemonset/nri-plrm -- nri-plrm doctor\n" in guide
    values = yaml.safe_load(
        (Path(__file__).resolve().parents[2] / "packaging/helm/nri-plrm/values.yaml").read_text()
    )
    # Not mounted by default: its path differs between distributions, and a hostPath of type
    # File that is missing keeps the pod from starting.
    assert values["hostPaths"]["kubeletConfig"] == ""
    assert kubelet.DEFAULT_CONFIG_PATH in guide
    assert "hostPaths.kubeletConfig" in guide and "--kubelet-config" in guide
