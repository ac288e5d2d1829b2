"""Connecting to the Kubernetes API: a kubeconfig file on hosts, the service account in a pod.

The client library is lightkube (asyncio over httpx): it reads kubeconfig files (token, client
certificates, exec plugins) and the in-cluster service account (token file re-read as it rotates,
CA, ``KUBERNETES_SERVICE_HOST``/``PORT``).
"""

from __future__ import annotations

import os
import socket

import httpx2
from lightkube import AsyncClient, KubeConfig
from lightkube.config.client_adapter import AsyncClient as HttpClient
from lightkube.config.client_adapter import ConnectionParams
from lightkube.core.exceptions import ConfigError as LightkubeConfigError

from nri_plrm.config.settings import KubernetesSettings
from nri_plrm.podsource.podapi import ApiLimits, PodApi

SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
"""Where Kubernetes mounts a pod's service account token, namespace and CA."""
REQUEST_TIMEOUT = 10.0
"""Seconds for list and create requests (the watch's read timeout is unbounded)."""


class KubeConfigError(ValueError):
    """No usable API configuration: names the source that was tried and why it failed."""


def load_kube_config(
    kubeconfig: str = "", service_account_dir: str = SERVICE_ACCOUNT_DIR
) -> KubeConfig:
    """The kubeconfig at ``kubeconfig``, or the in-cluster service account when it is empty."""
    if kubeconfig:
        try:
            return KubeConfig.from_file(kubeconfig)
        except (LightkubeConfigError, OSError, ValueError, KeyError, TypeError) as exc:
            raise KubeConfigError(
                f"kubernetes.kubeconfig {kubeconfig!r}: not a usable kubeconfig: {exc}"
            ) from exc
    if not os.environ.get("KUBERNETES_SERVICE_HOST"):
        raise KubeConfigError(
            "kubernetes.kubeconfig '': in-cluster mode needs KUBERNETES_SERVICE_HOST (run in a "
            "pod) or set kubernetes.kubeconfig to a kubeconfig file"
        )
    try:
        return KubeConfig.from_service_account(service_account_dir)
    except (LightkubeConfigError, OSError, KeyError) as exc:
        raise KubeConfigError(
            f"service account {service_account_dir!r}: token, namespace or CA unreadable "
            f"(automountServiceAccountToken must be true for the in-cluster mode): {exc}"
        ) from exc


def new_client(config: KubeConfig, timeout: float = REQUEST_TIMEOUT) -> AsyncClient:
    """An asyncio client for ``config`` (``HTTPS_PROXY``/``NO_PROXY`` apply, as for kubectl)."""
    try:
        return AsyncClient(config, timeout=httpx2.Timeout(timeout))
    except (AssertionError, LightkubeConfigError, OSError, ValueError) as exc:
        raise KubeConfigError(
            f"kubeconfig {config.fname or '(in-cluster)'}: no usable cluster and user: {exc}"
        ) from exc


def new_pod_api(
    config: KubeConfig, limits: ApiLimits | None = None, timeout: float = REQUEST_TIMEOUT
) -> PodApi:
    """The pod cache's list and watch requests for ``config`` (an HTTP client of its own with
    the same credentials as :func:`new_client`), within ``limits``."""
    current = config.get()
    if current is None:
        raise KubeConfigError(f"kubeconfig {config.fname or '(in-cluster)'}: no current context")
    try:
        http = HttpClient(current, ConnectionParams(timeout=httpx2.Timeout(timeout)))
    except (AssertionError, LightkubeConfigError, OSError, ValueError) as exc:
        raise KubeConfigError(
            f"kubeconfig {config.fname or '(in-cluster)'}: no usable cluster and user: {exc}"
        ) from exc
    return PodApi(http, limits)


def node_name(settings: KubernetesSettings) -> str:
    """This node's name: the setting, else ``$NODE_NAME``, else the host name."""
    return settings.node_name or os.environ.get("NODE_NAME", "") or socket.gethostname()
