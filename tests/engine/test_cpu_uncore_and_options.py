"""``prefer-align-cpus-by-uncorecache`` vectors (spec 7.3, from ``policy_static_test.go``'s uncore
tables; the machines are the shapes those vectors imply) and static policy option parsing."""

from __future__ import annotations

import pytest
from cpu_pods import make_pod

from nri_plrm.base.cpuset import CPUSet
from nri_plrm.engine.cpu_manager import CPUManager
from nri_plrm.engine.cpu_options import CPUManagerConfig, CPUManagerConfigError, StaticPolicyOptions
from nri_plrm.topology.machines import MACHINES
from nri_plrm.topology.model import CPUInfo, Topology

P = CPUSet.parse
UNCORE = {"prefer-align-cpus-by-uncorecache": "true"}
STRICT_UNCORE = {**UNCORE, "strict-cpu-reservation": "true"}
SMALL = "topoSingleSocketSingleNumaPerSocketSMTSmallUncore"


def _allocate(topology: Topology, reserved: str, cpus: int, options: dict[str, str]) -> CPUSet:
    manager = CPUManager(topology, CPUManagerConfig(reserved_cpus=P(reserved), options=options))
    pod = make_pod("fakePod", "fakeContainer", str(cpus), str(cpus))
    manager.allocate(pod, pod.containers[0], None)
    got = manager.assignment("fakePod", "fakeContainer")
    assert got is not None
    return got


@pytest.mark.parametrize(
    ("description", "reserved", "cpus", "options", "want"),
    [
        ("SmallUncore, reserved 0,1,64,65, 3 cpus", "0,1,64,65", 3, UNCORE, "2,3,66"),
        ("SmallUncore, reserved 0,1,64, 3 cpus", "0,1,64", 3, UNCORE, "2,65,66"),
        ("SmallUncore, reserved 0,1,64, 4 cpus", "0,1,64", 4, UNCORE, "4,5,68,69"),
        ("SmallUncore, reserved 0,1,64, 11 cpus", "0,1,64", 11, UNCORE, "2,4-7,65,66,68-71"),
        ("SmallUncore, strict reservation, 2 cpus", "0,1,64,65", 2, STRICT_UNCORE, "2,66"),
    ],
)
def test_static_policy_add_with_uncore_alignment(
    description: str, reserved: str, cpus: int, options: dict[str, str], want: str
) -> None:
    assert _allocate(MACHINES[SMALL], reserved, cpus, options) == P(want)


def test_static_policy_add_with_uncore_alignment_no_smt() -> None:
    machine = Topology.build(CPUInfo(cpu=c, core=c, socket=0, numa=0, l3=c // 8) for c in range(64))
    options = {**UNCORE, "full-pcpus-only": "true"}
    assert _allocate(machine, "0-3", 5, options) == P("8-12")


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"bogus": "true"}, 'unknown CPU Manager Policy option: "bogus"'),
        (
            {"full-pcpus-only": "yes"},
            'bad value for option "full-pcpus-only": strconv.ParseBool: parsing "yes": invalid '
            "syntax",
        ),
        (
            {"full-pcpus-only": "true", "distribute-cpus-across-cores": "true"},
            "static policy options full-pcpus-only and distribute-cpus-across-cores can not be "
            "used at the same time",
        ),
        (
            {"distribute-cpus-across-numa": "true", "distribute-cpus-across-cores": "true"},
            "static policy options distribute-cpus-across-numa and distribute-cpus-across-cores "
            "can not be used at the same time",
        ),
        (
            {"prefer-align-cpus-by-uncorecache": "1", "distribute-cpus-across-cores": "T"},
            "static policy options prefer-align-cpus-by-uncorecache and "
            "distribute-cpus-across-cores can not be used at the same time",
        ),
        (
            {"prefer-align-cpus-by-uncorecache": True, "distribute-cpus-across-numa": True},
            "static policy options prefer-align-cpus-by-uncorecache and "
            "distribute-cpus-across-numa can not be used at the same time",
        ),
    ],
)
def test_static_policy_options_errors(options: dict[str, object], error: str) -> None:
    with pytest.raises(CPUManagerConfigError) as info:
        StaticPolicyOptions.parse(options)
    assert str(info.value) == error


def test_static_policy_options_values() -> None:
    parsed = StaticPolicyOptions.parse(
        {"full-pcpus-only": "1", "distribute-cpus-across-numa": "False", "align-by-socket": True}
    )
    assert parsed == StaticPolicyOptions(full_pcpus_only=True, align_by_socket=True)
    assert parsed.take_options.full_pcpus_only


def test_align_by_socket_rules() -> None:
    config = CPUManagerConfig(reserved_cpu_count=1, options={"align-by-socket": "true"})
    with pytest.raises(CPUManagerConfigError, match=r"^Topolgy manager single-numa-node policy"):
        CPUManager(MACHINES["topoDualSocketHT"], config, topology_manager_policy="single-numa-node")
    with pytest.raises(CPUManagerConfigError, match="number of sockets are more than number"):
        CPUManager(MACHINES["fakeTopoMultiSocketDualSocketPerNumaHT"], config)


def test_reserved_cpus_configuration_errors() -> None:
    machine = MACHINES["topoDualSocketHT"]
    with pytest.raises(CPUManagerConfigError, match="greater than zero"):
        CPUManager(machine, CPUManagerConfig())
    with pytest.raises(CPUManagerConfigError, match='cpus "12-13" are not online'):
        CPUManager(machine, CPUManagerConfig(reserved_cpus=P("0,12-13")))
    with pytest.raises(CPUManagerConfigError, match="size of  did not equal 13"):
        CPUManager(machine, CPUManagerConfig(reserved_cpu_count=13))


@pytest.mark.parametrize(("count", "want"), [(1, "0"), (2, "0,6"), (3, "0,2,6")])
def test_reserved_cpus_picked_by_take_by_topology(count: int, want: str) -> None:
    manager = CPUManager(MACHINES["topoDualSocketHT"], CPUManagerConfig(reserved_cpu_count=count))
    assert manager.reserved_cpus == P(want)
    assert manager.allocatable_cpus() == P("0-11") - P(want)
