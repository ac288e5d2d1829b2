"""The Kubernetes API the plugin reads pods from (``[kubernetes] enabled``): the kubeconfig (or
the in-cluster service account) is usable, the API server answers within a short deadline, and
this node's name is a Node object there (the pod cache lists ``spec.nodeName=<name>``)."""

from __future__ import annotations

import asyncio

import httpx2
from lightkube import ApiError, KubeConfig
from lightkube.core.exceptions import ConfigError as LightkubeConfigError
from lightkube.resources.core_v1 import Node

from nri_plrm.config.kubeconfig import KubeconfigFileError, read_kubeconfig
from nri_plrm.config.settings import Config
from nri_plrm.doctor.result import Check, fail, ok
from nri_plrm.podsource.client import (
    SERVICE_ACCOUNT_DIR,
    KubeConfigError,
    load_kube_config,
    new_client,
    node_name,
)

AREA = "kubernetes"
PROBE_TIMEOUT = 2.0
"""Seconds the API server has to answer the Node lookup."""


def check_kubernetes(
    config: Config, timeout: float = PROBE_TIMEOUT, service_account_dir: str = SERVICE_ACCOUNT_DIR
) -> list[Check]:
    """``kubeconfig``, ``api`` and ``node`` (none when the API is not enabled)."""
    settings = config.kubernetes
    if not settings.enabled:
        return []
    source = settings.kubeconfig or f"in-cluster service account {service_account_dir}"
    try:
        if settings.kubeconfig:
            kube = read_kubeconfig(settings.kubeconfig)
        else:
            kube = load_kube_config("", service_account_dir)
    except (KubeconfigFileError, KubeConfigError) as exc:
        return [
            fail(
                AREA,
                "kubeconfig",
                f"{source}: {exc}",
                f"fix [kubernetes] kubeconfig in {config.source} (a readable kubeconfig; empty "
                "in a pod with its service account)",
            )
        ]
    checks = [ok(AREA, "kubeconfig", f"{source}: usable")]
    node = node_name(settings)
    server = _server(kube)
    try:
        found = asyncio.run(asyncio.wait_for(_get_node(kube, node, timeout), timeout))
    except (asyncio.TimeoutError, TimeoutError):
        return [*checks, _unreachable(config, server, f"no answer within {timeout:g} s")]
    except ApiError as exc:
        code = exc.status.code
        if code == 404:
            return [
                *checks,
                ok(AREA, "api", f"{server}: reachable"),
                fail(
                    AREA,
                    "node",
                    f"no Node named {node!r} at {server}: the pod cache would list no pods",
                    "set [kubernetes] node_name (or NODE_NAME) to the kubelet's node name "
                    "(`kubectl get nodes`)",
                ),
            ]
        return [
            *checks,
            fail(
                AREA,
                "api",
                f"{server}: GET node {node!r} answered {code}: {exc.status.message}",
                "grant the plugin's user get/list/watch on pods and get on nodes (RBAC), or "
                "fix its credentials in the kubeconfig",
            ),
        ]
    except (httpx2.HTTPError, OSError, KubeConfigError, LightkubeConfigError, ValueError) as exc:
        return [*checks, _unreachable(config, server, str(exc) or type(exc).__name__)]
    return [
        *checks,
        ok(AREA, "api", f"{server}: reachable"),
        ok(AREA, "node", f"Node {found!r} found"),
    ]


async def _get_node(kube: KubeConfig, node: str, timeout: float) -> str:
    client = new_client(kube, timeout)
    try:
        obj = await client.get(Node, name=node)
    finally:
        await client.close()
    return obj.metadata.name if obj.metadata is not None and obj.metadata.name else node


def _server(kube: KubeConfig) -> str:
    current = kube.get()
    return current.cluster.server if current is not None and current.cluster.server else "?"


def _unreachable(config: Config, server: str, reason: str) -> Check:
    return fail(
        AREA,
        "api",
        f"{server}: {reason}: the API server is unreachable (the plugin would decide from NRI "
        "data only)",
        f"check the server address and network from this host, or [kubernetes] in {config.source}",
    )
