"""More Topology Manager vectors, ported from the kubelet's unit tests as data.

Upstream files (kubernetes ``pkg/kubelet/cm/topologymanager``), cases named after the upstream
descriptions; those already in ``test_engine_topology_manager.py`` are not repeated:

- ``bitmask/bitmask_test.go``: 31 (``NewEmptyBitMask`` 1, ``NewBitMask`` 3, ``And`` 6, ``Or`` 6,
  ``Count`` 3, ``GetBits`` 3, ``IsNarrowerThan`` 4, ``IterateBitMasks`` 5). The mutating helpers
  (``Add``, ``Remove``, ``Clear``, ``Fill``, ``IsSet``, ``AnySet``, ``IsEqual``, ``IsEmpty``) have
  no counterpart: our masks are plain integers. Node ids are bounded by the topology model's
  ``MAX_NUMA_NODES`` instead of 64.
- ``numa_info_test.go``: ``TestCalculateAvgDistanceFor`` 5 (the empty-mask case has no
  counterpart: merged masks are never empty), ``TestClosest`` 5. The sysfs readers
  (``TestNUMAInfo``, ``TestGetDistances``, ``TestSplitDistances``) belong to topology discovery.
- ``policy_test.go``: ``TestCompareHintsNarrowest`` 25, ``TestFilterProvidersHints`` 5,
  best-effort ``mergeTestCasesClosestNUMA`` 4 (8 nodes, prefer-closest-numa-nodes).
- ``policy_single_numa_node_test.go``: ``TestPolicySingleNumaNodeFilterHints`` 5,
  ``TestPolicySingleNumaNodeCanAdmitPodResult`` 1; ``policy_best_effort_test.go`` and
  ``policy_restricted_test.go``: ``CanAdmitPodResult`` 2 each.
- ``policy_options_test.go``: ``TestNewTopologyManagerOptions`` 3 (the feature-gate cases do not
  apply: both options are GA in the versions we follow).
- ``topology_manager_test.go``: ``TestNewManager`` 8 (the missing-distances case does not apply:
  our topology always carries distances), ``TestManagerScope`` 3, ``TestGetAffinity`` 1,
  ``TestAdmit`` 14 (each under container and pod scope), ``TestAdmitWithPodLevelResources`` 2
  (the two feature-gate-off cases do not apply: pod-level resource managers are always on).
- ``scope_pod_test.go``: ``TestPodCalculateAffinity`` 4, ``TestPodAccumulateProvidersHints`` 7;
  ``scope_container_test.go``: ``TestContainerCalculateAffinity`` 4,
  ``TestContainerAccumulateProvidersHints`` 7 (the same tables).

The kubelet's ``compare`` is pairwise; our merge ranks merged hints with
``merged_hint_rank``. The ``TestCompareHintsNarrowest`` vectors check that the rank puts the
kubelet's winner first (the current hint wins ties, which only occur between equal masks).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from tm_options import config_from_options

from nri_plrm.engine.bitmask import bits, count, is_narrower_than, iterate_bitmasks, mask_of
from nri_plrm.engine.bitmask import mask_string as s
from nri_plrm.engine.spec import (
    TOPOLOGY_AFFINITY_ERROR,
    AdmissionError,
    ContainerSpec,
    HintMap,
    PodSpec,
    TopologyHint,
)
from nri_plrm.engine.topology_manager import (
    POLICY_BEST_EFFORT,
    POLICY_NONE,
    POLICY_RESTRICTED,
    POLICY_SINGLE_NUMA_NODE,
    SCOPE_CONTAINER,
    SCOPE_POD,
    TopologyManager,
    TopologyManagerConfig,
    TopologyManagerConfigError,
    filter_providers_hints,
    filter_single_numa_hints,
    merge_hints,
    merged_hint_rank,
)
from nri_plrm.topology.model import CPUInfo, Topology


def M(*nodes: int) -> int:
    return mask_of(nodes)


def H(*nodes: int, pref: bool = True) -> TopologyHint:
    return TopologyHint(mask_of(nodes), pref)


NIL_T = TopologyHint(None, True)
NIL_F = TopologyHint(None, False)


def machine(nodes: int, distances: Sequence[Sequence[int]] | None = None) -> Topology:
    table = None
    if distances is not None:
        table = {a: dict(enumerate(row)) for a, row in enumerate(distances)}
    return Topology.build(
        [CPUInfo(cpu=n, core=n, socket=0, numa=n, l3=n) for n in range(nodes)],
        distances=table,
    )


# --- bitmask_test.go --------------------------------------------------------------------------

MASK_STRINGS: list[tuple[str, int, str]] = [
    ("New empty BitMask", M(), "00"),
    ("New BitMask with bit 0 set", M(0), "01"),
    ("New BitMask with bit 1 set", M(1), "10"),
    ("New BitMask with bit 0 and bit 1 set", M(0, 1), "11"),
]


@pytest.mark.parametrize(("name", "mask", "text"), MASK_STRINGS, ids=[c[0] for c in MASK_STRINGS])
def test_bitmask_string(name: str, mask: int, text: str) -> None:
    assert s(mask) == text


AND_OR: list[tuple[str, str, list[list[int]], str]] = [
    ("Mask 11 AND mask 11", "and", [[0, 1], [0, 1]], "11"),
    ("Mask 11 AND mask 10", "and", [[0, 1], [1]], "10"),
    ("Mask 01 AND mask 11", "and", [[0], [0, 1]], "01"),
    ("Mask 11 AND mask 11 AND mask 10", "and", [[0, 1], [0, 1], [1]], "10"),
    ("Mask 01 AND mask 01 AND mask 10 AND mask 11", "and", [[0], [0], [1], [0, 1]], "00"),
    (
        "Mask 1111 AND mask 1110 AND mask 1100 AND mask 1000",
        "and",
        [[0, 1, 2, 3], [1, 2, 3], [2, 3], [3]],
        "1000",
    ),
    ("Mask 01 OR mask 00", "or", [[0], []], "01"),
    ("Mask 10 OR mask 10", "or", [[1], [1]], "10"),
    ("Mask 01 OR mask 10", "or", [[0], [1]], "11"),
    ("Mask 11 OR mask 11", "or", [[0, 1], [0, 1]], "11"),
    ("Mask 01 OR mask 10 OR mask 11", "or", [[0], [1], [0, 1]], "11"),
    ("Mask 1000 OR mask 0100 OR mask 0010 OR mask 0001", "or", [[3], [2], [1], [0]], "1111"),
]


@pytest.mark.parametrize(("name", "op", "masks", "text"), AND_OR, ids=[c[0] for c in AND_OR])
def test_bitmask_and_or(name: str, op: str, masks: list[list[int]], text: str) -> None:
    result = mask_of(masks[0])
    for nodes in masks:
        result = result & mask_of(nodes) if op == "and" else result | mask_of(nodes)
    assert s(result) == text


@pytest.mark.parametrize(
    ("nodes", "expected"),
    [([], 0), ([0], 1), ([0, 1], 2)],
    ids=[
        "Count number of bits set in mask 00",
        "Count number of bits set in mask 01",
        "Count number of bits set in mask 11",
    ],
)
def test_bitmask_count(nodes: list[int], expected: int) -> None:
    assert count(mask_of(nodes)) == expected


@pytest.mark.parametrize(
    ("nodes", "expected"),
    [([], ()), ([0], (0,)), ([0, 1], (0, 1))],
    ids=["Get bits of mask 00", "Get bits of mask 01", "Get bits of mask 11"],
)
def test_bitmask_get_bits(nodes: list[int], expected: tuple[int, ...]) -> None:
    assert bits(mask_of(nodes)) == expected


NARROWER: list[tuple[str, list[int], list[int], bool]] = [
    ("Check narrowness of masks with unequal bits set 1/2", [0], [0, 1], True),
    ("Check narrowness of masks with unequal bits set 2/2", [0, 1], [0], False),
    ("Check narrowness of masks with equal bits set 1/2", [0], [1], True),
    ("Check narrowness of masks with equal bits set 2/2", [1], [0], False),
]


@pytest.mark.parametrize(
    ("name", "first", "second", "expected"), NARROWER, ids=[c[0] for c in NARROWER]
)
def test_bitmask_is_narrower_than(
    name: str, first: list[int], second: list[int], expected: bool
) -> None:
    assert is_narrower_than(mask_of(first), mask_of(second)) is expected


@pytest.mark.parametrize("numbits", [1, 2, 4, 8, 16], ids=lambda n: f"{n} bits")
def test_iterate_bitmasks_counts(numbits: int) -> None:
    masks = list(iterate_bitmasks(range(numbits)))
    assert len(masks) == (1 << numbits) - 1
    assert len(set(masks)) == len(masks)


# --- numa_info_test.go ------------------------------------------------------------------------

FOUR = [[10, 11, 12, 12], [11, 10, 12, 12], [12, 12, 10, 11], [12, 12, 11, 10]]

AVERAGES: list[tuple[str, list[int], list[list[int]], float]] = [
    ("1 NUMA node", [0], [[10]], 10),
    ("2 NUMA node, 1 set in bitmask", [0], [[10, 11], [11, 10]], 10),
    ("2 NUMA node, 2 set in bitmask", [0, 1], [[10, 11], [11, 10]], 10.5),
    ("4 NUMA node, 2 set in bitmask", [0, 2], FOUR, 11),
    ("4 NUMA node, 3 set in bitmask", [0, 2, 3], FOUR, 11.11111111111111),
]


def closest_tm(distances: list[list[int]]) -> TopologyManager:
    return TopologyManager(
        machine(len(distances), distances),
        TopologyManagerConfig(POLICY_BEST_EFFORT, SCOPE_CONTAINER, prefer_closest_numa_nodes=True),
    )


@pytest.mark.parametrize(
    ("name", "nodes", "distances", "average"), AVERAGES, ids=[c[0] for c in AVERAGES]
)
def test_calculate_average_distance(
    name: str, nodes: list[int], distances: list[list[int]], average: float
) -> None:
    width, total, _ = closest_tm(distances).fit_key(mask_of(nodes))
    assert width == len(nodes)
    assert total / (width * width) == average


SAME3 = [[10, 10, 10]] * 3
SAME4 = [[10, 10, 10, 10]] * 4

CLOSEST: list[tuple[str, list[int], list[int], list[list[int]], str]] = [
    (
        "current and candidate length is not the same, current narrower",
        [0],
        [0, 2],
        [[10, 20, 20], [20, 10, 20], [20, 20, 10]],
        "current",
    ),
    (
        "current and candidate length is the same, distance is the same, current more lower "
        "bits set",
        [0, 1],
        [0, 2],
        SAME3,
        "current",
    ),
    (
        "current and candidate length is the same, distance is the same, candidate more lower "
        "bits set",
        [0, 3],
        [0, 2],
        SAME4,
        "candidate",
    ),
    (
        "current and candidate length is the same, candidate average distance is smaller",
        [0, 3],
        [0, 1],
        FOUR,
        "candidate",
    ),
    (
        "current and candidate length is the same, current average distance is smaller",
        [2, 3],
        [0, 3],
        FOUR,
        "current",
    ),
]


@pytest.mark.parametrize(
    ("name", "current", "candidate", "distances", "expected"),
    CLOSEST,
    ids=[c[0] for c in CLOSEST],
)
def test_closest(
    name: str,
    current: list[int],
    candidate: list[int],
    distances: list[list[int]],
    expected: str,
) -> None:
    tm = closest_tm(distances)
    cur, cand = mask_of(current), mask_of(candidate)
    winner = cand if tm.fit_key(cand) < tm.fit_key(cur) else cur
    assert winner == (cur if expected == "current" else cand)


# --- policy_test.go: TestCompareHintsNarrowest --------------------------------------------------


def narrowest(mask: int) -> tuple[int, ...]:
    return TopologyManager(
        machine(4), TopologyManagerConfig(POLICY_BEST_EFFORT, SCOPE_CONTAINER)
    ).fit_key(mask)


COMPARE: list[tuple[str, int, TopologyHint, TopologyHint, str]] = [
    ("!current.Preferred && candidate.Preferred", -1, H(0, pref=False), H(0), "candidate"),
    ("current.Preferred && !candidate.Preferred", -1, H(0), H(0, pref=False), "current"),
    ("current.Preferred && candidate.Preferred (1)", -1, H(0), H(0), "current"),
    ("current.Preferred && candidate.Preferred (2)", -1, H(0, 1), H(0), "candidate"),
    ("current.Preferred && candidate.Preferred (3)", -1, H(0), H(0, 1), "current"),
]
_NP = [
    ("(1.1)", 1, [0, 1], [0, 1], "current"),
    ("(1.2)", 1, [1, 2], [0, 1], "candidate"),
    ("(1.3)", 1, [0, 1], [1, 2], "current"),
    ("(2.1)", 2, [0, 1], [0], "current"),
    ("(2.2)", 2, [0, 1], [0, 1], "current"),
    ("(2.3)", 2, [1, 2], [0, 1], "candidate"),
    ("(2.4)", 2, [0, 1], [1, 2], "current"),
    ("(3a)", 2, [0], [0, 1, 2], "current"),
    ("(3b)", 2, [0], [0, 1], "candidate"),
    ("(3ca.1)", 3, [0], [0, 1], "candidate"),
    ("(3ca.2)", 3, [0], [1, 2], "candidate"),
    ("(3ca.3)", 4, [0, 1], [1, 2, 3], "candidate"),
    ("(3cb)", 4, [1, 2, 3], [0, 1], "current"),
    ("(3cc.1)", 4, [0, 1, 2], [0, 1, 2], "current"),
    ("(3cc.2)", 4, [0, 1, 2], [1, 2, 3], "current"),
    ("(3cc.3)", 4, [1, 2, 3], [0, 1, 2], "candidate"),
]
COMPARE += [
    (
        f"!current.Preferred && !candidate.Preferred {tag}",
        target,
        H(*cur, pref=False),
        H(*cand, pref=False),
        expected,
    )
    for tag, target, cur, cand, expected in _NP
]


@pytest.mark.parametrize(
    ("name", "target", "current", "candidate", "expected"), COMPARE, ids=[c[0] for c in COMPARE]
)
def test_compare_hints_narrowest(
    name: str, target: int, current: TopologyHint, candidate: TopologyHint, expected: str
) -> None:
    assert current.numa_affinity is not None and candidate.numa_affinity is not None

    def rank(h: TopologyHint) -> tuple[int, ...]:
        assert h.numa_affinity is not None
        return merged_hint_rank(h.numa_affinity, h.preferred, target, narrowest)

    winner = candidate if rank(candidate) < rank(current) else current
    assert winner is (current if expected == "current" else candidate)


def test_compare_hints_guards_through_the_merge() -> None:
    """The four guard cases of ``compare`` (empty candidate masks never win, anything beats
    no hint yet), seen through ``merge_hints``."""
    default = M(0, 1)
    # candidate.NUMANodeAffinity.Count() == 0 (1) and (2): the only merged mask is empty
    assert merge_hints([[H(0)], [H(1)]], default, narrowest) == TopologyHint(default, False)
    # current == nil (1) and (2): the first candidate is taken as it is
    assert merge_hints([[H(0)]], default, narrowest) == H(0)
    assert merge_hints([[H(0, pref=False)]], default, narrowest) == H(0, pref=False)


# --- policy_test.go: TestFilterProvidersHints -------------------------------------------------

FILTER: list[tuple[str, list[HintMap | None], list[list[TopologyHint]]]] = [
    ("no providers", [], []),
    ("provider with no preference for any resource", [None], [[NIL_T]]),
    ("provider with no preference for a resource", [{"cpu": None}], [[NIL_T]]),
    ("provider with no possible affinity for a resource", [{"cpu": []}], [[NIL_F]]),
    (
        "several resources from several providers",
        [
            {"cpu": [H(0), H(1)]},
            {"memory": [H(1)], "nvidia.com/gpu": [H(0, pref=False)]},
            None,
        ],
        [[H(0), H(1)], [H(1)], [H(0, pref=False)], [NIL_T]],
    ),
]


@pytest.mark.parametrize(("name", "maps", "expected"), FILTER, ids=[c[0] for c in FILTER])
def test_filter_providers_hints(
    name: str, maps: list[HintMap | None], expected: list[list[TopologyHint]]
) -> None:
    got = [list(h) for h in filter_providers_hints(maps)]
    assert sorted(got, key=repr) == sorted(expected, key=repr)


# --- policy_options_test.go -------------------------------------------------------------------


def test_options_prefer_closest_numa_nodes_true() -> None:
    cfg = config_from_options(
        POLICY_BEST_EFFORT, SCOPE_CONTAINER, {"prefer-closest-numa-nodes": "true"}
    )
    assert cfg.prefer_closest_numa_nodes is True


def test_options_empty() -> None:
    cfg = config_from_options(POLICY_BEST_EFFORT, SCOPE_CONTAINER, {})
    assert cfg == TopologyManagerConfig(POLICY_BEST_EFFORT, SCOPE_CONTAINER)


def test_options_fail_to_parse() -> None:
    with pytest.raises(TopologyManagerConfigError, match="bad value for option"):
        config_from_options(
            POLICY_BEST_EFFORT, SCOPE_CONTAINER, {"prefer-closest-numa-nodes": "not a boolean"}
        )


# --- topology_manager_test.go -----------------------------------------------------------------

NEW_MANAGER: list[tuple[str, str, dict[str, str], int, str | None]] = [
    ("Policy is set to none", POLICY_NONE, {}, 1, None),
    ("Policy is set to best-effort", POLICY_BEST_EFFORT, {}, 1, None),
    ("Policy is set to restricted", POLICY_RESTRICTED, {}, 1, None),
    ("Policy is set to single-numa-node", POLICY_SINGLE_NUMA_NODE, {}, 1, None),
    ("Policy is set to unknown", "unknown", {}, 1, 'unknown policy: "unknown"'),
    (
        "Unknown policy name best-effort policy",
        POLICY_BEST_EFFORT,
        {"unknown-option": "true"},
        1,
        "unknown Topology Manager Policy option:",
    ),
    (
        "Unknown policy name restricted policy",
        POLICY_RESTRICTED,
        {"unknown-option": "true"},
        1,
        "unknown Topology Manager Policy option:",
    ),
    (
        "more than 8 NUMA nodes",
        POLICY_BEST_EFFORT,
        {},
        9,
        "unsupported on machines with more than 8 NUMA Nodes",
    ),
]


@pytest.mark.parametrize(
    ("name", "policy", "options", "nodes", "error"), NEW_MANAGER, ids=[c[0] for c in NEW_MANAGER]
)
def test_new_manager(
    name: str, policy: str, options: dict[str, str], nodes: int, error: str | None
) -> None:
    if error is None:
        cfg = config_from_options(policy, SCOPE_CONTAINER, options)
        assert TopologyManager(machine(nodes), cfg).policy == policy
        return
    with pytest.raises(TopologyManagerConfigError) as err:
        cfg = config_from_options(policy, SCOPE_CONTAINER, options)
        TopologyManager(machine(nodes), cfg)
    assert error in str(err.value)


@pytest.mark.parametrize(
    ("scope", "error"),
    [("container", None), ("pod", None), ("unknown", 'unknown scope: "unknown"')],
    ids=[
        "Topology Manager Scope is set to container",
        "Topology Manager Scope is set to pod",
        "Topology Manager Scope is set to unknown",
    ],
)
def test_manager_scope(scope: str, error: str | None) -> None:
    if error is None:
        tm = TopologyManager(machine(1), TopologyManagerConfig(POLICY_BEST_EFFORT, scope))
        assert tm.scope == scope
        return
    with pytest.raises(TopologyManagerConfigError) as err:
        TopologyManagerConfig(POLICY_BEST_EFFORT, scope)
    assert error in str(err.value)


def test_get_affinity_case1() -> None:
    tm = TopologyManager(machine(2), TopologyManagerConfig(POLICY_BEST_EFFORT, SCOPE_CONTAINER))
    assert tm.get_affinity("0aafa4c4-38e8-11e9-bcb1-a4bf01040474", "nginx") == NIL_F


class TrackingProvider:
    """A hint provider with fixed hints that records which calls the topology manager made."""

    def __init__(self, hints: HintMap | None) -> None:
        self.hints = hints
        self.called: set[str] = set()

    def get_topology_hints(self, pod: PodSpec, container: ContainerSpec) -> HintMap | None:
        self.called.add("container_hints")
        return self.hints

    def get_pod_topology_hints(self, pod: PodSpec) -> HintMap | None:
        self.called.add("pod_hints")
        return self.hints

    def allocate(self, pod: PodSpec, container: ContainerSpec, hint: TopologyHint | None) -> None:
        self.called.add("allocate")

    def allocate_pod(self, pod: PodSpec, hint: TopologyHint | None) -> None:
        self.called.add("allocate_pod")


def qos_pod(qos: str) -> PodSpec:
    """A one-container pod of the given QoS class (the topology manager does not look at it;
    the providers' hints decide)."""
    if qos == "BestEffort":
        c = ContainerSpec("c")
    elif qos == "Burstable":
        c = ContainerSpec("c", requests={"cpu": 1000})
    else:
        c = ContainerSpec(
            "c", requests={"cpu": 1000, "memory": 1 << 30}, limits={"cpu": 1000, "memory": 1 << 30}
        )
    return PodSpec(uid=f"pod-{qos}", containers=(c,))


PREF_0 = {"resource": [H(0), H(0, 1, pref=False)]}
PREF_BOTH = {"resource": [H(0), H(1), H(0, 1, pref=False)]}
NO_PREF = {"resource": [H(0, 1, pref=False)]}

ADMIT: list[tuple[str, str, str, list[HintMap | None], bool]] = [
    ("QOSClass set as BestEffort. None Policy. No Hints.", "BestEffort", POLICY_NONE, [], True),
    ("QOSClass set as Guaranteed. None Policy. No Hints.", "Guaranteed", POLICY_NONE, [], True),
    (
        "QOSClass set as BestEffort. single-numa-node Policy. No Hints.",
        "BestEffort",
        POLICY_SINGLE_NUMA_NODE,
        [None],
        True,
    ),
    (
        "QOSClass set as BestEffort. Restricted Policy. No Hints.",
        "BestEffort",
        POLICY_RESTRICTED,
        [None],
        True,
    ),
    (
        "QOSClass set as Guaranteed. BestEffort Policy. Preferred Affinity.",
        "Guaranteed",
        POLICY_BEST_EFFORT,
        [PREF_0],
        True,
    ),
    (
        "QOSClass set as Guaranteed. BestEffort Policy. More than one Preferred Affinity.",
        "Guaranteed",
        POLICY_BEST_EFFORT,
        [PREF_BOTH],
        True,
    ),
    (
        "QOSClass set as Burstable. BestEffort Policy. More than one Preferred Affinity.",
        "Burstable",
        POLICY_BEST_EFFORT,
        [PREF_BOTH],
        True,
    ),
    (
        "QOSClass set as Guaranteed. BestEffort Policy. No Preferred Affinity.",
        "Guaranteed",
        POLICY_BEST_EFFORT,
        [NO_PREF],
        True,
    ),
    (
        "QOSClass set as Guaranteed. Restricted Policy. Preferred Affinity.",
        "Guaranteed",
        POLICY_RESTRICTED,
        [PREF_0],
        True,
    ),
    (
        "QOSClass set as Burstable. Restricted Policy. Preferred Affinity.",
        "Burstable",
        POLICY_RESTRICTED,
        [PREF_0],
        True,
    ),
    (
        "QOSClass set as Guaranteed. Restricted Policy. More than one Preferred affinity.",
        "Guaranteed",
        POLICY_RESTRICTED,
        [PREF_BOTH],
        True,
    ),
    (
        "QOSClass set as Burstable. Restricted Policy. More than one Preferred affinity.",
        "Burstable",
        POLICY_RESTRICTED,
        [PREF_BOTH],
        True,
    ),
    (
        "QOSClass set as Guaranteed. Restricted Policy. No Preferred affinity.",
        "Guaranteed",
        POLICY_RESTRICTED,
        [NO_PREF],
        False,
    ),
    (
        "QOSClass set as Burstable. Restricted Policy. No Preferred affinity.",
        "Burstable",
        POLICY_RESTRICTED,
        [NO_PREF],
        False,
    ),
]


@pytest.mark.parametrize("scope", [SCOPE_CONTAINER, SCOPE_POD])
@pytest.mark.parametrize(
    ("name", "qos", "policy", "hints", "expected"), ADMIT, ids=[c[0] for c in ADMIT]
)
def test_admit(
    scope: str, name: str, qos: str, policy: str, hints: list[HintMap | None], expected: bool
) -> None:
    tm = TopologyManager(machine(2), TopologyManagerConfig(policy, scope))
    providers = [TrackingProvider(h) for h in hints]
    pod = qos_pod(qos)
    if expected:
        tm.admit(pod, providers)
        assert all("allocate" in p.called for p in providers)
        return
    with pytest.raises(AdmissionError) as err:
        tm.admit(pod, providers)
    assert err.value.reason == TOPOLOGY_AFFINITY_ERROR
    assert all("allocate" not in p.called for p in providers)


PLRM_POD = PodSpec(
    uid="plrm",
    containers=(ContainerSpec("c1", requests={"cpu": 2000}),),
    requests={"cpu": 2000},
)


@pytest.mark.parametrize(
    ("name", "scope", "expected_calls"),
    [
        (
            "pod scope, feature enabled, uses pod-level flow",
            SCOPE_POD,
            {"pod_hints", "allocate_pod"},
        ),
        (
            "container scope, feature enabled, uses container-level flow",
            SCOPE_CONTAINER,
            {"container_hints", "allocate"},
        ),
    ],
)
def test_admit_with_pod_level_resources(name: str, scope: str, expected_calls: set[str]) -> None:
    tm = TopologyManager(machine(2), TopologyManagerConfig(POLICY_RESTRICTED, scope))
    tracker = TrackingProvider({"resource": [H(0)]})
    tm.admit(PLRM_POD, [tracker])
    assert tracker.called == expected_calls


# --- scope_pod_test.go ------------------------------------------------------------------------


class RecordingMerge(TopologyManager):
    """The manager with its policy's merge input recorded (upstream swaps in a policy that
    records it)."""

    seen: list[HintMap | None] | None = None

    def merge(self, hint_maps: Any) -> tuple[TopologyHint, bool]:
        self.seen = list(hint_maps)
        return super().merge(self.seen)


ASSORTED: list[HintMap | None] = [
    {
        "resource-1/A": [H(0), H(0, 1, pref=False)],
        "resource-1/B": [H(1), H(1, 2, pref=False)],
    },
    {
        "resource-2/A": [H(2), H(3, 4, pref=False)],
        "resource-2/B": [H(2), H(3, 4, pref=False)],
    },
    {"resource-3": None},
]
ZERO = TopologyHint(None, False)

POD_ACCUMULATE: list[tuple[str, list[HintMap | None]]] = [
    ("No hint providers", []),
    ("HintProvider returns empty non-nil map[string][]TopologyHint", [{}]),
    ("HintProvider returns -nil map[string][]TopologyHint from provider", [{"resource": None}]),
    ("Assorted HintProviders", ASSORTED),
    (
        "2 HintProviders with 1 resource returns hints",
        [{"resource1": [ZERO]}, {"resource2": [ZERO]}],
    ),
    ("2 HintProviders 1 with 1 resource 1 with nil hints", [{"resource1": [ZERO]}, None]),
    ("2 HintProviders 1 with 1 resource 1 empty hints", [{"resource1": [ZERO]}, {}]),
    ("HintProvider with 2 resources returns hints", [{"resource1": [ZERO], "resource2": [ZERO]}]),
]


@pytest.mark.parametrize("scope", [SCOPE_POD, SCOPE_CONTAINER])
@pytest.mark.parametrize(("name", "maps"), POD_ACCUMULATE, ids=[c[0] for c in POD_ACCUMULATE])
def test_scope_hands_every_providers_hints_to_the_policy(
    scope: str, name: str, maps: list[HintMap | None]
) -> None:
    """``TestPodCalculateAffinity``/``TestContainerCalculateAffinity`` (4 each) and
    ``TestPodAccumulateProvidersHints``/``TestContainerAccumulateProvidersHints`` (7 each; the
    first three cases of both tables coincide): the policy sees each provider's hints as
    returned, in provider order."""
    nodes = 5 if maps is ASSORTED else 2
    tm = RecordingMerge(machine(nodes), TopologyManagerConfig(POLICY_BEST_EFFORT, scope))
    providers = [TrackingProvider(m) for m in maps]
    pod = PodSpec(uid="p", containers=(ContainerSpec("c"),))
    if scope == SCOPE_POD:
        tm.pod_hint(pod, providers)
    else:
        tm.container_hint(pod, pod.containers[0], providers)
    assert tm.seen == maps


# --- policy_single_numa_node_test.go: TestPolicySingleNumaNodeFilterHints ---------------------

SINGLE_FILTER: list[tuple[str, list[list[TopologyHint]], list[list[TopologyHint]]]] = [
    ("filter empty resources", [], []),
    ("filter hints with nil socket mask 1/2", [[NIL_F], [NIL_T]], [[], [NIL_T]]),
    (
        "filter hints with nil socket mask 2/2",
        [[H(0), NIL_F], [H(1), NIL_T]],
        [[H(0)], [H(1), NIL_T]],
    ),
    (
        "filter hints with empty resource socket mask",
        [[H(1), H(0), NIL_F], []],
        [[H(1), H(0)], []],
    ),
    (
        "filter hints with wide sockemask",
        [
            [H(0), H(1), H(1, 2, pref=False), H(0, 1, 2, pref=False), NIL_F],
            [H(1, 2, pref=False), H(0, 1, 2, pref=False), H(0, 2, pref=False), H(3, pref=False)],
            [H(1, 2, pref=False), H(0, 1, 2, pref=False), H(0, 2, pref=False)],
        ],
        [[H(0), H(1)], [], []],
    ),
]


@pytest.mark.parametrize(
    ("name", "lists", "expected"), SINGLE_FILTER, ids=[c[0] for c in SINGLE_FILTER]
)
def test_single_numa_node_filter_hints(
    name: str, lists: list[list[TopologyHint]], expected: list[list[TopologyHint]]
) -> None:
    assert [list(h) for h in filter_single_numa_hints(lists)] == expected


# --- canAdmitPodResult (policy_best_effort/restricted/single_numa_node_test.go) ---------------


@pytest.mark.parametrize(
    ("policy", "preferred", "admit"),
    [
        (POLICY_BEST_EFFORT, True, True),
        (POLICY_BEST_EFFORT, False, True),
        (POLICY_RESTRICTED, True, True),
        (POLICY_RESTRICTED, False, False),
        (POLICY_SINGLE_NUMA_NODE, False, False),
    ],
    ids=[
        "best-effort: Preferred is set to true in topology hints",
        "best-effort: Preferred is set to false in topology hints",
        "restricted: Preferred is set to true in topology hints",
        "restricted: Preferred is set to false in topology hints",
        "single-numa-node: Preferred is set to false in topology hints",
    ],
)
def test_can_admit_pod_result(policy: str, preferred: bool, admit: bool) -> None:
    """The policy admits a merge whose best hint has this ``Preferred`` (a single provider
    offering exactly that hint makes the merge return it)."""
    tm = TopologyManager(machine(2), TopologyManagerConfig(policy, SCOPE_CONTAINER))
    best, admitted = tm.merge([{"resource": [TopologyHint(None, preferred)]}])
    assert best.preferred is preferred
    assert admitted is admit


# --- policy_test.go: best-effort mergeTestCasesClosestNUMA (8 nodes, prefer-closest) ----------

EIGHT = [
    [10, 11, 12, 12, 30, 30, 30, 30],
    [11, 10, 12, 12, 30, 30, 30, 30],
    [12, 12, 10, 11, 30, 30, 30, 30],
    [12, 12, 11, 10, 30, 30, 30, 30],
    [30, 30, 30, 30, 10, 11, 12, 12],
    [30, 30, 30, 30, 11, 10, 12, 12],
    [30, 30, 30, 30, 12, 12, 10, 11],
    [30, 30, 30, 30, 12, 12, 13, 10],
]

CLOSEST_MERGE: list[tuple[str, list[HintMap | None], TopologyHint]] = [
    (
        "Two providers, 2 hints each, same mask (some with different bits), same preferred",
        [{"resource1": [H(0, 4), H(0, 2)]}, {"resource2": [H(0, 4), H(0, 2)]}],
        H(0, 2),
    ),
    (
        "Two providers, 2 hints each, different mask",
        [{"resource1": [H(4), H(0, 2)]}, {"resource2": [H(4), H(0, 2)]}],
        H(4),
    ),
    (
        "bestNonPreferredAffinityCount (5)",
        [
            {"resource1": [H(0, 1, 2, 3, pref=False), H(0, 1, pref=False)]},
            {"resource2": [H(1, 2, pref=False), H(2, 3, pref=False)]},
        ],
        H(2, 3, pref=False),
    ),
    (
        "bestNonPreferredAffinityCount (6)",
        [
            {"resource1": [H(0, 1, 2, 3, pref=False), H(0, 1, pref=False)]},
            {
                "resource2": [
                    H(1, 2, 3, pref=False),
                    H(1, 2, pref=False),
                    H(1, 3, pref=False),
                    H(2, 3, pref=False),
                ]
            },
        ],
        H(2, 3, pref=False),
    ),
]


@pytest.mark.parametrize(
    ("name", "maps", "expected"), CLOSEST_MERGE, ids=[c[0] for c in CLOSEST_MERGE]
)
def test_best_effort_merge_closest_numa(
    name: str, maps: list[HintMap | None], expected: TopologyHint
) -> None:
    tm = TopologyManager(
        machine(8, EIGHT),
        TopologyManagerConfig(POLICY_BEST_EFFORT, SCOPE_CONTAINER, prefer_closest_numa_nodes=True),
    )
    assert tm.merge(maps) == (expected, True)
