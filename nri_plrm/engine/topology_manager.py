"""Topology Manager: the kubelet's hint merge, policies, and scope admission flows.

The merge gives the same answer as the kubelet's exhaustive walk over every permutation of the
providers' hints (``policy.go``), but computes it without enumerating the cross product: the
kubelet's pairwise comparison is a strict total order on merged (mask, preferred) values, so the
walk's result is the best achievable value under that order, whatever the enumeration order.
Preferred results are found by intersecting the providers' preferred masks; only when none
exists are the achievable non-preferred masks built (at most 2**nodes distinct values).

Hint maps are read in their mapping order (the kubelet iterates a Go map, which is random; with
a total order the order only matters for identical values, which are interchangeable).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Protocol

from nri_plrm.engine.bitmask import mask_of
from nri_plrm.engine.spec import (
    TOPOLOGY_AFFINITY_ERROR,
    AdmissionError,
    ContainerSpec,
    HintMap,
    PodSpec,
    TopologyHint,
)
from nri_plrm.engine.strconv import atoi, number_as_option, parse_bool
from nri_plrm.topology.model import Topology

POLICY_NONE = "none"
POLICY_BEST_EFFORT = "best-effort"
POLICY_RESTRICTED = "restricted"
POLICY_SINGLE_NUMA_NODE = "single-numa-node"
POLICIES = (POLICY_NONE, POLICY_BEST_EFFORT, POLICY_RESTRICTED, POLICY_SINGLE_NUMA_NODE)

SCOPE_CONTAINER = "container"
SCOPE_POD = "pod"
SCOPES = (SCOPE_CONTAINER, SCOPE_POD)

OPTION_PREFER_CLOSEST = "prefer-closest-numa-nodes"
OPTION_MAX_ALLOWABLE = "max-allowable-numa-nodes"
DEFAULT_MAX_ALLOWABLE_NUMA_NODES = 8
MAX_ALLOWABLE_TOO_SMALL = (
    f'the minimum value of "{OPTION_MAX_ALLOWABLE}" should not be less than '
    f"{DEFAULT_MAX_ALLOWABLE_NUMA_NODES}"
)

TOPOLOGY_AFFINITY_MESSAGE = "Resources cannot be allocated with Topology locality"
POD_SCOPE_PREFIX = "Pod Scope "
POD_LEVEL_POD_SCOPE_MESSAGE = (
    "pod with pod-level resources failed admission under pod-scope topology manager"
)
POD_LEVEL_CONTAINER_SCOPE_MESSAGE = (
    "pod with pod-level resources failed admission with a container-level topology manager"
)

NO_PREFERENCE = TopologyHint(None, True)
"""What a provider without an opinion contributes."""
UNSATISFIABLE = TopologyHint(None, False)
"""What a resource that cannot be placed anywhere contributes; also ``GetAffinity``'s zero."""


class TopologyManagerConfigError(ValueError):
    """A topology manager setting the kubelet would refuse (message as the kubelet's)."""


def topology_affinity_error() -> AdmissionError:
    """The kubelet's ``TopologyAffinityError``."""
    return AdmissionError(TOPOLOGY_AFFINITY_ERROR, TOPOLOGY_AFFINITY_MESSAGE)


def pod_level_topology_affinity_error(message: str) -> AdmissionError:
    """The kubelet's ``PodLevelTopologyAffinityError(message)`` (reason TopologyAffinityError)."""
    return AdmissionError(
        TOPOLOGY_AFFINITY_ERROR, POD_SCOPE_PREFIX + (message or TOPOLOGY_AFFINITY_MESSAGE)
    )


