"""``nri-plrm doctor`` end to end: a healthy fake node, a broken one, JSON, exit codes, help."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from fakenode import containerd_api, write_node
from fakesysfs import write_sysfs
from static_view import StaticView

from nri_plrm.cli import build_parser, main
from nri_plrm.observability.metrics import Metrics
from nri_plrm.observability.metrics_server import MetricsServer
from nri_plrm.podresources.server import PodResourcesServer, PodResourcesService
from nri_plrm.topology.machines import load_topology

REPO = Path(__file__).resolve().parents[2]
SPEC = "sockets=1,numa_per_socket=2,cores_per_numa=4,threads_per_core=2,memory_per_numa=8Gi"


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(list(argv), out=out)
    return code, out.getvalue()


@dataclass
class Node:
    root: Path
    args: list[str]
    """doctor's options for this node."""
    config: Path
    health: dict[str, bool]
    """``healthy``: what the plugin's /healthz answers."""

    def doctor(self, *extra: str) -> tuple[int, str]:
        return run("doctor", *self.args, "--config", str(self.config), *extra)


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    """A node set up as docs/install.md says, with the plugin registered and serving."""
    root = tmp_path / "node"
    health = {"healthy": True}

    def healthz() -> tuple[bool, str]:
        if health["healthy"]:
            return True, "ok"
        return False, "not connected to the runtime's NRI socket"

    with contextlib.ExitStack() as stack:
        nri_socket = str(tmp_path / "nri.sock")
        listener = stack.enter_context(socket.socket(socket.AF_UNIX, socket.SOCK_STREAM))
        listener.bind(nri_socket)
        listener.listen(1)
        containerd = stack.enter_context(containerd_api(str(tmp_path / "containerd.sock")))
        args = write_node(root, nri_socket, containerd)
        write_sysfs(load_topology(SPEC), str(root / "sys"))
        metrics = MetricsServer(Metrics(), "127.0.0.1:0", health=healthz)
        metrics.start()
        stack.callback(metrics.stop)
        pr_socket = str(tmp_path / "pr.sock")
        pod_resources = PodResourcesServer(PodResourcesService(StaticView()), pr_socket)
        pod_resources.start()
        stack.callback(pod_resources.stop, None)
        config = tmp_path / "config.toml"
        config.write_text(
            f'[nri]\nsocket = "{nri_socket}"\nrequest_timeout = 5.0\n'
            f'[state]\nkubelet_cpu_manager_state = "{root}/var/lib/kubelet/cpu_manager_state"\n'
            f'[pod_resources]\nsocket = "{pr_socket}"\n'
            f'[metrics]\naddress = "127.0.0.1:{metrics.port}"\n'
            f'[topology]\nsysfs_root = "{root}/sys"\n'
        )
        yield Node(root, args, config, health)


def test_node_set_up_by_the_guide_is_all_ok(node: Node) -> None:
    code, out = node.doctor()
    assert code == 0, out
    rows = out.split("\n\n")[0].splitlines()[1:]
    assert rows and all(row.startswith("OK  ") for row in rows), out
    assert "to fix:" not in out
    assert out.endswith(f"0 FAIL, 0 WARN, {len(rows)} OK: OK (exit 0)\n")
    assert re.search(r"^OK +containerd\.version +containerd 2\.1\.4 running ", out, re.M)


def test_json_schema(node: Node) -> None:
    code, out = node.doctor("--output", "json")
    data = json.loads(out)
    assert code == data["exit_code"] == 0
    assert list(data) == ["status", "exit_code", "counts", "checks"]
    assert data["status"] == "OK"
    assert data["counts"] == {"ok": 22, "warn": 0, "fail": 0}
    for check in data["checks"]:
        assert list(check) == ["area", "name", "status", "message", "fix"]
        assert check["status"] == "OK" and check["fix"] == ""
    names = [f"{c['area']}.{c['name']}" for c in data["checks"]]
    assert names[:5] == [
        "containerd.version",
        "containerd.config",
        "containerd.nri",
        "containerd.nri-socket",
        "containerd.nri-timeouts",
    ]
    assert names[-2:] == ["plugin.registered", "plugin.pod-resources"]
    assert len(set(names)) == len(names)


