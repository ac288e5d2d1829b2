"""doctor's kubelet checks against fake kubelet configurations and real state-file formats."""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path

import pytest

from nri_plrm.base.cpuset import CPUSet
from nri_plrm.checkpoint.kubelet import (
    CPUManagerState,
    MemoryManagerState,
    NUMANodeState,
    encode_cpu_manager_state,
    encode_memory_manager_state,
)
from nri_plrm.config.file import parse_config
from nri_plrm.config.settings import Config, StateSettings
from nri_plrm.doctor import kubelet
from nri_plrm.doctor.kubelet import KubeletConfig, read_kubelet_config
from nri_plrm.doctor.kubelet_process import find_kubelet, kubelet_from_argv
from nri_plrm.doctor.result import Status
from nri_plrm.engine.memory_state import MemoryTable

REPO = Path(__file__).resolve().parents[2]
INSTALL_YAML = re.findall(r"```yaml\n(.*?)```", (REPO / "docs/install.md").read_text(), re.S)[0]
HEAD = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
STATIC = HEAD + (
    "cpuManagerPolicy: static\nmemoryManagerPolicy: Static\n"
    "topologyManagerPolicy: single-numa-node\nreservedSystemCPUs: 0,1\n"
    "reservedMemory:\n- numaNode: 0\n  limits: {memory: 1Gi}\n"
)


def load(tmp: Path, text: str) -> KubeletConfig:
    path = tmp / "config.yaml"
    path.write_text(text)
    return read_kubelet_config(str(path))


def statuses(kc: KubeletConfig) -> dict[str, Status]:
    return {c.name: c.status for c in kubelet.check_managers(kc)}


def test_install_guide_kubelet_passes(tmp_path: Path) -> None:
    kc = load(tmp_path, INSTALL_YAML)
    assert kubelet.check_config_file(kc).status is Status.OK
    assert set(statuses(kc).values()) == {Status.OK}
    gates = kubelet.check_feature_gates(kc)
    assert gates is not None and gates.status is Status.OK
    assert gates.message == "featureGates: PodLevelResources=True"


def test_static_managers_conflict(tmp_path: Path) -> None:
    kc = load(tmp_path, STATIC)
    assert statuses(kc) == {
        "cpu-manager": Status.FAIL,
        "memory-manager": Status.FAIL,
        "topology-manager": Status.WARN,
    }
    (cpu, *_) = kubelet.check_managers(kc)
    assert cpu.message.startswith(f"cpuManagerPolicy: static (in {kc.path}): ")
    assert "set cpuManagerPolicy: none in" in cpu.fix and "drain the node" in cpu.fix


def test_devices_say_where_hints_come_from_and_what_the_kubelet_does(tmp_path: Path) -> None:
    none = load(tmp_path, HEAD + "topologyManagerPolicy: none\n")
    check = kubelet.check_devices(none, Config())
    assert check.status is Status.OK and "kubelet_socket is empty" in check.message
    config = parse_config('[pod_resources]\nkubelet_socket = "/run/k.sock"\n')
    check = kubelet.check_devices(none, config)
    assert "/run/k.sock within 0.1 s" in check.message
    assert "without NUMA alignment among them" in check.message
    assert "kubelet_device_checkpoint" in check.message and "spares it" in check.message
    aligned = kubelet.check_devices(load(tmp_path, STATIC), config)
    assert "topologyManagerPolicy single-numa-node: the kubelet aligns devices" in aligned.message
    assert "kubelet_policy says none: simulate --devices plays another kubelet" in aligned.message
    checkpoint = tmp_path / "kubelet_internal_checkpoint"
    text = f'kubelet_socket = "/run/k.sock"\nkubelet_device_checkpoint = "{checkpoint}"\n'
    with_checkpoint = parse_config("[pod_resources]\n" + text)
    check = kubelet.check_devices(none, with_checkpoint)
    assert f"kubelet_device_checkpoint {checkpoint} is not readable here" in check.message
    checkpoint.write_text("{}")
    check = kubelet.check_devices(none, with_checkpoint)
    assert f"from the kubelet's checkpoint {checkpoint} when current" in check.message
    same = parse_config('[topology_manager]\nkubelet_policy = "single-numa-node"\n')
    assert "kubelet_policy says" not in kubelet.check_devices(load(tmp_path, STATIC), same).message