@dataclass(frozen=True)
class TopologyManagerConfig:
    """``topologyManagerPolicy``, ``topologyManagerScope`` and the two policy options."""

    policy: str = POLICY_NONE
    scope: str = SCOPE_CONTAINER
    prefer_closest_numa_nodes: bool = False
    max_allowable_numa_nodes: int = DEFAULT_MAX_ALLOWABLE_NUMA_NODES

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise TopologyManagerConfigError(f'unknown policy: "{self.policy}"')
        if self.scope not in SCOPES:
            raise TopologyManagerConfigError(f'unknown scope: "{self.scope}"')
        if self.max_allowable_numa_nodes < DEFAULT_MAX_ALLOWABLE_NUMA_NODES:
            raise TopologyManagerConfigError(MAX_ALLOWABLE_TOO_SMALL)


def parse_policy_option(name: str, value: object) -> tuple[str, bool | int]:
    """One ``topologyManagerPolicyOptions`` entry as the kubelet reads it: the
    :class:`TopologyManagerConfig` field it sets and the value. Raises
    TopologyManagerConfigError with the kubelet's message."""
    if name == OPTION_PREFER_CLOSEST:
        refusal = number_as_option(name, value, "topologyManagerPolicyOptions")
        if refusal is not None:
            raise TopologyManagerConfigError(refusal)
        try:
            return "prefer_closest_numa_nodes", parse_bool(value)
        except ValueError as err:
            raise TopologyManagerConfigError(f'bad value for option "{name}": {err}') from None
    if name == OPTION_MAX_ALLOWABLE:
        try:
            number = atoi(value)
        except ValueError as err:
            raise TopologyManagerConfigError(
                f'unable to convert policy option to integer "{name}": {err}'
            ) from None
        if number < DEFAULT_MAX_ALLOWABLE_NUMA_NODES:
            raise TopologyManagerConfigError(MAX_ALLOWABLE_TOO_SMALL)
        return "max_allowable_numa_nodes", number
    raise TopologyManagerConfigError(f'unknown Topology Manager Policy option: "{name}"')


class HintList(list[TopologyHint]):
    """A hint list that knows its preferred masks, computed once.

    Providers that return long, cached lists (65,535 masks on 16 NUMA nodes) use it so the
    merge does not scan them again on every call. Do not mutate it after construction.
    """

    def __init__(
        self,
        hints: Iterable[TopologyHint] = (),
        *,
        preferred_masks: AbstractSet[int] | None = None,
    ) -> None:
        """Build the list; ``preferred_masks``, when the provider already knows them (they
        must be exactly the masks of the preferred hints, none of them nil), saves the scan."""
        super().__init__(hints)
        if preferred_masks is not None:
            self.preferred_nil = False
            self.preferred_masks = frozenset(preferred_masks)
            return
        raw = {h.numa_affinity for h in self if h.preferred}
        self.preferred_nil = None in raw
        self.preferred_masks = frozenset(m for m in raw if m is not None)


class HintProvider(Protocol):
    """What the CPU and memory managers offer the topology manager."""

    def get_topology_hints(self, pod: PodSpec, container: ContainerSpec) -> HintMap | None:
        """Hints for one container (container scope)."""
        ...

    def get_pod_topology_hints(self, pod: PodSpec) -> HintMap | None:
        """Hints for the whole pod (pod scope)."""
        ...

    def allocate(self, pod: PodSpec, container: ContainerSpec, hint: TopologyHint | None) -> None:
        """Allocate one container with the merged hint; raise ``AdmissionError``."""
        ...

    def allocate_pod(self, pod: PodSpec, hint: TopologyHint | None) -> None:
        """Allocate a pod-level pod once (pod scope); raise ``AdmissionError``."""
        ...


def filter_providers_hints(
    hint_maps: Iterable[HintMap | None],
) -> list[Sequence[TopologyHint]]:
    """``filterProvidersHints``: one hint list per (provider, resource), in provider order.

    A provider with no map (None or empty) or a resource with a None list contributes
    ``[{nil, preferred}]``; an empty list contributes ``[{nil, not preferred}]``.
    """
    out: list[Sequence[TopologyHint]] = []
    for hints in hint_maps:
        if not hints:
            out.append([NO_PREFERENCE])
            continue
        for resource_hints in hints.values():
            if resource_hints is None:
                out.append([NO_PREFERENCE])
            elif not resource_hints:
                out.append([UNSATISFIABLE])
            else:
                out.append(resource_hints)
    return out