def test_warning_exits_1(node: Node) -> None:
    kubelet = node.root / "var/lib/kubelet/config.yaml"
    kubelet.write_text(
        kubelet.read_text().replace("PodLevelResources: true", "PodLevelResources: false")
    )
    code, out = node.doctor()
    assert code == 1
    assert re.search(
        r"^WARN +kubelet\.feature-gates +featureGates: PodLevelResources=False", out, re.M
    )
    assert "to fix:\n  WARN  kubelet.feature-gates: set featureGates" in out
    assert out.endswith("0 FAIL, 1 WARN, 21 OK: WARN (exit 1)\n")


def test_static_kubelet_and_disabled_nri_exit_2(node: Node) -> None:
    kubelet = node.root / "var/lib/kubelet/config.yaml"
    kubelet.write_text(
        kubelet.read_text().replace("cpuManagerPolicy: none", "cpuManagerPolicy: static")
    )
    containerd = node.root / "etc/containerd/config.toml"
    containerd.write_text(containerd.read_text().replace("  disable = false", "  disable = true"))
    node.health["healthy"] = False
    code, out = node.doctor("--output", "json")
    data = json.loads(out)
    assert code == 2 and data["status"] == "FAIL"
    failed = {f"{c['area']}.{c['name']}": c for c in data["checks"] if c["status"] == "FAIL"}
    assert set(failed) == {"containerd.nri", "kubelet.cpu-manager", "plugin.registered"}
    assert failed["plugin.registered"]["message"].endswith(
        "503 not connected to the runtime's NRI socket"
    )
    assert all(c["fix"] for c in failed.values())


def test_doctor_writes_nothing(node: Node, tmp_path: Path) -> None:
    def snapshot() -> dict[str, tuple[int, int]]:
        return {
            str(p): (p.stat().st_mtime_ns, p.stat().st_size)
            for p in tmp_path.rglob("*")
            if not p.is_socket()
        }

    before = snapshot()
    node.doctor()
    assert snapshot() == before


def test_bare_machine_names_what_is_missing(tmp_path: Path) -> None:
    """Nothing installed: every path points at an empty tree; the report says what to do."""
    empty = tmp_path / "empty"
    empty.mkdir()
    env = dict(os.environ, PYTHONPATH=str(REPO), PATH=str(empty))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "nri_plrm.cli",
            "doctor",
            "--config",
            str(empty / "config.toml"),
            "--containerd-config",
            str(empty / "containerd.toml"),
            "--kubelet-config",
            str(empty / "kubelet.yaml"),
            "--cgroup-root",
            str(empty),
            "--sysfs",
            str(empty / "sys"),
            "--proc",
            str(empty),
            "--containerd-socket",
            str(empty / "containerd.sock"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=REPO,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr == ""
    out = proc.stdout
    assert re.search(
        r"^FAIL +containerd\.version +containerd is not installed \(no `containerd` on PATH\) "
        r"and not running",
        out,
        re.M,
    )
    assert "install containerd 2.0 or later" in out
    assert "kubelet.config" in out and "no such file" in out
    assert "to fix:" in out


def test_help_has_examples_and_every_override() -> None:
    sub = build_parser()._subparsers._group_actions[0].choices["doctor"]  # type: ignore[union-attr]
    text = sub.format_help()
    assert "examples:" in text and "nri-plrm doctor" in text
    for option in (
        "--config",
        "--containerd-config",
        "--containerd-socket",
        "--kubelet-config",
        "--sysfs",
        "--cgroup-root",
        "--proc",
        "--output",
    ):
        assert option in text
    assert "0 OK, 1 WARN, 2 FAIL" in " ".join(text.split())


def test_kubernetes_api_enabled_with_a_missing_kubeconfig_fails(node: Node) -> None:
    """``[kubernetes] enabled`` adds the Kubernetes checks before the plugin's; a kubeconfig
    that is not there is a FAIL naming the file, with the config key as the fix."""
    with node.config.open("a") as config:
        config.write('[kubernetes]\nenabled = true\nkubeconfig = "/nonexistent"\n')
    code, out = node.doctor("--output", "json")
    assert code == 2
    checks = json.loads(out)["checks"]
    names = [f"{c['area']}.{c['name']}" for c in checks]
    assert names[-3:] == ["kubernetes.kubeconfig", "plugin.registered", "plugin.pod-resources"]
    failed = [c for c in checks if c["status"] != "OK"]
    assert failed == [
        {
            "area": "kubernetes",
            "name": "kubeconfig",
            "status": "FAIL",
            "message": "/nonexistent: cannot read the kubeconfig: No such file or directory",
            "fix": f"fix [kubernetes] kubeconfig in {node.config} (a readable kubeconfig; empty "
            "in a pod with its service account)",
        }
    ]
