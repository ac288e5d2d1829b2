"""Init-container memory reuse: :meth:`MemoryManager.reusable`, derived from the blocks, equals
the kubelet's in-memory ``initContainersReusableMemory`` whenever a pod's containers are allocated
in spec order (as the kubelet does), and every allocation leaves a machine state that the
kubelet's ``validateState`` accepts (reserved = the sum of the blocks)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from nri_plrm.engine.bitmask import mask_of
from nri_plrm.engine.memory_manager import MemoryManager
from nri_plrm.engine.memory_state import MemoryManagerConfig
from nri_plrm.engine.spec import AdmissionError, ContainerKind, ContainerSpec, PodSpec, TopologyHint
from nri_plrm.topology.model import CPUInfo, Topology

GB = 1024**3
HP = "hugepages-1Gi"
KINDS = [ContainerKind.INIT, ContainerKind.SIDECAR, ContainerKind.APP]
HINTS = [TopologyHint(None, False), TopologyHint(0b01, True), TopologyHint(0b10, True)]

Reusable = dict[int, dict[str, int]]


def _literal_update(
    reusable: Reusable, kind: ContainerKind, blocks: list[tuple[int, str, int]]
) -> None:
    """``updatePodReusableMemory`` for one pod, transcribed: a regular init container raises
    each (mask, type) entry to its block size; any other container uses it up."""
    for mask, kind_name, size in blocks:
        row = reusable.setdefault(mask, {})
        if kind is ContainerKind.INIT:
            row[kind_name] = max(row.get(kind_name, 0), size)
        elif row.get(kind_name, 0):
            row[kind_name] = max(row[kind_name] - size, 0)


def _nonzero(reusable: Reusable) -> Reusable:
    out = {m: {t: s for t, s in row.items() if s} for m, row in reusable.items()}
    return {m: row for m, row in out.items() if row}


@settings(max_examples=200, deadline=None)
@given(
    containers=st.lists(
        st.tuples(st.sampled_from(KINDS), st.integers(1, 4), st.sampled_from(HINTS), st.booleans()),
        min_size=1,
        max_size=7,
    )
)
def test_reusable_equals_the_kubelets_map_in_spec_order(
    containers: list[tuple[ContainerKind, int, TopologyHint, bool]],
) -> None:
    topology = Topology.build(
        [CPUInfo(cpu=n, core=n, socket=0, numa=n, l3=n) for n in range(2)],
        memory={n: {"memory": 10 * GB, HP: 4 * GB} for n in range(2)},
    )
    config = MemoryManagerConfig(reserved={n: {"memory": GB} for n in range(2)})
    mm = MemoryManager(topology, config)
    specs = []
    for i, (kind, gigs, _, pages) in enumerate(containers):
        req = {"cpu": 1000, "memory": gigs * GB, **({HP: GB} if pages else {})}
        specs.append(ContainerSpec(f"c{i}", kind, req, dict(req)))
    pod = PodSpec(
        uid="p",
        init_containers=tuple(c for c in specs if c.kind is not ContainerKind.APP),
        containers=tuple(c for c in specs if c.kind is ContainerKind.APP),
    )
    hints = {c.name: h for c, (_, _, h, _) in zip(specs, containers, strict=True)}
    literal: Reusable = {}
    charged = 0
    for c in pod.all_containers():
        assert mm.reusable(pod, c.name) == _nonzero(literal), c.name
        try:
            mm.allocate(pod, c, hints[c.name])
        except AdmissionError:
            break
        blocks = [
            (mask_of(b.numa_nodes), b.resource, b.size)
            for b in mm.container_blocks("p", c.name) or ()
        ]
        for mask, name, size in blocks:
            charged += size - min(size, literal.get(mask, {}).get(name, 0))
        _literal_update(literal, c.kind, blocks)
        reserved = sum(t.reserved for s in mm.machine_state.values() for t in s.memory_map.values())
        assert reserved == charged
        assert reserved == sum(
            b.size for n in mm.containers("p") for b in mm.container_blocks("p", n) or ()
        )
        MemoryManager.restore(topology, config, mm.snapshot())  # validateState accepts it
    assert mm.reusable(pod) == _nonzero(literal)
