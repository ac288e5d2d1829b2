"""A fake node for ``nri-plrm doctor``: containerd and kubelet configs, a containerd binary that
prints a version, a cgroup v2 mount and an empty ``proc`` (no kubelet process), all under one
directory.

:func:`write_node` returns the doctor options that point at them. The configurations default to
the ones docs/install.md tells the operator to write, so a node set up by the guide is what the
tests check.
"""

from __future__ import annotations

import re
import stat
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
GUIDE = (REPO / "docs" / "install.md").read_text()
GUIDE_CONTAINERD = re.findall(r"```toml\n(.*?)```", GUIDE, re.S)[0]
GUIDE_KUBELET = re.findall(r"```yaml\n(.*?)```", GUIDE, re.S)[0]
GUIDE_NRI_SOCKET = "/var/run/nri/nri.sock"
CONTAINERD_VERSION = (
    "containerd github.com/containerd/containerd/v2 v2.1.4 75cb2b7193e4e490e9fbdc236c0e811cc"
)
CGROUP_V2_CONTROLLERS = "cpuset cpu io memory hugetlb pids rdma misc"


def write_node(
    root: Path,
    nri_socket: str,
    *,
    containerd_toml: str = GUIDE_CONTAINERD,
    kubelet_yaml: str = GUIDE_KUBELET,
    containerd_version: str = CONTAINERD_VERSION,
) -> list[str]:
    """Write the node under ``root``; the doctor options naming its files.

    ``nri_socket`` replaces the guide's socket path in the containerd configuration.
    """
    root.mkdir(parents=True, exist_ok=True)
    binary = root / "usr" / "bin" / "containerd"
    binary.parent.mkdir(parents=True, exist_ok=True)
    binary.write_text(f"#!/bin/sh\necho '{containerd_version}'\n")
    binary.chmod(binary.stat().st_mode | stat.S_IXUSR)
    containerd = root / "etc" / "containerd" / "config.toml"
    containerd.parent.mkdir(parents=True, exist_ok=True)
    containerd.write_text(containerd_toml.replace(GUIDE_NRI_SOCKET, nri_socket))
    kubelet = root / "var" / "lib" / "kubelet" / "config.yaml"
    kubelet.parent.mkdir(parents=True, exist_ok=True)
    kubelet.write_text(kubelet_yaml)
    cgroup = root / "sys" / "fs" / "cgroup"
    cgroup.mkdir(parents=True, exist_ok=True)
    (cgroup / "cgroup.controllers").write_text(CGROUP_V2_CONTROLLERS + "\n")
    proc = root / "proc"  # no kubelet runs on this node: the files above are what is checked
    proc.mkdir(exist_ok=True)
    return [
        "--proc",
        str(proc),
        "--containerd",
        str(binary),
        "--containerd-config",
        str(containerd),
        "--kubelet-config",
        str(kubelet),
        "--cgroup-root",
        str(cgroup),
    ]
