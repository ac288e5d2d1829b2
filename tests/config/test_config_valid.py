"""Valid configurations: defaults, the packaged file, typed values, topology checks, reloads."""

from __future__ import annotations

from pathlib import Path

import pytest

from nri_plrm.base.cpuset import CPUSet
from nri_plrm.config.file import load_config, parse_config
from nri_plrm.config.settings import (
    Config,
    ConfigError,
    ReservedMemory,
    diff_configs,
    validate_for_topology,
)
from nri_plrm.topology.model import CPUInfo, Topology

REPO = Path(__file__).resolve().parents[2]
GI = 1024**3


def machine(sockets: int = 2, numa: int = 2, cpus_per_numa: int = 4) -> Topology:
    infos = []
    cpu = 0
    for node in range(numa):
        socket = node * sockets // numa
        for _ in range(cpus_per_numa):
            infos.append(CPUInfo(cpu=cpu, core=cpu, socket=socket, numa=node, l3=socket))
            cpu += 1
    memory = {n: {"memory": 16 * GI, "hugepages-2Mi": 1 * GI} for n in range(numa)}
    return Topology.build(infos, memory)


def test_defaults_are_the_fixed_interface() -> None:
    c = parse_config("")
    assert c.nri.socket == "/var/run/nri/nri.sock"
    assert c.nri.plugin_name == "nri-plrm"
    assert c.nri.plugin_index == "50"
    assert c.state.dir == "/var/lib/nri-plrm"
    assert c.pod_resources.socket == "/var/lib/nri-plrm/pod-resources.sock"
    assert c.pod_resources.mode == 0o600
    assert c.metrics.address == "127.0.0.1:9740"
    assert c.topology.sysfs_root == "/sys"
    assert c.kubernetes.enabled is False
    assert c.kubernetes.node_resource_topology is False
    assert c.topology_manager.policy == "single-numa-node"
    assert c.topology_manager.scope == "pod"
    assert c.topology_manager.prefer_closest_numa_nodes is False
    assert c.topology_manager.max_allowable_numa_nodes == 8
    assert c.cpu_manager.reserved_cpus == CPUSet([0])
    assert c.cpu_manager.reserved_cpu_count is None
    assert c.memory_manager.reserved_memory == (ReservedMemory(0, {"memory": 512 * 1024**2}),)
    assert c == Config(source="<string>")


def test_packaged_config_is_valid_and_equals_defaults() -> None:
    c = load_config(REPO / "packaging" / "config.toml")
    assert diff_configs(Config(), c).restart == ()
    assert diff_configs(Config(), c).live == ()


def test_typed_values() -> None:
    c = parse_config(
        """
[pod_resources]
mode = "0660"
group = "monitoring"
kubelet_socket = "/var/lib/kubelet/pod-resources/kubelet.sock"
[topology_manager]
policy = "best-effort"
scope = "container"
options = { "prefer-closest-numa-nodes" = "True", "max-allowable-numa-nodes" = "16" }
[cpu_manager]
reserved_cpu_count = 2
enable_alpha_options = true
options = { "full-pcpus-only" = "t", "strict-cpu-reservation" = false, "align-by-socket" = "1" }
[memory_manager]
reserved_memory = [
  { numa_node = 0, memory = "1Gi", "hugepages-2Mi" = "4Mi" },
  { numa_node = 1, memory = 268435456 },
]
"""
    )
    assert c.pod_resources.mode == 0o660
    assert c.pod_resources.group == "monitoring"
    assert c.topology_manager.prefer_closest_numa_nodes is True
    assert c.topology_manager.max_allowable_numa_nodes == 16
    assert c.cpu_manager.reserved_cpus is None
    assert c.cpu_manager.reserved_cpu_count == 2
    assert c.cpu_manager.options == frozenset({"full-pcpus-only", "align-by-socket"})
    assert c.memory_manager.reserved() == {
        0: {"memory": GI, "hugepages-2Mi": 4 * 1024**2},
        1: {"memory": 256 * 1024**2},
    }