def test_unset_policies_are_the_kubelets_defaults(tmp_path: Path) -> None:
    kc = load(tmp_path, HEAD)
    checks = kubelet.check_managers(kc)
    assert {c.status for c in checks} == {Status.OK}
    assert all("the kubelet's default" in c.message for c in checks)


def test_reserved_cpus_mirror(tmp_path: Path) -> None:
    kc = load(tmp_path, HEAD + 'reservedSystemCPUs: "0-1"\n')
    mirrored = parse_config('[cpu_manager]\nreserved_cpus = "0,1"\n')
    check = kubelet.check_reserved_cpus(kc, mirrored)
    assert check is not None and check.status is Status.OK
    check = kubelet.check_reserved_cpus(kc, Config())
    assert check is not None and check.status is Status.WARN
    assert 'reserved_cpus = "0-1"' in check.fix
    bad = kubelet.check_reserved_cpus(load(tmp_path, HEAD + "reservedSystemCPUs: x\n"), Config())
    assert bad is not None and bad.status is Status.FAIL


def test_pod_level_resources_gate_off_warns(tmp_path: Path) -> None:
    kc = load(tmp_path, HEAD + "featureGates:\n  PodLevelResources: false\n")
    check = kubelet.check_feature_gates(kc)
    assert check is not None and check.status is Status.WARN
    assert "PodLevelResources: true" in check.fix


@pytest.mark.parametrize(
    ("driver", "systemd", "status"),
    [
        ("systemd", True, Status.OK),
        (None, False, Status.OK),
        ("cgroupfs", True, Status.FAIL),
        ("systemd", False, Status.FAIL),
        ("systemd", None, Status.OK),
    ],
)
def test_cgroup_driver_matches_containerd(
    tmp_path: Path, driver: str | None, systemd: bool | None, status: Status
) -> None:
    kc = load(tmp_path, HEAD + (f"cgroupDriver: {driver}\n" if driver else ""))
    check = kubelet.check_cgroup_driver(kc, systemd)
    assert check is not None and check.status is status


def test_missing_broken_and_foreign_files(tmp_path: Path) -> None:
    missing = read_kubelet_config(str(tmp_path / "absent.yaml"))
    check = kubelet.check_config_file(missing)
    assert check.status is Status.WARN and "--kubelet-config" in check.fix
    assert kubelet.check_managers(missing) == []
    assert kubelet.check_reserved_cpus(missing, Config()) is None
    assert kubelet.check_config_file(load(tmp_path, "a: [")).status is Status.FAIL
    foreign = kubelet.check_config_file(load(tmp_path, "kind: Pod\n"))
    assert foreign.status is Status.FAIL and "'Pod'" in foreign.message


def state_config(tmp: Path) -> Config:
    state = dataclasses.replace(
        StateSettings(), kubelet_cpu_manager_state=str(tmp / "cpu_manager_state")
    )
    return dataclasses.replace(Config(), state=state)


def test_state_files_with_static_policies_fail(tmp_path: Path) -> None:
    config = state_config(tmp_path)
    assert kubelet.check_state_files(config).status is Status.OK
    (tmp_path / "cpu_manager_state").write_bytes(
        encode_cpu_manager_state(CPUManagerState("none", CPUSet()))
    )
    check = kubelet.check_state_files(config)
    assert check.status is Status.OK and check.message == "cpu_manager_state: none"
    table = MemoryTable(8 << 30, 1 << 30, 7 << 30, 0, 7 << 30)
    memory = MemoryManagerState("Static", {0: NUMANodeState(0, {"memory": table}, (0,))})
    (tmp_path / "memory_manager_state").write_bytes(encode_memory_manager_state(memory))
    check = kubelet.check_state_files(config)
    assert check.status is Status.FAIL
    assert "memory_manager_state: policyName 'Static'" in check.message
    (tmp_path / "cpu_manager_state").write_bytes(
        encode_cpu_manager_state(CPUManagerState("static", CPUSet(range(4))))
    )
    check = kubelet.check_state_files(config)
    assert "cpu_manager_state: policyName 'static'" in check.message
    assert "remove the kubelet's cpu_manager_state" in check.fix


