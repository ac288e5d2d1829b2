"""Topology manager policy ``none`` (the kubelet's default): accepted, checked as the kubelet
checks it, and flagged by a start-up warning because pod-level resource managers need one of
the aligning policies."""

from __future__ import annotations

import pytest

from nri_plrm.config.file import parse_config
from nri_plrm.config.settings import (
    POD_LEVEL_POLICIES,
    TOPOLOGY_POLICIES,
    ConfigError,
    startup_warnings,
    validate_for_topology,
)
from nri_plrm.topology.model import CPUInfo, Topology


def machine(numa: int) -> Topology:
    infos = [CPUInfo(cpu=n, core=n, socket=0, numa=n, l3=0) for n in range(numa)]
    return Topology.build(infos, {n: {"memory": 1 << 34} for n in range(numa)})


def test_none_is_accepted_and_reaches_the_engine() -> None:
    config = parse_config('[topology_manager]\npolicy = "none"\nscope = "container"')
    assert config.topology_manager.policy == "none"
    assert config.topology_manager_config().policy == "none"
    assert config.engine_config().topology_manager.policy == "none"


def test_policies_are_the_kubelets_four() -> None:
    assert TOPOLOGY_POLICIES == ("none", "best-effort", "restricted", "single-numa-node")
    assert POD_LEVEL_POLICIES == ("best-effort", "restricted", "single-numa-node")


@pytest.mark.parametrize("value", ["None", "NONE", "", "static"])
def test_unknown_policy_names_are_still_refused(value: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(f'[topology_manager]\npolicy = "{value}"')
    assert info.value.errors == [
        f'topology_manager.policy: "{value}": must be one of none, best-effort, restricted, '
        "single-numa-node"
    ]


def test_none_still_validates_the_policy_options_as_the_kubelet_does() -> None:
    # NewManager parses topologyManagerPolicyOptions before it looks at the policy.
    with pytest.raises(ConfigError) as info:
        parse_config(
            '[topology_manager]\npolicy = "none"\noptions = { "max-allowable-numa-nodes" = 4 }'
        )
    assert info.value.errors == [
        "topology_manager.options.max-allowable-numa-nodes: 4: the minimum value of "
        '"max-allowable-numa-nodes" should not be less than 8'
    ]


def test_none_skips_the_numa_node_limit_like_the_kubelet() -> None:
    nine = machine(9)
    with pytest.raises(ConfigError):
        validate_for_topology(parse_config('[topology_manager]\npolicy = "best-effort"'), nine)
    validate_for_topology(parse_config('[topology_manager]\npolicy = "none"'), nine)


def test_startup_warning_names_the_key_and_the_policies_pod_level_managers_need() -> None:
    (warning,) = startup_warnings(parse_config('[topology_manager]\npolicy = "none"'))
    assert warning.startswith('topology_manager.policy: "none": pod-level resource managers need')
    assert "best-effort, restricted or single-numa-node" in warning


@pytest.mark.parametrize("policy", POD_LEVEL_POLICIES)
def test_no_startup_warning_under_the_aligning_policies(policy: str) -> None:
    assert startup_warnings(parse_config(f'[topology_manager]\npolicy = "{policy}"')) == []
