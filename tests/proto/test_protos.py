"""The generated protobuf modules are fresh, and the NRI schema has the spec's field numbers."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

from nri_plrm.proto import nri_api_pb2 as api
from nri_plrm.proto import ttrpc_wire_pb2 as wire

ROOT = Path(__file__).resolve().parents[2]


def _gen_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_protos", ROOT / "scripts" / "gen_protos.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_generated_modules_are_fresh() -> None:
    fresh = _gen_module().generate_to_temp()
    committed = ROOT / "nri_plrm" / "proto"
    stale = [name for name, data in fresh.items() if (committed / name).read_bytes() != data]
    assert not stale, f"regenerate with: python scripts/gen_protos.py (stale: {stale})"
    generated = {p.name for p in committed.iterdir() if p.suffix in (".py", ".pyi")}
    assert generated == set(fresh), "nri_plrm/proto holds files no .proto generates"


def test_duplicate_base_names_are_refused(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    for d in ("a", "b"):
        (tmp_path / d / "same.proto").write_text('syntax = "proto3";\n')
    with pytest.raises(SystemExit, match="share the base name 'same'"):
        _gen_module().proto_files(tmp_path)


def _numbers(msg: type) -> dict[str, int]:
    return {f.name: f.number for f in msg.DESCRIPTOR.fields}  # type: ignore[attr-defined]


def test_field_numbers_that_differ_from_the_obvious() -> None:
    assert _numbers(api.ConfigureResponse) == {"events": 2}
    assert min(_numbers(api.ContainerAdjustment).values()) == 2
    assert _numbers(api.ContainerAdjustment)["args"] == 9
    assert _numbers(api.Container)["image"] == 22
    assert _numbers(api.Container)["CDI_devices"] == 20
    assert _numbers(api.LinuxContainerAdjustment)["memory_policy"] == 12
    assert _numbers(api.LinuxPodSandbox) == {
        "pod_overhead": 1,
        "pod_resources": 2,
        "cgroup_parent": 3,
        "cgroups_path": 4,
        "namespaces": 5,
        "resources": 6,
    }
    assert _numbers(api.ConfigureRequest)["NRI_version"] == 6
    assert _numbers(api.RegisterPluginRequest)["NRI_version"] == 3
    assert _numbers(wire.Request) == {
        "service": 1,
        "method": 2,
        "payload": 3,
        "timeout_nano": 4,
        "metadata": 5,
    }
    assert _numbers(wire.Response) == {"status": 1, "payload": 2}
    assert _numbers(wire.Status) == {"code": 1, "message": 2, "details": 3}


def test_enums() -> None:
    assert api.Event.Value("LAST") == 15
    assert api.Event.Value("VALIDATE_CONTAINER_ADJUSTMENT") == 14
    assert api.Field.Value("None") == 0
    assert api.Field.Value("MemoryPolicy") == 40
    assert api.ContainerState.Value("CONTAINER_STOPPED") == 4
    assert api.MpolMode.Value("MPOL_WEIGHTED_INTERLEAVE") == 6


def test_services_list_every_method() -> None:
    plugin = api.DESCRIPTOR.services_by_name["Plugin"]
    assert len(plugin.methods) == 18
    assert plugin.full_name == "nri.pkg.api.v1alpha1.Plugin"
    runtime = api.DESCRIPTOR.services_by_name["Runtime"]
    assert sorted(m.name for m in runtime.methods) == ["RegisterPlugin", "UpdateContainers"]


def test_optional_wrapper_encoding() -> None:
    # nri-protocol.md section 3.6: quota 0 is "12 00", quota -1 is the 10-byte varint.
    assert api.LinuxCPU(quota=api.OptionalInt64(value=0)).SerializeToString() == b"\x12\x00"
    assert api.LinuxCPU(quota=api.OptionalInt64(value=-1)).SerializeToString() == bytes.fromhex(
        "120b08ffffffffffffffffff01"
    )


def test_services_get_no_generated_stubs(tmp_path: Path) -> None:
    src = tmp_path / "protos" / "podres"
    src.mkdir(parents=True)
    (src / "toy_api.proto").write_text(
        'syntax = "proto3";\npackage toy;\nmessage Ping { string v = 1; }\n'
        "service Toy { rpc Echo(Ping) returns (Ping); }\n"
    )
    out = tmp_path / "out"
    written = {p.name for p in _gen_module().generate(out, tmp_path / "protos")}
    assert written == {"__init__.py", "toy_api_pb2.py", "toy_api_pb2.pyi"}
