"""The scheduler extender's decision against the node's admission, on random machines,
policies, scopes, options and pod sequences (pod-level budgets with exclusive and shared
containers, sidecars, init containers, classic pods, memory and hugepages).

At every step the node publishes its object through the exporter's code path, the extender
decides over it, then the node admits through its ledger: the verdicts, the kubelet's reason
and message and the cause must be equal. ``NRI_PLRM_DIFF_STEPS`` sets the number of steps
(default 5,000). With a write window of lag, the assume cache must keep the extender from
passing any pod the node then refuses."""

from __future__ import annotations

import os
import random
from collections import Counter

from extender_diff import LedgerNode, random_node, random_pod

from nri_plrm.scheduler.extender import Extender
from nri_plrm.scheduler.settings import ExtenderSettings

STEPS = int(os.environ.get("NRI_PLRM_DIFF_STEPS", "5000"))
STEPS_PER_NODE = 60


def empty_twin(node: LedgerNode) -> LedgerNode:
    """The same machine and configuration with nothing allocated."""
    return LedgerNode("twin", node.topology, node.config_text)


def _churn(rng: random.Random, node: LedgerNode) -> bool:
    """Sometimes a pod leaves the node; True when one did."""
    uids = node.uids()
    if uids and rng.random() < 0.3:
        node.remove(rng.choice(uids))
        return True
    return False


def test_the_extender_decides_exactly_like_the_node() -> None:
    """Through :meth:`Extender.filter` with its caches (models per published state, verdicts
    per state and pod shape, unresolvable answers per node type), over a stream of nodes."""
    rng = random.Random(20261205)
    extender = Extender(ExtenderSettings(), lambda: 0.0)
    outcomes: Counter[str] = Counter()
    disagreements: list[str] = []
    steps = index = 0
    node = random_node(rng, "node-0")
    while steps < STEPS:
        if steps % STEPS_PER_NODE == 0:
            node = random_node(rng, f"node-{steps // STEPS_PER_NODE % 7}")
        steps += 1
        if _churn(rng, node):
            continue
        index += 1
        obj, spec = random_pod(rng, index, node.topology)
        published = node.published()
        published["metadata"]["resourceVersion"] = str(steps)
        extender.update_node(published)
        result = extender.filter({"Pod": obj, "Nodes": None, "NodeNames": [node.name]})
        failed = result["FailedNodes"].get(node.name)
        never = result["FailedAndUnresolvableNodes"].get(node.name)
        refused = node.admit(spec)
        if refused is None:
            outcomes["admitted"] += 1
            if result["NodeNames"] != [node.name]:
                disagreements.append(f"{spec.uid}: node admits, extender: {failed or never}")
            continue
        err, cause = refused
        outcomes[err.reason] += 1
        outcomes["unresolvable"] += never is not None
        if (never is not None) != (empty_twin(node).admit(spec) is not None):
            disagreements.append(f"{spec.uid}: unresolvable is {never is not None}: wrong")
        want = f"{err.reason}: {err.message}; cause: {cause}"
        if result["NodeNames"] or (failed or never) != want:
            disagreements.append(f"{spec.uid}: node: {want}; extender: {result}")
    assert disagreements == [], f"{len(disagreements)} of {steps}: {disagreements[:5]}"
    # the sequence exercises both answers and several of the kubelet's reasons
    assert outcomes["admitted"] > STEPS // 5, outcomes
    assert sum(v for k, v in outcomes.items() if k.endswith("Error")) > STEPS // 10, outcomes
    assert {"TopologyAffinityError", "SMTAlignmentError"} <= set(outcomes), outcomes
    assert outcomes["unresolvable"] > 0, outcomes


def _lagging_run(rng: random.Random, steps: int, use_cache: bool) -> tuple[int, int]:
    """Three nodes whose objects reach the extender every few steps (one write window of
    lag); a pod goes to a random node the extender passes and is bound there (``bind``: the
    assume cache holds it, unless ``use_cache`` is off). Returns (pods placed, pods placed
    that the node refused)."""
    nodes = {f"node-{i}": random_node(rng, f"node-{i}") for i in range(3)}
    extender = Extender(ExtenderSettings(assume_ttl=1e9), lambda: 0.0)
    versions = iter(range(1, 1 << 30))

    def publish(node: LedgerNode) -> None:
        obj = node.published()
        obj["metadata"]["resourceVersion"] = str(next(versions))
        extender.update_node(obj)

    for node in nodes.values():
        publish(node)
    placed = refused = 0
    for step in range(steps):
        node = rng.choice(list(nodes.values()))
        if rng.random() < 0.25:
            _churn(rng, node)
        else:
            obj, spec = random_pod(rng, step, node.topology)
            result = extender.filter({"Pod": obj, "Nodes": None, "NodeNames": list(nodes)})
            if result["NodeNames"]:
                chosen = nodes[rng.choice(result["NodeNames"])]
                if use_cache:
                    extender.bound(spec.uid, chosen.name)
                placed += 1
                refused += chosen.admit(spec) is not None
        if rng.random() < 0.3:  # the write window closes on one node: its object catches up
            publish(rng.choice(list(nodes.values())))
    return placed, refused


def test_with_a_write_window_of_lag_the_assume_cache_passes_nothing_the_node_refuses() -> None:
    rng = random.Random(7)
    placed = refused = 0
    for _ in range(max(1, STEPS // 1000)):
        p, r = _lagging_run(rng, 400, use_cache=True)
        placed += p
        refused += r
    assert placed > 100
    assert refused == 0


def test_without_the_assume_cache_the_lag_sends_pods_the_node_refuses() -> None:
    rng = random.Random(7)
    refused = sum(_lagging_run(rng, 400, use_cache=False)[1] for _ in range(3))
    assert refused > 0
