"""The kubeconfig file of ``[kubernetes] kubeconfig``, checked before the daemon starts: read with
the bounded, regular-file-only reader, valid YAML, with a current context whose cluster names a
server. ``check-config``, ``run`` and ``doctor`` report a problem as
``kubernetes.kubeconfig: "PATH": problem`` (the daemon would otherwise run without the API)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from lightkube import KubeConfig
from lightkube.core.exceptions import ConfigError as LightkubeConfigError

from nri_plrm.config.settings import Config, format_value
from nri_plrm.util.bounded_file import InputFileError, read_regular_file

MAX_KUBECONFIG_BYTES = 4 * 1024 * 1024
"""The largest kubeconfig read: 4 MiB (embedded certificates of dozens of clusters fit)."""

KEY = "kubernetes.kubeconfig"


class KubeconfigFileError(ValueError):
    """A kubeconfig that cannot be used; the message says why and names the file."""


def read_kubeconfig(path: str) -> KubeConfig:
    """The kubeconfig at ``path`` with a usable current context (a cluster with a server);
    raises :class:`KubeconfigFileError`."""
    try:
        raw = read_regular_file(path, MAX_KUBECONFIG_BYTES, "kubeconfig")
    except InputFileError as exc:
        raise KubeconfigFileError(exc.problem) from exc
    try:
        data = yaml.safe_load(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise KubeconfigFileError(f"not UTF-8 text: {exc.reason}") from exc
    except (yaml.YAMLError, RecursionError) as exc:
        raise KubeconfigFileError(f"not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise KubeconfigFileError("not a kubeconfig: the document must be a mapping")
    try:
        config = KubeConfig.from_dict(data, fname=Path(path))
    except (LightkubeConfigError, KeyError, TypeError, ValueError, AttributeError) as exc:
        raise KubeconfigFileError(f"not a kubeconfig: {_reason(exc)}") from exc
    if not config.current_context:
        raise KubeconfigFileError(
            "no current-context: set one (kubectl config use-context NAME --kubeconfig FILE)"
        )
    try:
        current = config.get()
    except LightkubeConfigError as exc:
        raise KubeconfigFileError(f"current-context {config.current_context!r}: {exc}") from exc
    except KeyError as exc:
        raise KubeconfigFileError(
            f"current-context {config.current_context!r}: its cluster or user "
            f"{exc.args[0] if exc.args else ''!r} is not defined in the file"
        ) from exc
    cluster = current.context.cluster if current is not None else ""
    if not _server_of(data, cluster):
        raise KubeconfigFileError(
            f"current-context {config.current_context!r}: its cluster {cluster!r} has no server "
            "(clients would fall back to http://localhost:8080)"
        )
    return config


def _server_of(data: dict[str, Any], cluster: str) -> str:
    """The ``server`` the file itself gives the cluster named ``cluster`` (lightkube fills in a
    default when it is missing)."""
    for entry in data.get("clusters") or ():
        if isinstance(entry, dict) and entry.get("name") == cluster:
            fields = entry.get("cluster")
            server = fields.get("server") if isinstance(fields, dict) else None
            return server if isinstance(server, str) else ""
    return ""


def kubeconfig_problems(config: Config) -> list[str]:
    """``kubernetes.kubeconfig: "PATH": problem`` when the API is enabled with a kubeconfig file
    that cannot be used (empty list otherwise; the in-cluster mode has no file to check)."""
    settings = config.kubernetes
    if not settings.enabled or not settings.kubeconfig:
        return []
    try:
        read_kubeconfig(settings.kubeconfig)
    except KubeconfigFileError as exc:
        return [
            f"{KEY}: {format_value(settings.kubeconfig)}: {exc}: [kubernetes] enabled = true "
            "needs a readable kubeconfig (or an empty kubeconfig for the in-cluster service "
            "account)"
        ]
    return []


def _reason(exc: BaseException) -> str:
    if isinstance(exc, KeyError):
        return f"missing {exc.args[0]!r}" if exc.args else "missing entry"
    return str(exc) or type(exc).__name__
