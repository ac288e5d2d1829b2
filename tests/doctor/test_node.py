"""doctor's cgroup and plugin-config checks against fake cgroup and sysfs trees."""

from __future__ import annotations

from pathlib import Path

import pytest
from fakesysfs import write_sysfs

from nri_plrm.doctor import node
from nri_plrm.doctor.result import Status
from nri_plrm.topology.machines import load_topology

SPEC = "sockets=1,numa_per_socket=2,cores_per_numa=4,threads_per_core=2,memory_per_numa=8Gi"


def cgroup_v2(root: Path, controllers: str) -> str:
    root.mkdir(parents=True, exist_ok=True)
    (root / "cgroup.controllers").write_text(controllers + "\n")
    return str(root)


def cgroup_v1(root: Path, *hierarchies: str) -> str:
    for name in hierarchies:
        (root / name).mkdir(parents=True)
    return str(root)


def test_cgroup_v2_with_the_controllers(tmp_path: Path) -> None:
    check = node.check_cgroup(cgroup_v2(tmp_path / "cg", "cpuset cpu io memory hugetlb pids"))
    assert check.status is Status.OK and check.message.startswith("cgroup v2 at")


def test_cgroup_v2_without_cpuset_fails(tmp_path: Path) -> None:
    check = node.check_cgroup(cgroup_v2(tmp_path / "cg", "cpu io memory pids"))
    assert check.status is Status.FAIL and "without the cpuset controller" in check.message


def test_cgroup_v1_warns(tmp_path: Path) -> None:
    root = cgroup_v1(tmp_path / "cg", "cpuset", "cpu", "memory", "pids", "unified")
    check = node.check_cgroup(root)
    assert check.status is Status.WARN and "cgroup v1" in check.message
    assert "hybrid" in check.message and "systemd.unified_cgroup_hierarchy=1" in check.fix


def test_cgroup_v1_without_cpuset_fails(tmp_path: Path) -> None:
    check = node.check_cgroup(cgroup_v1(tmp_path / "cg", "cpu", "memory"))
    assert check.status is Status.FAIL and "cpuset" in check.message


def test_no_cgroup_fails(tmp_path: Path) -> None:
    check = node.check_cgroup(str(tmp_path))
    assert check.status is Status.FAIL and "--cgroup-root" in check.fix


@pytest.fixture
def sysfs(tmp_path: Path) -> str:
    root = tmp_path / "sys"
    write_sysfs(load_topology(SPEC), str(root))
    return str(root)


def plugin(tmp: Path, text: str | None) -> node.PluginConfig:
    path = tmp / "config.toml"
    if text is not None:
        path.write_text(text)
    return node.read_plugin_config(str(path))


def test_missing_plugin_config_checks_the_defaults(tmp_path: Path, sysfs: str) -> None:
    pc = plugin(tmp_path, None)
    check = node.check_plugin_config(pc)
    assert check.status is Status.WARN and "built-in defaults" in check.message
    assert pc.config.source == pc.path
    topology, found = node.discover_machine(sysfs)
    assert topology is not None and found.status is Status.OK
    assert found.message.endswith("16 CPUs, 2 NUMA node(s), 1 socket(s)")
    assert node.check_config_on_machine(pc, topology).status is Status.OK


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('[cpu_manager]\nreserved_cpus = "0-9999"\n', "cpu_manager.reserved_cpus"),
        (
            '[memory_manager]\nreserved_memory = [{ numa_node = 7, memory = "1Gi" }]\n',
            "memory_manager.reserved_memory[0].numa_node: 7: NUMA node does not exist",
        ),
        ("[cpu_manager]\nreserved_cpu_count = 16\n", "must be less than the 16 online CPUs"),
    ],
)
def test_config_that_does_not_fit_this_machine_fails(
    tmp_path: Path, sysfs: str, text: str, expected: str
) -> None:
    pc = plugin(tmp_path, text)
    assert node.check_plugin_config(pc).status is Status.OK
    topology, _ = node.discover_machine(sysfs)
    assert topology is not None
    check = node.check_config_on_machine(pc, topology)
    assert check.status is Status.FAIL and expected in check.message


def test_invalid_config_fails_with_its_key_paths(tmp_path: Path, sysfs: str) -> None:
    pc = plugin(tmp_path, "[nri]\nrequest_timout = 2.0\n")
    check = node.check_plugin_config(pc)
    assert check.status is Status.FAIL and "nri.request_timout" in check.message
    assert "check-config" in check.fix
    topology, _ = node.discover_machine(sysfs)
    assert topology is not None
    assert node.check_config_on_machine(pc, topology).status is Status.FAIL


def test_policy_none_warns(tmp_path: Path, sysfs: str) -> None:
    pc = plugin(tmp_path, '[topology_manager]\npolicy = "none"\n')
    topology, _ = node.discover_machine(sysfs)
    assert topology is not None
    check = node.check_config_on_machine(pc, topology)
    assert check.status is Status.WARN and "pod-level resource managers need" in check.message


def test_unreadable_machine_fails(tmp_path: Path) -> None:
    topology, check = node.discover_machine(str(tmp_path / "nosys"))
    assert topology is None and check.status is Status.FAIL and "--sysfs" in check.fix


def test_paths_other_users_can_replace_fail(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    text = f'[nri]\nsocket = "{shared}/nri.sock"\n[state]\ndir = "{tmp_path}/state"\n'
    text += f'[pod_resources]\nsocket = "{tmp_path}/state/pr.sock"\n'
    check = node.check_plugin_paths(plugin(tmp_path, text))
    assert check.status is Status.FAIL
    assert check.message.startswith(f'nri.socket: "{shared}/nri.sock": directory {shared}')
    safe = tmp_path / "safe"
    safe.mkdir()
    text = text.replace(str(shared), str(safe))
    assert node.check_plugin_paths(plugin(safe, text)).status is Status.OK


def test_export_onto_the_kubelets_directory_fails(tmp_path: Path) -> None:
    kubelet = tmp_path / "kubelet"
    (kubelet / "pods").mkdir(parents=True)
    text = (
        f'[nri]\nsocket = "{tmp_path}/nri.sock"\n'
        f'[state]\ndir = "{tmp_path}/state"\nkubelet_state_dir = "{kubelet}"\n'
        f'[pod_resources]\nsocket = "{tmp_path}/state/pr.sock"\n'
    )
    check = node.check_plugin_paths(plugin(tmp_path, text))
    assert check.status is Status.FAIL and "refuses to start at its next restart" in check.message