def test_node_resource_topology_key() -> None:
    c = parse_config("[kubernetes]\nenabled = true\nnode_resource_topology = true")
    assert c.kubernetes.node_resource_topology is True
    changes = diff_configs(Config(), c)
    assert "kubernetes.node_resource_topology" in changes.restart


def test_reserved_cpus_and_matching_count_are_accepted() -> None:
    c = parse_config('[cpu_manager]\nreserved_cpus = "0,4"\nreserved_cpu_count = 2')
    assert c.cpu_manager.reserved_cpus == CPUSet([0, 4])


def test_topology_rules_pass_on_a_fitting_machine() -> None:
    validate_for_topology(parse_config(""), machine())


@pytest.mark.parametrize(
    ("text", "topology", "expected"),
    [
        (
            '[cpu_manager]\nreserved_cpus = "0,9"',
            machine(),
            'cpu_manager.reserved_cpus: "0,9": CPUs 9 do not exist',
        ),
        (
            '[cpu_manager]\nreserved_cpus = "0-7"',
            machine(),
            'cpu_manager.reserved_cpus: "0-7": must leave at least one CPU',
        ),
        (
            "[cpu_manager]\nreserved_cpu_count = 8",
            machine(),
            "cpu_manager.reserved_cpu_count: 8: must be less than the 8 online CPUs",
        ),
        (
            '[memory_manager]\nreserved_memory = [ { numa_node = 3, memory = "1Gi" } ]',
            machine(),
            "memory_manager.reserved_memory[0].numa_node: 3: NUMA node does not exist",
        ),
        (
            '[memory_manager]\nreserved_memory = [ { numa_node = 1, memory = "17Gi" } ]',
            machine(),
            'memory_manager.reserved_memory[0].memory: "17Gi": exceeds the 16Gi of memory on '
            "NUMA node 1",
        ),
        (
            "",
            machine(sockets=1, numa=9, cpus_per_numa=1),
            "topology_manager.options.max-allowable-numa-nodes: 8: unsupported on machines with "
            "more than 8 NUMA Nodes",
        ),
        (
            '[topology_manager]\npolicy = "restricted"\n[cpu_manager]\n'
            'enable_alpha_options = true\noptions = { "align-by-socket" = true }',
            Topology.build(CPUInfo(c, c, c // 2, 0, c // 2) for c in range(4)),
            "cpu_manager.options.align-by-socket: true: Align by socket is not compatible",
        ),
    ],
)
def test_topology_rules(text: str, topology: Topology, expected: str) -> None:
    with pytest.raises(ConfigError) as info:
        validate_for_topology(parse_config(text), topology)
    assert any(e.startswith(expected) for e in info.value.errors), info.value.errors


def test_reload_diff_separates_live_and_restart_keys() -> None:
    old = parse_config("")
    new = parse_config(
        '[log]\nlevel = "debug"\n[cpu_manager]\nreserved_cpus = "0,4"\n'
        '[metrics]\naddress = "0.0.0.0:9740"'
    )
    changes = diff_configs(old, new)
    assert changes.live == ("log.level",)
    assert changes.restart == ("cpu_manager.reserved_cpus", "metrics.address")
    assert diff_configs(old, old) == type(changes)((), ())


def test_engine_settings() -> None:
    c = parse_config(
        '[topology_manager]\npolicy = "restricted"\nscope = "container"\n'
        'options = { "prefer-closest-numa-nodes" = true }\n'
        '[cpu_manager]\nreserved_cpu_count = 2\noptions = { "full-pcpus-only" = true }\n'
        '[memory_manager]\nreserved_memory = [ { numa_node = 1, memory = "1Gi" } ]'
    )
    tm = c.topology_manager_config()
    assert (tm.policy, tm.scope, tm.prefer_closest_numa_nodes) == ("restricted", "container", True)
    cm = c.cpu_manager_config()
    assert cm.reserved_cpus is None and cm.reserved_cpu_count == 2
    assert cm.policy_options().full_pcpus_only
    assert c.memory_manager_config().reserved == {1: {"memory": GI}}
