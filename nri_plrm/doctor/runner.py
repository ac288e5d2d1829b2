"""Run every doctor check in the order an operator fixes them: containerd, kubelet, node, plugin."""

from __future__ import annotations

from dataclasses import dataclass

from nri_plrm.config.settings import DEFAULT_PATH
from nri_plrm.doctor import (
    containerd,
    containerd_version,
    kubelet,
    kubelet_process,
    kubernetes,
    live,
    node,
)
from nri_plrm.doctor.result import Check


@dataclass(frozen=True)
class DoctorInputs:
    """Every path doctor reads; each has a command-line override so tests use fake trees."""

    config: str = DEFAULT_PATH
    containerd_config: str = containerd.DEFAULT_CONFIG_PATH
    containerd_socket: str | None = None
    """None: ``[grpc] address`` of containerd's config, else its default socket."""
    kubelet_config: str | None = None
    """None: the running kubelet's ``--config``, else the kubeadm default."""
    proc: str = kubelet_process.DEFAULT_PROC
    """Where to look for a running kubelet's command line."""
    sysfs: str | None = None
    """None: the plugin's ``[topology] sysfs_root``."""
    cgroup_root: str = node.DEFAULT_CGROUP_ROOT
    probe_timeout: float = live.PROBE_TIMEOUT


def run_checks(inputs: DoctorInputs) -> list[Check]:
    """Every check's result; reads files and probes sockets, writes nothing."""
    plugin = node.read_plugin_config(inputs.config)
    config = plugin.config
    cc = containerd.read_containerd_config(inputs.containerd_config)
    address = inputs.containerd_socket or cc.grpc_address or containerd_version.DEFAULT_ADDRESS
    version = containerd_version.probe_version(address)
    process = kubelet_process.find_kubelet(inputs.proc)
    kc = kubelet.read_kubelet_config(kubelet.config_path(inputs.kubelet_config, process), process)
    checks: list[Check] = [
        containerd_version.check_version(version),
        containerd.check_config_file(cc),
        containerd.check_nri_enabled(cc, version),
        containerd.check_nri_socket(cc, config),
        containerd.check_timeouts(cc, config),
        kubelet.check_config_file(kc),
        *kubelet.check_managers(kc),
        kubelet.check_devices(kc, config),
    ]
    for optional in (
        kubelet.check_reserved_cpus(kc, config),
        kubelet.check_reserved_memory(kc, config),
        kubelet.check_feature_gates(kc),
        kubelet.check_cgroup_driver(kc, cc.systemd_cgroup),
    ):
        if optional is not None:
            checks.append(optional)
    checks.append(kubelet.check_state_files(config, process))
    checks.append(node.check_cgroup(inputs.cgroup_root))
    checks.append(node.check_plugin_config(plugin))
    checks.append(node.check_plugin_paths(plugin))
    topology, discovered = node.discover_machine(inputs.sysfs or config.topology.sysfs_root)
    checks.append(discovered)
    if topology is not None:
        checks.append(node.check_config_on_machine(plugin, topology))
    checks += kubernetes.check_kubernetes(config, inputs.probe_timeout)
    checks.append(live.check_healthz(config, inputs.probe_timeout))
    checks += live.check_pod_resources(config, inputs.probe_timeout)
    return checks
