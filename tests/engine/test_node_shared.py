"""The node-shared container set's per-pod index (issue 28: removing a pod or listing its
node-shared containers no longer scans the node's)."""

from __future__ import annotations

from nri_plrm.engine.node_shared import NodeSharedSet


def test_the_index_follows_add_discard_and_discard_pod() -> None:
    keys = NodeSharedSet([("a", "c1"), ("a", "c0"), ("b", "c0")])
    assert keys == {("a", "c1"), ("a", "c0"), ("b", "c0")}
    assert keys.names("a") == ["c0", "c1"]
    keys.discard(("a", "c1"))
    keys.discard(("a", "gone"))
    keys.discard("not a key")
    assert keys.names("a") == ["c0"]
    keys.add(("c", "x"))
    keys.discard_pod("a")
    assert keys == {("b", "c0"), ("c", "x")}
    assert keys.names("a") == [] and keys.names("b") == ["c0"]
    keys.discard(("b", "c0"))
    keys.discard_pod("unknown")
    assert keys == {("c", "x")} and keys.names("b") == []
    assert sorted(keys) == [("c", "x")]
