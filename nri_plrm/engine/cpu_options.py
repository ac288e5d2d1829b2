"""The CPU Manager static policy's settings: reserved CPUs and the policy options, parsed and
checked as the kubelet does (the configuration file uses these same rules)."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from nri_plrm.base.cpuset import CPUSet
from nri_plrm.engine.cpu_assignment import TakeOptions, topology_index
from nri_plrm.engine.strconv import number_as_option, parse_bool
from nri_plrm.topology.model import Topology

FULL_PCPUS_ONLY = "full-pcpus-only"
DISTRIBUTE_CPUS_ACROSS_NUMA = "distribute-cpus-across-numa"
ALIGN_BY_SOCKET = "align-by-socket"
DISTRIBUTE_CPUS_ACROSS_CORES = "distribute-cpus-across-cores"
STRICT_CPU_RESERVATION = "strict-cpu-reservation"
PREFER_ALIGN_CPUS_BY_UNCORECACHE = "prefer-align-cpus-by-uncorecache"
OPTION_MATURITY: Mapping[str, str] = {
    FULL_PCPUS_ONLY: "ga",
    DISTRIBUTE_CPUS_ACROSS_NUMA: "beta",
    ALIGN_BY_SOCKET: "alpha",
    DISTRIBUTE_CPUS_ACROSS_CORES: "alpha",
    STRICT_CPU_RESERVATION: "ga",
    PREFER_ALIGN_CPUS_BY_UNCORECACHE: "ga",
}
"""The kubelet's static policy options (v1.36) and their maturity (feature gate level)."""
OPTION_NAMES = tuple(OPTION_MATURITY)
INCOMPATIBLE_OPTIONS: tuple[tuple[str, str], ...] = (
    (FULL_PCPUS_ONLY, DISTRIBUTE_CPUS_ACROSS_CORES),
    (DISTRIBUTE_CPUS_ACROSS_NUMA, DISTRIBUTE_CPUS_ACROSS_CORES),
    (PREFER_ALIGN_CPUS_BY_UNCORECACHE, DISTRIBUTE_CPUS_ACROSS_CORES),
    (PREFER_ALIGN_CPUS_BY_UNCORECACHE, DISTRIBUTE_CPUS_ACROSS_NUMA),
)
"""Option pairs the kubelet refuses together."""


class CPUManagerConfigError(ValueError):
    """A CPU manager setting the kubelet would refuse (reserved CPUs, policy options)."""


def parse_option_value(name: str, value: object) -> bool:
    """One option's value as the kubelet reads it; raises CPUManagerConfigError.

    A number (TOML ``1``) is refused, as the kubelet's config loader refuses a JSON number in
    ``cpuManagerPolicyOptions``, a map of strings; the string ``"1"`` is ``strconv.ParseBool``'s.
    """
    refusal = number_as_option(name, value, "cpuManagerPolicyOptions")
    if refusal is not None:
        raise CPUManagerConfigError(refusal)
    try:
        return parse_bool(value)
    except ValueError as err:
        raise CPUManagerConfigError(f'bad value for option "{name}": {err}') from None


def incompatible_options(enabled: Collection[str]) -> list[tuple[str, str]]:
    """For each incompatible pair among the ``enabled`` options: its second option and the
    kubelet's refusal."""
    return [
        (second, f"static policy options {first} and {second} can not be used at the same time")
        for first, second in INCOMPATIBLE_OPTIONS
        if first in enabled and second in enabled
    ]