def filter_single_numa_hints(
    lists: Sequence[Sequence[TopologyHint]],
) -> list[Sequence[TopologyHint]]:
    """``filterSingleNumaHints``: keep preferred hints that name no node or exactly one."""
    return [
        [
            h
            for h in hints
            if h.preferred and (h.numa_affinity is None or h.numa_affinity.bit_count() == 1)
        ]
        for hints in lists
    ]


def _narrowest_count(hints: Sequence[TopologyHint]) -> int | None:
    best: int | None = None
    for h in hints:
        if h.numa_affinity is None:
            continue
        c = h.numa_affinity.bit_count()
        if best is None or c < best:
            best = c
    return best


def max_of_min_affinity_counts(lists: Sequence[Sequence[TopologyHint]]) -> int:
    """``maxOfMinAffinityCounts``: the widest of the providers' narrowest masks (0 if none)."""
    out = 0
    for hints in lists:
        c = _narrowest_count(hints)
        if c is not None and c > out:
            out = c
    return out


FitKey = Callable[[int], tuple[int, ...]]


def merge_hints(
    lists: Sequence[Sequence[TopologyHint]],
    default_affinity: int,
    fit_key: FitKey,
) -> TopologyHint:
    """``HintMerger.Merge`` over already filtered lists.

    ``fit_key`` orders masks the way ``CompareNUMAAffinityMasks`` does (smaller is fitter):
    see :meth:`TopologyManager.fit_key`.
    """
    if not lists:
        return TopologyHint(default_affinity, True)
    if any(not hints for hints in lists):
        return TopologyHint(default_affinity, False)
    best_pref = _best_preferred(lists, default_affinity, fit_key)
    if best_pref is not None:
        return TopologyHint(best_pref, True)
    target = max_of_min_affinity_counts(lists)
    achievable = {default_affinity}
    for hints in lists:
        masks = {default_affinity if h.numa_affinity is None else h.numa_affinity for h in hints}
        achievable = {a & m for a in achievable for m in masks}
    achievable.discard(0)
    if not achievable:
        return TopologyHint(default_affinity, False)
    return TopologyHint(
        min(achievable, key=lambda m: merged_hint_rank(m, False, target, fit_key)), False
    )


def merged_hint_rank(mask: int, preferred: bool, target: int, fit_key: FitKey) -> tuple[int, ...]:
    """Where a merged hint with a non-empty mask stands in the kubelet's pairwise ``compare``
    (smaller wins; equal ranks mean equal masks, where the kubelet keeps the current one).

    Preferred hints come first, ordered by ``fit_key``. Non-preferred ones are steered towards
    ``target`` (``bestNonPreferredAffinityCount``): that width first, then narrower masks from
    the widest down, then wider masks; ``fit_key`` breaks ties within a width.
    """
    if preferred:
        return (0, 0, 0, *fit_key(mask))
    c = mask.bit_count()
    if c == target:
        return (1, 0, 0, *fit_key(mask))
    if c < target:
        return (1, 1, -c, *fit_key(mask))
    return (1, 2, 0, *fit_key(mask))


def _best_preferred(
    lists: Sequence[Sequence[TopologyHint]], default_affinity: int, fit_key: FitKey
) -> int | None:
    """The fittest merged mask among permutations the kubelet would mark preferred, or None.

    Such a permutation picks one mask ``m`` (or no mask at all) preferred by every list, or a
    preferred nil hint from a list; so the candidates are the intersection of the preferred
    masks of the lists that have no preferred nil hint.
    """
    constraining: list[AbstractSet[int]] = []
    offered: set[int] = set()
    for hints in lists:
        if isinstance(hints, HintList):
            masks: AbstractSet[int] = hints.preferred_masks
            nil = hints.preferred_nil
        else:
            raw = {h.numa_affinity for h in hints if h.preferred}
            masks = {m for m in raw if m is not None}
            nil = None in raw
        if nil:
            offered |= masks
        else:
            constraining.append(masks)
    candidates: set[int]
    if constraining:
        constraining.sort(key=len)
        candidates = set(constraining[0])
        for masks in constraining[1:]:
            candidates &= masks
            if not candidates:
                return None
    else:
        candidates = offered | {default_affinity}
    candidates = {m & default_affinity for m in candidates}
    candidates.discard(0)
    if not candidates:
        return None
    return min(candidates, key=lambda m: merged_hint_rank(m, True, 0, fit_key))