def test_reserved_memory_mirror(tmp_path: Path) -> None:
    kc = load(tmp_path, STATIC)
    check = kubelet.check_reserved_memory(kc, Config())
    assert check is not None and check.status is Status.WARN
    assert check.message == (
        "reservedMemory (node 0: memory 1Gi) differs from the plugin's (node 0: memory 512Mi)"
    )
    # The fix is TOML the plugin accepts, and it makes the two agree.
    toml = check.fix.split("set ", 1)[1].split(" in ", 1)[0]
    section, _, assignment = toml.partition(" ")
    mirrored = parse_config(f"{section}\n{assignment}\n")
    fixed = kubelet.check_reserved_memory(kc, mirrored)
    assert fixed is not None and fixed.status is Status.OK


def test_reserved_memory_unset_or_bad(tmp_path: Path) -> None:
    check = kubelet.check_reserved_memory(load(tmp_path, HEAD), Config())
    assert check is not None and check.status is Status.OK
    assert check.message == "reservedMemory unset; the plugin reserves node 0: memory 512Mi"
    bad = load(tmp_path, HEAD + "reservedMemory:\n- numaNode: 0\n  limits: {memory: lots}\n")
    check = kubelet.check_reserved_memory(bad, Config())
    assert check is not None and check.status is Status.FAIL
    assert check.message.startswith("reservedMemory: entry 0:")


def test_flags_of_the_running_kubelet_override_its_file(tmp_path: Path) -> None:
    config = tmp_path / "kubelet.yaml"
    config.write_text(INSTALL_YAML)
    proc = tmp_path / "proc"
    (proc / "1").mkdir(parents=True)
    (proc / "1" / "cmdline").write_bytes(b"/sbin/init\0")
    (proc / "812").mkdir()
    argv = [
        "/usr/bin/kubelet",
        "--config",
        str(config),
        "--cpu-manager-policy=static",
        "--feature-gates=PodLevelResources=false,InPlacePodVerticalScaling=true",
        "--root-dir=/data/kubelet",
    ]
    (proc / "812" / "cmdline").write_bytes("\0".join(argv).encode() + b"\0")
    (proc / "self").mkdir()
    process = find_kubelet(str(proc))
    assert process is not None and process.pid == 812 and process.config == str(config)
    assert kubelet.config_path(None, process) == str(config)
    assert kubelet.config_path("/other.yaml", process) == "/other.yaml"
    kc = read_kubelet_config(kubelet.config_path(None, process), process)
    assert "kubelet pid 812" in kubelet.check_config_file(kc).message
    cpu, memory, _ = kubelet.check_managers(kc)
    assert cpu.status is Status.FAIL
    assert "flag --cpu-manager-policy of kubelet pid 812" in cpu.message
    assert cpu.fix.startswith("set --cpu-manager-policy=none on the kubelet's command line")
    assert memory.status is Status.OK
    gates = kubelet.check_feature_gates(kc)
    assert gates is not None and gates.status is Status.WARN
    assert "InPlacePodVerticalScaling=True, PodLevelResources=False" in gates.message
    state = kubelet.check_state_files(Config(), process)
    assert state.status is Status.WARN
    assert 'kubelet_cpu_manager_state = "/data/kubelet/cpu_manager_state"' in state.fix


def test_kubelet_without_config_file_is_checked_by_flags(tmp_path: Path) -> None:
    process = kubelet_from_argv(7, ["kubelet", "--memory-manager-policy", "Static"])
    assert process.config is None
    assert kubelet.config_path(None, process) == kubelet.DEFAULT_CONFIG_PATH
    kc = read_kubelet_config(str(tmp_path / "absent.yaml"), process)
    check = kubelet.check_config_file(kc)
    assert check.status is Status.OK and "runs without --config" in check.message
    statuses_ = {c.name: c.status for c in kubelet.check_managers(kc)}
    assert statuses_["memory-manager"] is Status.FAIL and statuses_["cpu-manager"] is Status.OK


def test_no_kubelet_process(tmp_path: Path) -> None:
    assert find_kubelet(str(tmp_path)) is None
    assert find_kubelet(str(tmp_path / "absent")) is None
    kc = read_kubelet_config(str(tmp_path / "absent.yaml"), None)
    assert "no kubelet is running" in kubelet.check_config_file(kc).message


def test_a_fifo_at_the_kubelet_config_path_is_an_error_not_a_hang(tmp_path: Path) -> None:
    """doctor reads the kubelet's file as the plugin reads its own config: a FIFO (nobody
    writing) is refused at once instead of blocking the preflight."""
    fifo = tmp_path / "config.yaml"
    os.mkfifo(fifo)
    kc = read_kubelet_config(str(fifo))
    assert kc.found and kc.error is not None and "must be a regular file" in kc.error