@dataclass(frozen=True)
class StaticPolicyOptions:
    """The kubelet's ``StaticPolicyOptions`` (``cpuManagerPolicyOptions`` parsed)."""

    full_pcpus_only: bool = False
    distribute_cpus_across_numa: bool = False
    align_by_socket: bool = False
    distribute_cpus_across_cores: bool = False
    strict_cpu_reservation: bool = False
    prefer_align_by_uncore_cache: bool = False

    @classmethod
    def parse(cls, options: Mapping[str, object]) -> StaticPolicyOptions:
        """Parse option names/values as the kubelet does; raises CPUManagerConfigError.

        Values are booleans or the strings Go's ``strconv.ParseBool`` accepts. The kubelet's
        alpha/beta feature gates for options are not emulated: every option is available.
        """
        flags: dict[str, bool] = {}
        for name, value in options.items():
            if name not in OPTION_NAMES:
                raise CPUManagerConfigError(f'unknown CPU Manager Policy option: "{name}"')
            flags[name] = parse_option_value(name, value)
        refused = incompatible_options([name for name, on in flags.items() if on])
        if refused:
            raise CPUManagerConfigError(refused[0][1])
        return cls(
            full_pcpus_only=flags.get(FULL_PCPUS_ONLY, False),
            distribute_cpus_across_numa=flags.get(DISTRIBUTE_CPUS_ACROSS_NUMA, False),
            align_by_socket=flags.get(ALIGN_BY_SOCKET, False),
            distribute_cpus_across_cores=flags.get(DISTRIBUTE_CPUS_ACROSS_CORES, False),
            strict_cpu_reservation=flags.get(STRICT_CPU_RESERVATION, False),
            prefer_align_by_uncore_cache=flags.get(PREFER_ALIGN_CPUS_BY_UNCORECACHE, False),
        )

    @property
    def take_options(self) -> TakeOptions:
        """The subset ``take_by_topology`` reads."""
        return TakeOptions(
            full_pcpus_only=self.full_pcpus_only,
            distribute_cpus_across_numa=self.distribute_cpus_across_numa,
            distribute_cpus_across_cores=self.distribute_cpus_across_cores,
            prefer_align_by_uncore_cache=self.prefer_align_by_uncore_cache,
        )


@dataclass(frozen=True)
class CPUManagerConfig:
    """Static policy settings.

    ``reserved_cpus`` is the kubelet's ``reservedSystemCPUs``; ``reserved_cpu_count`` is
    ``ceil(kube-reserved + system-reserved cpu)`` from which the policy picks CPUs with its own
    ``takeByTopology`` over all CPUs. Give one of them (both: they must agree). The kubelet
    refuses zero reserved CPUs; an explicit ``reserved_cpu_count=0`` is accepted here (dedicated
    nodes, the kubelet's own policy tests), leaving both unset is an error. ``options`` uses
    the kubelet's option names and values. ``pod_level_resource_managers`` is the
    ``PodLevelResourceManagers`` gate (off: pod-level pods get nothing exclusive).
    """

    reserved_cpus: CPUSet | None = None
    reserved_cpu_count: int | None = None
    options: Mapping[str, object] = field(default_factory=dict)
    pod_level_resource_managers: bool = True

    def policy_options(self) -> StaticPolicyOptions:
        """The parsed options (raises CPUManagerConfigError)."""
        return StaticPolicyOptions.parse(self.options)


def align_by_socket_policy_problem(topology_manager_policy: str) -> str | None:
    """The kubelet's refusal of align-by-socket under this topology manager policy, if any."""
    if topology_manager_policy == "single-numa-node":
        return (
            "Topolgy manager single-numa-node policy is incompatible with CPUManager "
            "align-by-socket policy option"
        )
    return None


def align_by_socket_hardware_problem(topology: Topology) -> str | None:
    """The kubelet's refusal of align-by-socket on this machine, if any."""
    if topology.num_sockets > topology_index(topology).num_numa_nodes:
        return (
            "Align by socket is not compatible with hardware where number of sockets are more "
            "than number of NUMA"
        )
    return None


def validate_static_policy_options(
    options: StaticPolicyOptions, topology: Topology, topology_manager_policy: str
) -> None:
    """The kubelet's ``ValidateStaticPolicyOptions`` (align-by-socket rules)."""
    if not options.align_by_socket:
        return
    problem = align_by_socket_policy_problem(
        topology_manager_policy
    ) or align_by_socket_hardware_problem(topology)
    if problem is not None:
        raise CPUManagerConfigError(problem)