class TopologyManager:
    """Policy, merge and the per-container affinity store of one node's topology manager."""

    def __init__(self, topology: Topology, config: TopologyManagerConfig) -> None:
        if config.policy != POLICY_NONE and topology.num_numa_nodes > (
            config.max_allowable_numa_nodes
        ):
            raise TopologyManagerConfigError(
                f"unsupported on machines with more than {config.max_allowable_numa_nodes} "
                f"NUMA Nodes (this machine has {topology.num_numa_nodes}; raise "
                f'"{OPTION_MAX_ALLOWABLE}")'
            )
        self.topology = topology
        self.config = config
        self.default_affinity = mask_of(topology.numa_ids)
        self._affinity: dict[str, dict[str, TopologyHint]] = {}
        self._use_closest = config.prefer_closest_numa_nodes and (
            config.policy != POLICY_SINGLE_NUMA_NODE
        )
        self._distance_sums: dict[int, int] = {}
        self._no_preference: dict[int, tuple[TopologyHint, bool]] = {}
        """Merge results when no provider has a preference, by number of providers."""

    @property
    def policy(self) -> str:
        """The configured policy name."""
        return self.config.policy

    @property
    def scope(self) -> str:
        """The configured scope name."""
        return self.config.scope

    def fit_key(self, mask: int) -> tuple[int, ...]:
        """Sort key of ``CompareNUMAAffinityMasks``: narrowest, or closest with the option on.

        Closest compares masks of equal width by average distance over all ordered node pairs
        (equal widths have equal pair counts, so the distance sums compare the same way), then
        numerically.
        """
        if not self._use_closest:
            return (mask.bit_count(), mask)
        total = self._distance_sums.get(mask)
        if total is None:
            nodes = [n for n in self.topology.numa_ids if mask >> n & 1]
            total = sum(self.topology.distance(a, b) for a in nodes for b in nodes)
            self._distance_sums[mask] = total
        return (mask.bit_count(), total, mask)

    def merge(self, hint_maps: Iterable[HintMap | None]) -> tuple[TopologyHint, bool]:
        """The policy's ``Merge``: the best hint and whether the pod may be admitted."""
        policy = self.config.policy
        if policy == POLICY_NONE:
            return UNSATISFIABLE, True
        maps = list(hint_maps)
        if any(maps):
            return self._merge(maps)
        # No provider has a preference (e.g. a BestEffort container): same inputs, same answer.
        known = self._no_preference.get(len(maps))
        if known is None:
            known = self._no_preference[len(maps)] = self._merge(maps)
        return known

    def _merge(self, hint_maps: Sequence[HintMap | None]) -> tuple[TopologyHint, bool]:
        policy = self.config.policy
        lists = filter_providers_hints(hint_maps)
        if policy == POLICY_SINGLE_NUMA_NODE:
            lists = filter_single_numa_hints(lists)
        best = merge_hints(lists, self.default_affinity, self.fit_key)
        if policy == POLICY_SINGLE_NUMA_NODE:
            if best.numa_affinity == self.default_affinity:
                best = TopologyHint(None, best.preferred)
            return best, best.preferred
        if policy == POLICY_RESTRICTED:
            return best, best.preferred
        return best, True

    # affinity store ---------------------------------------------------------------------------

    def get_affinity(self, pod_uid: str, name: str) -> TopologyHint:
        """The hint stored for a container, or the zero hint ``{nil, false}``."""
        return self._affinity.get(pod_uid, {}).get(name, UNSATISFIABLE)

    def set_affinity(self, pod_uid: str, name: str, hint: TopologyHint) -> None:
        """Store the hint a container was admitted with."""
        self._affinity.setdefault(pod_uid, {})[name] = hint

    def remove_container(self, pod_uid: str, name: str) -> None:
        """Forget a container's hint."""
        hints = self._affinity.get(pod_uid)
        if hints is not None:
            hints.pop(name, None)
            if not hints:
                del self._affinity[pod_uid]

    def remove_pod(self, pod_uid: str) -> None:
        """Forget every hint of a pod."""
        self._affinity.pop(pod_uid, None)

    def pod_affinity(self, pod_uid: str) -> dict[str, TopologyHint]:
        """Every hint stored for a pod's containers (a copy)."""
        return dict(self._affinity.get(pod_uid, {}))

    def set_pod_affinity(self, pod_uid: str, hints: Mapping[str, TopologyHint]) -> None:
        """Replace the hints stored for a pod's containers (none: forget them)."""
        if hints:
            self._affinity[pod_uid] = dict(hints)
        else:
            self._affinity.pop(pod_uid, None)

    # admission flows --------------------------------------------------------------------------

    def pod_hint(self, pod: PodSpec, providers: Sequence[HintProvider]) -> TopologyHint:
        """Merge the providers' pod hints; raise ``TopologyAffinityError`` on refusal."""
        best, admit = self.merge(p.get_pod_topology_hints(pod) for p in providers)
        if not admit:
            if pod.has_pod_level_resources:
                raise pod_level_topology_affinity_error(POD_LEVEL_POD_SCOPE_MESSAGE)
            raise topology_affinity_error()
        return best

    def container_hint(
        self, pod: PodSpec, container: ContainerSpec, providers: Sequence[HintProvider]
    ) -> TopologyHint:
        """Merge the providers' hints for one container (container scope)."""
        return self._admitted(
            pod, self.merge(p.get_topology_hints(pod, container) for p in providers)
        )

    def no_preference_hint(self, pod: PodSpec, providers: int) -> TopologyHint:
        """:meth:`container_hint` when none of the ``providers`` providers has a preference
        (each would give no map), without asking them."""
        return self._admitted(pod, self.merge((None,) * providers))

    def _admitted(self, pod: PodSpec, merged: tuple[TopologyHint, bool]) -> TopologyHint:
        best, admit = merged
        if not admit:
            if pod.has_pod_level_resources:
                raise pod_level_topology_affinity_error(POD_LEVEL_CONTAINER_SCOPE_MESSAGE)
            raise topology_affinity_error()
        return best

    def admit(self, pod: PodSpec, providers: Sequence[HintProvider]) -> None:
        """The kubelet's ``Admit`` for the configured policy and scope.

        - policy ``none``: every container is allocated with no hint;
        - scope ``container``: merge and allocate container by container (init containers first);
        - scope ``pod``, classic pod: one merge over pod hints, the same hint for every container;
        - scope ``pod``, pod-level pod: one merge, then ``allocate_pod`` once per provider.

        Providers are called in order. Raises ``AdmissionError``; what the providers allocated
        before a failure is the caller's to roll back.
        """
        containers = pod.all_containers()
        if self.config.policy == POLICY_NONE:
            for c in containers:
                for p in providers:
                    p.allocate(pod, c, None)
            return
        if self.config.scope == SCOPE_CONTAINER:
            for c in containers:
                hint = self.container_hint(pod, c, providers)
                self.set_affinity(pod.uid, c.name, hint)
                for p in providers:
                    p.allocate(pod, c, hint)
            return
        hint = self.pod_hint(pod, providers)
        for c in containers:
            self.set_affinity(pod.uid, c.name, hint)
        if pod.has_pod_level_resources:
            for p in providers:
                p.allocate_pod(pod, hint)
            return
        for c in containers:
            for p in providers:
                p.allocate(pod, c, hint)
