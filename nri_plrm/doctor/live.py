"""The running plugin: registered with containerd (``/healthz``) and serving PodResources.

Both probes have short timeouts: doctor must never hang on a wedged process.
"""

from __future__ import annotations

import http.client
import os
import socket
import stat

from nri_plrm.config.settings import Config
from nri_plrm.doctor.docs import doc_ref
from nri_plrm.doctor.result import Check, fail, ok, warn
from nri_plrm.observability.metrics_server import parse_address
from nri_plrm.podresources.client import PodResourcesClient

AREA = "plugin"
PROBE_TIMEOUT = 2.0
"""Seconds each probe (HTTP, gRPC) may take."""
START = (
    "start the plugin (`systemctl start nri-plrm`, or the DaemonSet, "
    f"{doc_ref('install.md', 'step 3')})"
)


def check_healthz(config: Config, timeout: float = PROBE_TIMEOUT) -> Check:
    """``GET /healthz`` at ``[metrics] address`` answers 200 (registered and synchronized)."""
    address = config.metrics.address
    if not address:
        return warn(
            AREA,
            "registered",
            "[metrics] address is empty: /healthz is off, registration cannot be checked",
            f'set [metrics] address = "127.0.0.1:9740" in {config.source}, or check '
            "`journalctl -u nri-plrm` for the registration line",
        )
    try:
        host, port = parse_address(address)
    except ValueError as exc:
        return fail(AREA, "registered", str(exc), f"fix [metrics] address in {config.source}")
    url = f"http://{address}/healthz"
    connection = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        connection.request("GET", "/healthz")
        response = connection.getresponse()
        body = response.read(4096).decode("utf-8", errors="replace").strip()
        status = response.status
    except (OSError, http.client.HTTPException) as exc:
        reason = "timed out" if isinstance(exc, socket.timeout) else str(exc) or type(exc).__name__
        return fail(
            AREA,
            "registered",
            f"{url}: {reason}: the plugin is not running (or [metrics] address differs)",
            START,
        )
    finally:
        connection.close()
    if status == 200:
        return ok(AREA, "registered", f"{url}: 200 {body}: registered with containerd and synced")
    return fail(
        AREA,
        "registered",
        f"{url}: {status} {body}",
        "the plugin runs but is not registered: check the NRI checks above and "
        f"`journalctl -u nri-plrm` ({doc_ref('troubleshooting.md')})",
    )


def _socket_problem(path: str) -> str:
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return "no such socket"
    except OSError as exc:
        return exc.strerror or str(exc)
    return "" if stat.S_ISSOCK(mode) else "exists but is not a socket"


def list_pods(path: str, timeout: float = PROBE_TIMEOUT) -> tuple[int | None, str]:
    """PodResources ``List`` on ``path``: (pods, "") or (None, why)."""
    client = PodResourcesClient(path, timeout, log_failures=False)
    try:
        reply = client.list()
    finally:
        client.close()
    if reply is None:
        code, details = client.last_error or ("UNKNOWN", "no reply")
        return None, f"{code}: {details}"
    return len(reply.pod_resources), ""


def check_pod_resources(config: Config, timeout: float = PROBE_TIMEOUT) -> list[Check]:
    """The plugin's PodResources socket (and the kubelet's, when merged) answers ``List``."""
    pr = config.pod_resources
    checks: list[Check] = []
    if not pr.enabled:
        checks.append(ok(AREA, "pod-resources", "[pod_resources] enabled = false: not served"))
    else:
        checks.append(_probe("pod-resources", pr.socket, timeout, START))
    if pr.kubelet_socket:
        checks.append(
            _probe(
                "kubelet-pod-resources",
                pr.kubelet_socket,
                timeout,
                "start the kubelet, or clear [pod_resources] kubelet_socket in " + config.source,
            )
        )
    return checks


def _probe(name: str, path: str, timeout: float, fix: str) -> Check:
    problem = _socket_problem(path)
    if problem:
        return fail(AREA, name, f"{path}: {problem}", fix)
    pods, why = list_pods(path, timeout)
    if pods is None:
        return fail(AREA, name, f"{path}: List failed: {why}", fix)
    return ok(AREA, name, f"{path}: List answered ({pods} pods)")
