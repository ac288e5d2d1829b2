"""Topology Manager: bitmask helpers, the kubelet's merge vectors, policies, options, scopes.

Ported upstream cases (kubernetes ``pkg/kubelet/cm/topologymanager``):
- ``policy_test.go`` ``commonPolicyMergeTestCases``: 9 (run under best-effort, restricted and
  single-numa-node = 27 checks); best-effort ``mergeTestCases``: 16 (also run for restricted);
  ``mergeTestCasesNoPolicies``: 2; single-numa-node ``mergeTestCases``: 12;
  ``TestMaxOfMinAffinityCounts``: 7.
- spec §7.6 table: 16 rows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tm_options import config_from_options
from tm_reference import narrowest, reference_merge

from nri_plrm.engine.bitmask import (
    bits,
    is_narrower_than,
    iterate_bitmasks,
    mask_of,
    mask_string,
)
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
    POLICY_RESTRICTED,
    POLICY_SINGLE_NUMA_NODE,
    TopologyManager,
    TopologyManagerConfig,
    TopologyManagerConfigError,
    filter_providers_hints,
    filter_single_numa_hints,
    max_of_min_affinity_counts,
)
from nri_plrm.topology.model import CPUInfo, Topology


def numa_machine(nodes: int, distances: Mapping[int, Mapping[int, int]] | None = None) -> Topology:
    """One CPU per NUMA node (enough for the merge, which only looks at node ids)."""
    return Topology.build(
        [CPUInfo(cpu=n, core=n, socket=0, numa=n, l3=n) for n in range(nodes)],
        distances=distances,
    )


def H(*nodes: int, pref: bool = True) -> TopologyHint:
    return TopologyHint(mask_of(nodes), pref)


NIL_T = TopologyHint(None, True)
NIL_F = TopologyHint(None, False)
ALL = "all"

Provider = Mapping[str, Sequence[TopologyHint] | None] | None


def merge(policy: str, nodes: int, providers: Sequence[Provider]) -> tuple[TopologyHint, bool]:
    tm = TopologyManager(numa_machine(nodes), TopologyManagerConfig(policy, "container"))
    maps: list[HintMap | None] = [
        None if p is None else {k: (None if v is None else list(v)) for k, v in p.items()}
        for p in providers
    ]
    return tm.merge(maps)


def expect(nodes: int, expected: tuple[Any, bool]) -> TopologyHint:
    mask, pref = expected
    if mask == ALL:
        return TopologyHint(mask_of(range(nodes)), pref)
    if mask is None:
        return TopologyHint(None, pref)
    return TopologyHint(mask_of(mask), pref)


# --- bitmask -------------------------------------------------------------------------------


def test_iterate_bitmasks_order() -> None:
    assert [bits(m) for m in iterate_bitmasks([0, 1, 2])] == [
        (0,),
        (1,),
        (2,),
        (0, 1),
        (0, 2),
        (1, 2),
        (0, 1, 2),
    ]


def test_is_narrower_than() -> None:
    assert is_narrower_than(mask_of([1]), mask_of([0, 1]))
    assert is_narrower_than(mask_of([0, 1]), mask_of([0, 2]))
    assert not is_narrower_than(mask_of([0, 2]), mask_of([0, 1]))
    assert not is_narrower_than(mask_of([0]), mask_of([0]))


def test_mask_string_matches_kubelet() -> None:
    assert mask_string(1) == "01"
    assert mask_string(2) == "10"
    assert mask_string(3) == "11"
    assert mask_string(5) == "0101"
    assert mask_string(0) == "00"


def test_mask_of_rejects_negative() -> None:
    with pytest.raises(ValueError, match="numa node id -1"):
        mask_of([-1])


# --- upstream policy_test.go ------------------------------------------------------------------

COMMON: list[tuple[str, list[Provider], tuple[Any, bool]]] = [
    ("same mask, both preferred 1/2", [{"r1": [H(0)]}, {"r2": [H(0)]}], ((0,), True)),
    ("same mask, both preferred 2/2", [{"r1": [H(1)]}, {"r2": [H(1)]}], ((1,), True)),
    ("1 no hints, 1 single hint preferred 1/2", [{}, {"r": [H(0)]}], ((0,), True)),
    ("1 no hints, 1 single hint preferred 2/2", [{}, {"r": [H(1)]}], ((1,), True)),
    ("1 with 2 hints, 1 single matching 1/2", [{"r1": [H(0), H(1)]}, {"r2": [H(0)]}], ((0,), True)),
    ("1 with 2 hints, 1 single matching 2/2", [{"r1": [H(0), H(1)]}, {"r2": [H(1)]}], ((1,), True)),
    (
        "both with 2 hints, matching narrower preferred hint from both",
        [{"r1": [H(0), H(1)]}, {"r2": [H(0), H(0, 1, pref=False)]}],
        ((0,), True),
    ),
    (
        "less narrow preferred hints are chosen over narrower non-preferred hints",
        [{"r1": [H(1), H(0, 1, pref=False)]}, {"r2": [H(0), H(1), H(0, 1, pref=False)]}],
        ((1,), True),
    ),
    (
        "multiple resources, same provider",
        [{"r1": [H(1), H(0, 1, pref=False)], "r2": [H(0), H(1), H(0, 1, pref=False)]}],
        ((1,), True),
    ),
]

BEST_EFFORT: list[tuple[str, list[Provider], tuple[Any, bool]]] = [
    (
        "2 hints each, same mask (some with different bits), same preferred",
        [{"r1": [H(0, 1), H(0, 2)]}, {"r2": [H(0, 1), H(0, 2)]}],
        ((0, 1), True),
    ),
    ("TopologyHint not set", [], (ALL, True)),
    ("empty non-nil map", [{}], (ALL, True)),
    ("nil list from provider", [{"r": None}], (ALL, True)),
    ("empty list from provider", [{"r": []}], (ALL, False)),
    ("single nil preferred hint", [{"r": [NIL_T]}], (ALL, True)),
    ("single nil non-preferred hint", [{"r": [NIL_F]}], (ALL, False)),
    ("1 hint each, no common mask", [{"r1": [H(0)]}, {"r2": [H(1)]}], (ALL, False)),
    (
        "same mask, 1 preferred 1 not 1/2",
        [{"r1": [H(0)]}, {"r2": [H(0, pref=False)]}],
        ((0,), False),
    ),
    (
        "same mask, 1 preferred 1 not 2/2",
        [{"r1": [H(1)]}, {"r2": [H(1, pref=False)]}],
        ((1,), False),
    ),
    ("1 wider mask, both preferred 1/2", [{"r1": [H(0)]}, {"r2": [H(0, 1)]}], ((0,), False)),
    (
        "1 with 2 hints, 1 with single non-preferred hint matching",
        [{"r1": [H(0), H(1)]}, {"r2": [H(0, 1, pref=False)]}],
        ((0,), False),
    ),
    ("1 wider mask, both preferred 2/2", [{"r1": [H(1)]}, {"r2": [H(0, 1)]}], ((1,), False)),
    (
        "bestNonPreferredAffinityCount (1)",
        [{"r1": [H(0, 1, 2, 3, pref=False), H(0, 1, pref=False)]}, {"r2": [H(0, 1, pref=False)]}],
        ((0, 1), False),
    ),
    (
        "bestNonPreferredAffinityCount (2)",
        [{"r1": [H(0, 1, 2, 3, pref=False), H(0, 1, pref=False)]}, {"r2": [H(0, 3, pref=False)]}],
        ((0, 3), False),
    ),
    (
        "bestNonPreferredAffinityCount (3)",
        [{"r1": [H(0, 1, 2, 3, pref=False), H(0, 1, pref=False)]}, {"r2": [H(1, 2, pref=False)]}],
        ((1, 2), False),
    ),
    (
        "bestNonPreferredAffinityCount (4)",
        [{"r1": [H(0, 1, 2, 3, pref=False), H(0, 1, pref=False)]}, {"r2": [H(2, 3, pref=False)]}],
        ((2, 3), False),
    ),
]

NO_POLICIES: list[tuple[str, list[Provider], tuple[Any, bool]]] = [
    (
        "bestNonPreferredAffinityCount (5)",
        [
            {"r1": [H(0, 1, 2, 3, pref=False), H(0, 1, pref=False)]},
            {"r2": [H(1, 2, pref=False), H(2, 3, pref=False)]},
        ],
        ((1, 2), False),
    ),
    (
        "bestNonPreferredAffinityCount (6)",
        [
            {"r1": [H(0, 1, 2, 3, pref=False), H(0, 1, pref=False)]},
            {
                "r2": [
                    H(1, 2, 3, pref=False),
                    H(1, 2, pref=False),
                    H(1, 3, pref=False),
                    H(2, 3, pref=False),
                ]
            },
        ],
        ((1, 2), False),
    ),
]

SINGLE_NUMA: list[tuple[str, list[Provider], tuple[Any, bool]]] = [
    ("TopologyHint not set", [], (None, True)),
    ("empty non-nil map", [{}], (None, True)),
    ("nil list from provider", [{"r": None}], (None, True)),
    ("empty list from provider", [{"r": []}], (None, False)),
    ("single nil preferred hint", [{"r": [NIL_T]}], (None, True)),
    ("single nil non-preferred hint", [{"r": [NIL_F]}], (None, False)),
    ("1 hint each, no common mask", [{"r1": [H(0)]}, {"r2": [H(1)]}], (None, False)),
    (
        "same mask, 1 preferred 1 not 1/2",
        [{"r1": [H(0)]}, {"r2": [H(0, pref=False)]}],
        (None, False),
    ),
    (
        "same mask, 1 preferred 1 not 2/2",
        [{"r1": [H(1)]}, {"r2": [H(1, pref=False)]}],
        (None, False),
    ),
    (
        "1 with 2 hints, 1 with single non-preferred hint matching",
        [{"r1": [H(0), H(1)]}, {"r2": [H(0, 1, pref=False)]}],
        (None, False),
    ),
    (
        "Single NUMA hint generation",
        [{"r1": [H(0, 1)], "r2": [H(0), H(1), H(0, 1, pref=False)]}],
        (None, False),
    ),
    ("One no-preference provider", [{"r1": [H(0), H(1), H(0, 1, pref=False)]}, None], ((0,), True)),
]


@pytest.mark.parametrize("policy", [POLICY_BEST_EFFORT, POLICY_RESTRICTED, POLICY_SINGLE_NUMA_NODE])
@pytest.mark.parametrize(("name", "providers", "expected"), COMMON, ids=[c[0] for c in COMMON])
def test_common_policy_merge(
    policy: str, name: str, providers: list[Provider], expected: tuple[Any, bool]
) -> None:
    best, admit = merge(policy, 2, providers)
    assert best == expect(2, expected), name
    assert admit


@pytest.mark.parametrize("policy", [POLICY_BEST_EFFORT, POLICY_RESTRICTED])
@pytest.mark.parametrize(
    ("name", "providers", "expected"),
    BEST_EFFORT + NO_POLICIES,
    ids=[c[0] for c in BEST_EFFORT + NO_POLICIES],
)
def test_best_effort_and_restricted_merge(
    policy: str, name: str, providers: list[Provider], expected: tuple[Any, bool]
) -> None:
    best, admit = merge(policy, 4, providers)
    assert best == expect(4, expected), name
    assert admit == (True if policy == POLICY_BEST_EFFORT else best.preferred)


@pytest.mark.parametrize(
    ("name", "providers", "expected"), SINGLE_NUMA, ids=[c[0] for c in SINGLE_NUMA]
)
def test_single_numa_node_merge(
    name: str, providers: list[Provider], expected: tuple[Any, bool]
) -> None:
    best, admit = merge(POLICY_SINGLE_NUMA_NODE, 2, providers)
    assert best == expect(2, expected), name
    assert admit == best.preferred


@pytest.mark.parametrize(
    ("lists", "expected"),
    [
        ([], 0),
        ([[TopologyHint(0, True)]], 0),
        ([[H(0)]], 1),
        ([[H(0, 1)]], 2),
        ([[H(0, 1), H(0, 1, 2)]], 2),
        ([[H(0, 1), H(0, 1, 2)], [H(0, 1, 2)]], 3),
        ([[H(0, 1), H(0, 1, 2)], [H(0, 1, 2), H(0, 1, 2, 3)]], 3),
    ],
)
def test_max_of_min_affinity_counts(lists: list[list[TopologyHint]], expected: int) -> None:
    assert max_of_min_affinity_counts(lists) == expected


# --- spec §7.6 -------------------------------------------------------------------------------

SPEC_76: list[tuple[str, list[Provider], str, tuple[Any, bool], bool]] = [
    ("row1", [{"r1": [H(1)]}, {"r2": [H(0, 1)]}], POLICY_BEST_EFFORT, ((1,), False), True),
    ("row1r", [{"r1": [H(1)]}, {"r2": [H(0, 1)]}], POLICY_RESTRICTED, ((1,), False), False),
    (
        "row2",
        [{"r1": [H(0, 1, 2, 3, pref=False), H(0, 1, pref=False)]}, {"r2": [H(0, 1, pref=False)]}],
        POLICY_BEST_EFFORT,
        ((0, 1), False),
        True,
    ),
    (
        "row3",
        [
            {"r1": [H(0, 1, 2, 3, pref=False), H(0, 1, pref=False)]},
            {"r2": [H(1, 2, pref=False), H(2, 3, pref=False)]},
        ],
        POLICY_BEST_EFFORT,
        ((1, 2), False),
        True,
    ),
    (
        "row4",
        [
            {"r1": [H(0, 1, 2, 3, pref=False), H(0, 1, pref=False)]},
            {
                "r2": [
                    H(1, 2, 3, pref=False),
                    H(1, 2, pref=False),
                    H(1, 3, pref=False),
                    H(2, 3, pref=False),
                ]
            },
        ],
        POLICY_BEST_EFFORT,
        ((1, 2), False),
        True,
    ),
    (
        "row5",
        [{"r1": [H(0, 1)]}, {"r2": [H(0), H(1), H(0, 1, pref=False)]}],
        POLICY_SINGLE_NUMA_NODE,
        (None, False),
        False,
    ),
    (
        "row6",
        [{"r1": [H(0), H(1), H(0, 1, pref=False)]}, None],
        POLICY_SINGLE_NUMA_NODE,
        ((0,), True),
        True,
    ),
    ("row7", [{"r1": [H(0)]}, {"r2": [H(1)]}], POLICY_SINGLE_NUMA_NODE, (None, False), False),
    (
        "row8",
        [{"r1": [H(0)]}, {"r2": [H(0, pref=False)]}],
        POLICY_SINGLE_NUMA_NODE,
        (None, False),
        False,
    ),
    (
        "row9",
        [{"cpu": [H(0), H(1), H(0, 1, pref=False)]}, {"device": [H(1)]}],
        POLICY_RESTRICTED,
        ((1,), True),
        True,
    ),
    ("row10", [{"cpu": [H(0, 1)]}, {"device": [H(0)]}], POLICY_BEST_EFFORT, ((0,), False), True),
    ("row11", [{"cpu": [H(0, 1)]}, {"device": [H(0)]}], POLICY_RESTRICTED, ((0,), False), False),
    (
        "row12",
        [{"cpu": [H(0, 1)]}, {"device": [H(0)]}],
        POLICY_SINGLE_NUMA_NODE,
        (None, False),
        False,
    ),
    ("row13", [{"cpu": []}], POLICY_BEST_EFFORT, ((0, 1), False), True),
    ("row14a", [{"cpu": []}], POLICY_RESTRICTED, ((0, 1), False), False),
    ("row14b", [{"cpu": []}], POLICY_SINGLE_NUMA_NODE, (None, False), False),
    ("row15", [None, None], POLICY_RESTRICTED, ((0, 1), True), True),
    ("row16", [], POLICY_SINGLE_NUMA_NODE, (None, True), True),
]


@pytest.mark.parametrize(
    ("name", "providers", "policy", "expected", "admit"), SPEC_76, ids=[r[0] for r in SPEC_76]
)
def test_spec_merge_table(
    name: str, providers: list[Provider], policy: str, expected: tuple[Any, bool], admit: bool
) -> None:
    nodes = 4 if name in ("row2", "row3", "row4") else 2
    best, ok = merge(policy, nodes, providers)
    assert best == expect(nodes, expected)
    assert ok is admit


# --- prefer-closest-numa-nodes ------------------------------------------------------------------


def test_prefer_closest_picks_lower_average_distance() -> None:
    # nodes 0,1 far apart (30), nodes 2,3 close (11); both pairs equally wide
    far = {
        0: {0: 10, 1: 30, 2: 20, 3: 20},
        1: {0: 30, 1: 10, 2: 20, 3: 20},
        2: {0: 20, 1: 20, 2: 10, 3: 11},
        3: {0: 20, 1: 20, 2: 11, 3: 10},
    }
    topo = numa_machine(4, far)
    hints: list[HintMap | None] = [{"cpu": [H(0, 1), H(2, 3)]}]
    narrow = TopologyManager(topo, TopologyManagerConfig(POLICY_BEST_EFFORT, "container"))
    close = TopologyManager(
        topo, TopologyManagerConfig(POLICY_BEST_EFFORT, "container", prefer_closest_numa_nodes=True)
    )
    assert narrow.merge(hints)[0] == H(0, 1)
    assert close.merge(hints)[0] == H(2, 3)


def test_prefer_closest_ignored_by_single_numa_node() -> None:
    tm = TopologyManager(
        numa_machine(2),
        TopologyManagerConfig(POLICY_SINGLE_NUMA_NODE, "pod", prefer_closest_numa_nodes=True),
    )
    assert tm.merge([{"cpu": [H(0), H(1)]}]) == (H(0), True)


# --- equivalence with the literal kubelet algorithm -----------------------------------------------

hint_st = st.builds(
    TopologyHint,
    st.one_of(st.none(), st.integers(min_value=1, max_value=15)),
    st.booleans(),
)
lists_st = st.lists(st.lists(hint_st, min_size=0, max_size=4), min_size=0, max_size=3)
dist_st = st.lists(st.integers(min_value=11, max_value=40), min_size=6, max_size=6)


@settings(max_examples=400, deadline=None)
@given(
    lists=lists_st,
    policy=st.sampled_from([POLICY_BEST_EFFORT, POLICY_SINGLE_NUMA_NODE]),
    closest=st.booleans(),
    dist=dist_st,
)
def test_merge_equals_exhaustive_kubelet_walk(
    lists: list[list[TopologyHint]], policy: str, closest: bool, dist: list[int]
) -> None:
    pairs = [(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)]
    table: dict[int, dict[int, int]] = {n: {n: 10} for n in range(4)}
    for (a, b), d in zip(pairs, dist, strict=True):
        table[a][b] = table[b][a] = d
    topo = numa_machine(4, table)
    tm = TopologyManager(
        topo, TopologyManagerConfig(policy, "container", prefer_closest_numa_nodes=closest)
    )
    maps: list[HintMap | None] = [{f"r{i}": hl} for i, hl in enumerate(lists)]
    filtered = filter_providers_hints(maps)
    if policy == POLICY_SINGLE_NUMA_NODE:
        filtered = filter_single_numa_hints(filtered)

    def fitter(a: int, b: int) -> int:
        if not closest or policy == POLICY_SINGLE_NUMA_NODE or a.bit_count() != b.bit_count():
            return narrowest(a, b)
        da, db = tm.fit_key(a)[1], tm.fit_key(b)[1]
        if da == db:
            return a if a < b else b
        return a if da < db else b

    expected = reference_merge(filtered, 0b1111, fitter)
    if policy == POLICY_SINGLE_NUMA_NODE and expected.numa_affinity == 0b1111:
        expected = TopologyHint(None, expected.preferred)
    assert tm.merge(maps)[0] == expected


# --- configuration -------------------------------------------------------------------------


def test_config_errors_name_value_and_rule() -> None:
    with pytest.raises(TopologyManagerConfigError, match='unknown policy: "best"'):
        TopologyManagerConfig("best", "pod")
    with pytest.raises(TopologyManagerConfigError, match='unknown scope: "node"'):
        TopologyManagerConfig(POLICY_RESTRICTED, "node")
    with pytest.raises(TopologyManagerConfigError, match="should not be less than 8"):
        TopologyManagerConfig(POLICY_RESTRICTED, "pod", max_allowable_numa_nodes=4)


def test_policy_options_parsed_as_the_kubelet_does() -> None:
    cfg = config_from_options(
        POLICY_RESTRICTED,
        "pod",
        {"prefer-closest-numa-nodes": "T", "max-allowable-numa-nodes": "16"},
    )
    assert cfg.prefer_closest_numa_nodes and cfg.max_allowable_numa_nodes == 16
    with pytest.raises(TopologyManagerConfigError, match='bad value for option "prefer-closest'):
        config_from_options(POLICY_RESTRICTED, "pod", {"prefer-closest-numa-nodes": "yes"})
    with pytest.raises(
        TopologyManagerConfigError, match="unable to convert policy option to integer"
    ):
        config_from_options(POLICY_RESTRICTED, "pod", {"max-allowable-numa-nodes": "x"})
    with pytest.raises(
        TopologyManagerConfigError, match='unknown Topology Manager Policy option: "z"'
    ):
        config_from_options(POLICY_RESTRICTED, "pod", {"z": "1"})


def test_too_many_numa_nodes_refused() -> None:
    with pytest.raises(TopologyManagerConfigError, match="more than 8 NUMA Nodes"):
        TopologyManager(numa_machine(9), TopologyManagerConfig(POLICY_RESTRICTED, "pod"))
    TopologyManager(
        numa_machine(9), TopologyManagerConfig(POLICY_RESTRICTED, "pod", max_allowable_numa_nodes=9)
    )


# --- scopes --------------------------------------------------------------------------------


class RecordingProvider:
    """A provider with fixed hints that records what the topology manager asks of it."""

    def __init__(self, hints: HintMap | None, fail_on: str = "") -> None:
        self.hints = hints
        self.fail_on = fail_on
        self.calls: list[tuple[str, str, TopologyHint | None]] = []

    def get_topology_hints(self, pod: PodSpec, container: ContainerSpec) -> HintMap | None:
        return self.hints

    def get_pod_topology_hints(self, pod: PodSpec) -> HintMap | None:
        return self.hints

    def allocate(self, pod: PodSpec, container: ContainerSpec, hint: TopologyHint | None) -> None:
        if container.name == self.fail_on:
            raise AdmissionError("UnexpectedAdmissionError", "boom")
        self.calls.append(("allocate", container.name, hint))

    def allocate_pod(self, pod: PodSpec, hint: TopologyHint | None) -> None:
        self.calls.append(("allocate_pod", "", hint))


POD = PodSpec(
    uid="p",
    init_containers=(ContainerSpec("i"),),
    containers=(ContainerSpec("a"), ContainerSpec("b")),
)
PLRM_POD = PodSpec(
    uid="q", containers=(ContainerSpec("a"),), requests={"cpu": 1000}, limits={"cpu": 1000}
)


def test_container_scope_allocates_each_container_in_order() -> None:
    tm = TopologyManager(numa_machine(2), TopologyManagerConfig(POLICY_RESTRICTED, "container"))
    p1, p2 = RecordingProvider({"cpu": [H(1)]}), RecordingProvider(None)
    tm.admit(POD, [p1, p2])
    assert [c[1] for c in p1.calls] == ["i", "a", "b"]
    assert p2.calls == [("allocate", n, H(1)) for n in ("i", "a", "b")]
    assert tm.get_affinity("p", "a") == H(1)
    assert tm.get_affinity("p", "zz") == NIL_F


def test_pod_scope_classic_stores_one_hint_and_allocates_per_container() -> None:
    tm = TopologyManager(numa_machine(2), TopologyManagerConfig(POLICY_SINGLE_NUMA_NODE, "pod"))
    p = RecordingProvider({"cpu": [H(0), H(1), H(0, 1, pref=False)]})
    tm.admit(POD, [p])
    assert p.calls == [("allocate", n, H(0)) for n in ("i", "a", "b")]


def test_pod_scope_pod_level_calls_allocate_pod_once() -> None:
    tm = TopologyManager(numa_machine(2), TopologyManagerConfig(POLICY_RESTRICTED, "pod"))
    p1, p2 = RecordingProvider({"cpu": [H(1)]}), RecordingProvider({"memory": [H(1)]})
    tm.admit(PLRM_POD, [p1, p2])
    assert p1.calls == [("allocate_pod", "", H(1))] == p2.calls


def test_rejections_carry_kubelet_reason_and_message() -> None:
    tm = TopologyManager(numa_machine(2), TopologyManagerConfig(POLICY_RESTRICTED, "pod"))
    with pytest.raises(AdmissionError) as err:
        tm.admit(PLRM_POD, [RecordingProvider({"cpu": []})])
    assert err.value.reason == TOPOLOGY_AFFINITY_ERROR
    assert err.value.message == (
        "Pod Scope pod with pod-level resources failed admission under pod-scope topology manager"
    )
    with pytest.raises(AdmissionError) as err:
        tm.admit(POD, [RecordingProvider({"cpu": []})])
    assert err.value.message == "Resources cannot be allocated with Topology locality"
    ctm = TopologyManager(numa_machine(2), TopologyManagerConfig(POLICY_RESTRICTED, "container"))
    with pytest.raises(AdmissionError) as err:
        ctm.admit(PLRM_POD, [RecordingProvider({"cpu": []})])
    assert err.value.message.endswith("failed admission with a container-level topology manager")


def test_provider_error_propagates_and_best_effort_admits_unsatisfiable() -> None:
    tm = TopologyManager(numa_machine(2), TopologyManagerConfig(POLICY_BEST_EFFORT, "container"))
    p = RecordingProvider({"cpu": []}, fail_on="a")
    with pytest.raises(AdmissionError, match="boom"):
        tm.admit(POD, [p])
    assert [c[1] for c in p.calls] == ["i"]


def test_policy_none_allocates_without_hints() -> None:
    tm = TopologyManager(numa_machine(2), TopologyManagerConfig("none", "pod"))
    p = RecordingProvider({"cpu": []})
    tm.admit(POD, [p])
    assert p.calls == [("allocate", n, None) for n in ("i", "a", "b")]


def test_affinity_store_forgets() -> None:
    tm = TopologyManager(numa_machine(2), TopologyManagerConfig(POLICY_BEST_EFFORT, "container"))
    tm.set_affinity("p", "a", H(0))
    tm.set_affinity("p", "b", H(1))
    tm.remove_container("p", "a")
    assert tm.get_affinity("p", "a") == NIL_F and tm.get_affinity("p", "b") == H(1)
    tm.remove_pod("p")
    assert tm.get_affinity("p", "b") == NIL_F
