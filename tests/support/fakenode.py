"""A fake node for ``nri-plrm doctor``: containerd and kubelet configs, a cgroup v2 mount and an
empty ``proc`` (no kubelet process) under one directory, and containerd's version API.

:func:`write_node` writes the files and returns the doctor options that point at them;
:func:`containerd_api` serves containerd's ``Version`` method on a unix socket (the one gRPC call
doctor makes of containerd), answering with the bytes containerd sends. The configurations
default to the ones docs/install.md tells the operator to write, so a node set up by the guide
is what the tests check.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from concurrent import futures
from contextlib import contextmanager
from pathlib import Path

import grpc
from pbwire import encode_varint

REPO = Path(__file__).resolve().parents[2]
GUIDE = (REPO / "docs" / "install.md").read_text()
GUIDE_CONTAINERD = re.findall(r"```toml\n(.*?)```", GUIDE, re.S)[0]
GUIDE_KUBELET = re.findall(r"```yaml\n(.*?)```", GUIDE, re.S)[0]
GUIDE_NRI_SOCKET = "/var/run/nri/nri.sock"
CONTAINERD_VERSION = "v2.1.4"
CONTAINERD_REVISION = "75cb2b7193e4e490e9fbdc236c0e811ccaba3376"
CGROUP_V2_CONTROLLERS = "cpuset cpu io memory hugetlb pids rdma misc"


def encode_version_response(version: str, revision: str) -> bytes:
    """A serialized ``containerd.services.version.v1.VersionResponse``."""
    out = b""
    for number, text in ((1, version), (2, revision)):
        data = text.encode()
        out += bytes([number << 3 | 2]) + encode_varint(len(data)) + data
    return out


@contextmanager
def containerd_api(path: str, version: str = CONTAINERD_VERSION) -> Iterator[str]:
    """Serve containerd's ``Version`` method on the unix socket ``path`` while in the block."""

    def answer(request: bytes, context: grpc.ServicerContext) -> bytes:
        return encode_version_response(version, CONTAINERD_REVISION)

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    server.add_generic_rpc_handlers(
        (
            grpc.method_handlers_generic_handler(
                "containerd.services.version.v1.Version",
                {
                    "Version": grpc.unary_unary_rpc_method_handler(
                        answer,
                        request_deserializer=lambda data: data,
                        response_serializer=lambda data: data,
                    )
                },
            ),
        )
    )
    server.add_insecure_port(f"unix:{path}")
    server.start()
    try:
        yield path
    finally:
        server.stop(None).wait()


def write_node(
    root: Path,
    nri_socket: str,
    containerd_socket: str,
    *,
    containerd_toml: str = GUIDE_CONTAINERD,
    kubelet_yaml: str = GUIDE_KUBELET,
) -> list[str]:
    """Write the node under ``root``; the doctor options naming its files.

    ``nri_socket`` replaces the guide's socket path in the containerd configuration;
    ``containerd_socket`` is where :func:`containerd_api` serves (or does not).
    """
    root.mkdir(parents=True, exist_ok=True)
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
        "--containerd-socket",
        containerd_socket,
        "--containerd-config",
        str(containerd),
        "--kubelet-config",
        str(kubelet),
        "--cgroup-root",
        str(cgroup),
    ]
