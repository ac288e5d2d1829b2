"""The kubelet's ``NewManager`` option handling, built from the engine's option parser."""

from __future__ import annotations

from collections.abc import Mapping

from nri_plrm.engine.topology_manager import TopologyManagerConfig, parse_policy_option


def config_from_options(
    policy: str, scope: str, options: Mapping[str, str] | None = None
) -> TopologyManagerConfig:
    """A config from ``topologyManagerPolicyOptions`` strings; raises
    TopologyManagerConfigError like the kubelet."""
    fields = dict(parse_policy_option(name, value) for name, value in (options or {}).items())
    return TopologyManagerConfig(policy, scope, **fields)  # type: ignore[arg-type]
