"""Giving a returned CPU back to a cgroup v1 ``kubepods`` cpuset tree (fake tree, kernel layout)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from fake_cgroups import kernel_v1_offline, kernel_v1_online, read, write_v1_tree, write_v2_tree
from uevent_recordings import OWN_DIR

from nri_plrm.base.cpuset import CPUSet
from nri_plrm.daemon.hotplug.cgroupv1 import (
    CgroupVersion,
    cgroup_version,
    give_back,
    is_container_cgroup,
    kubepods_cpuset,
    stranded_tasks,
)

ALL = CPUSet.parse("0-3")
POD = "kubepods/burstable/pod0c6a3f8e-1d2b-4c5d-9e7f-0123456789ab"
BE_POD = "kubepods/besteffort/pod5d1e2f3a-aaaa-bbbb-cccc-0123456789ab"
TREE = {
    "kubepods": ALL,
    "kubepods/burstable": ALL,
    POD: ALL,
    f"{POD}/ctr-exclusive": CPUSet([1]),
    f"{POD}/ctr-shared": CPUSet.parse("0,2-3"),
    "kubepods/besteffort": ALL,
    BE_POD: ALL,
    f"{BE_POD}/ctr-be": CPUSet.parse("0,2-3"),
    "system.slice": ALL,
}


def test_returned_cpu_goes_back_top_down_to_every_cgroup_but_containers(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    hierarchy = write_v1_tree(tmp_path, ALL, TREE)
    kernel_v1_offline(hierarchy, 1)
    kernel_v1_online(hierarchy, 1)
    kubepods = kubepods_cpuset(tmp_path)
    assert kubepods == hierarchy / "kubepods"
    with caplog.at_level(logging.INFO):
        writes = give_back(kubepods, CPUSet([1]), ALL)
    written = [str(w.path.relative_to(hierarchy)) for w in writes]
    assert written == [
        "kubepods",
        "kubepods/besteffort",
        "kubepods/burstable",
        BE_POD,
        POD,
    ]
    assert all(w.before == CPUSet.parse("0,2-3") and w.after == ALL for w in writes)
    for rel in written:
        assert read(hierarchy / rel) == ALL
    # containers are the runtime's to re-assert; cgroups outside kubepods are not touched
    assert read(hierarchy / POD / "ctr-exclusive") == CPUSet()
    assert read(hierarchy / POD / "ctr-shared") == CPUSet.parse("0,2-3")
    assert read(hierarchy / "system.slice") == CPUSet.parse("0,2-3")
    logged = [r.getMessage() for r in caplog.records if "gave cpus" in r.getMessage()]
    assert len(logged) == 5 and f"{hierarchy}/kubepods " in logged[0]
    # a second pass has nothing left to give
    assert give_back(kubepods, CPUSet([1]), ALL) == []


def test_only_online_cpus_the_parent_has_are_given(tmp_path: Path) -> None:
    hierarchy = write_v1_tree(tmp_path, ALL, TREE)
    for cpu in (1, 2):
        kernel_v1_offline(hierarchy, cpu)
    kernel_v1_online(hierarchy, 1)
    # 2 is still offline; 3 was never taken; the root has 1 back
    writes = give_back(hierarchy / "kubepods", CPUSet([1, 2, 3]), CPUSet([0, 1, 3]))
    assert {w.after for w in writes} == {CPUSet([0, 1, 3])}
    # a cgroup whose parent lacks the CPU does not get it (v1 would refuse it: EACCES)
    kernel_v1_offline(hierarchy, 1)
    kernel_v1_online(hierarchy, 1)
    assert give_back(hierarchy / "kubepods" / "besteffort", CPUSet([1]), ALL) == []
    assert read(hierarchy / BE_POD) == CPUSet([0, 3])


def test_nothing_to_give_when_no_cpu_returned(tmp_path: Path) -> None:
    hierarchy = write_v1_tree(tmp_path, ALL, TREE)
    kernel_v1_offline(hierarchy, 1)
    assert give_back(hierarchy / "kubepods", CPUSet([1]), CPUSet.parse("0,2-3")) == []
    assert give_back(hierarchy / "kubepods", CPUSet(), ALL) == []


def test_versions_and_the_kubepods_cgroup(tmp_path: Path) -> None:
    v1, v2, none = tmp_path / "v1", tmp_path / "v2", tmp_path / "none"
    write_v1_tree(v1, ALL, {"kubepods.slice": ALL})
    write_v2_tree(v2, ALL, {"kubepods.slice": CPUSet()})
    none.mkdir()
    assert cgroup_version(v1) is CgroupVersion.V1
    assert cgroup_version(v2) is CgroupVersion.V2
    assert cgroup_version(none) is CgroupVersion.UNKNOWN
    assert kubepods_cpuset(v1) == v1 / "cpuset" / "kubepods.slice"
    assert kubepods_cpuset(v1, "kubepods") is None
    assert kubepods_cpuset(none) is None


@pytest.mark.parametrize(
    ("path", "container"),
    [
        (f"kubepods/{POD.rsplit('/', 1)[1]}/abc", True),
        (f"{POD}/0123abcd", True),
        (
            "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0c6a3f8e_1d2b_4c5d"
            "_9e7f_0123456789ab.slice/cri-containerd-0123.scope",
            True,
        ),
        (POD, False),
        ("kubepods/burstable", False),
        ("kubepods/pod-test/x", False),
    ],
)
def test_container_cgroups(path: str, container: bool) -> None:
    assert is_container_cgroup(Path("/sys/fs/cgroup/cpuset") / path) is container


@pytest.mark.parametrize(
    ("recording", "key"),
    [("cpu1-offline-online.cgroups.json", "before"), ("cpu1-live-daemon.json", "before")],
)
def test_the_fake_kernel_does_what_the_recorded_kernel_did(
    tmp_path: Path, recording: str, key: str
) -> None:
    """The fake v1 kernel the daemon tests use (fake_cgroups) matches the real one's record:
    offline, the CPU leaves every cpuset; back online, no cpuset under the root gets it."""
    states = json.loads((OWN_DIR / recording).read_text())
    tree = {rel: CPUSet.parse(v["cpuset.cpus"]) for rel, v in states[key].items()}
    hierarchy = write_v1_tree(tmp_path, CPUSet([0, 1]), tree)
    kernel_v1_offline(hierarchy, 1)
    assert {rel: str(read(hierarchy / rel)) for rel in tree} == {
        rel: v["cpuset.cpus"] for rel, v in states["offline"].items()
    }
    kernel_v1_online(hierarchy, 1)
    if recording == "cpu1-offline-online.cgroups.json":  # nothing repaired it
        assert {rel: str(read(hierarchy / rel)) for rel in tree} == {
            rel: v["cpuset.cpus"] for rel, v in states["online"].items()
        }
    moved = [rel for rel, v in states["offline"].items() if v["tasks"] > states[key][rel]["tasks"]]
    assert [rel.rsplit("/", 1)[1][:3] for rel in moved] == ["pod"]


def test_stranded_tasks_are_found_above_the_containers(tmp_path: Path) -> None:
    hierarchy = write_v1_tree(tmp_path, ALL, TREE)
    (hierarchy / POD / "ctr-shared" / "tasks").write_text("41\n")
    assert stranded_tasks(hierarchy / "kubepods") == []
    (hierarchy / POD / "tasks").write_text("42\n43\n")
    assert stranded_tasks(hierarchy / "kubepods") == [(hierarchy / POD, 2)]
