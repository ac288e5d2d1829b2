"""The Containerfile's structure (no image builder here): stages, sources, entry point, wiring."""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
CONTAINERFILE = REPO / "packaging" / "kubernetes" / "Containerfile"
MANIFEST = REPO / "packaging" / "kubernetes" / "nri-plrm.yaml"


@dataclass(frozen=True)
class Instruction:
    line: int
    keyword: str
    argument: str


def parse(text: str) -> list[Instruction]:
    """Instructions with line continuations joined; comments and blank lines dropped."""
    instructions: list[Instruction] = []
    pending = ""
    start = 0
    for number, raw in enumerate(text.splitlines(), 1):
        stripped = raw.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if not pending:
            start = number
        if stripped.endswith("\\"):
            pending += stripped[:-1].rstrip() + " "
            continue
        full = (pending + stripped).strip()
        pending = ""
        keyword, _, argument = full.partition(" ")
        instructions.append(Instruction(start, keyword.upper(), argument.strip()))
    assert not pending, "Containerfile ends inside a line continuation"
    return instructions


def test_parser_joins_continuations_and_skips_comments() -> None:
    parsed = parse('# c\nFROM a:1 AS b\n\nRUN x \\\n    && y\nCMD ["z"]\n')
    assert parsed == [
        Instruction(2, "FROM", "a:1 AS b"),
        Instruction(4, "RUN", "x && y"),
        Instruction(6, "CMD", '["z"]'),
    ]
    with pytest.raises(AssertionError, match="continuation"):
        parse("RUN a \\\n")


@pytest.fixture(scope="module")
def instructions() -> list[Instruction]:
    return parse(CONTAINERFILE.read_text())


def stages(instructions: list[Instruction]) -> list[list[Instruction]]:
    result: list[list[Instruction]] = []
    for ins in instructions:
        if ins.keyword == "FROM":
            result.append([])
        assert result, f"line {ins.line}: {ins.keyword} before the first FROM"
        result[-1].append(ins)
    return result


def test_known_instructions_only(instructions: list[Instruction]) -> None:
    known = {"FROM", "RUN", "COPY", "ENV", "WORKDIR", "LABEL", "USER", "EXPOSE"}
    known |= {"ENTRYPOINT", "CMD", "ARG"}
    for ins in instructions:
        assert ins.keyword in known, f"line {ins.line}: {ins.keyword}: not expected here"
        assert ins.keyword != "ADD", "use COPY; ADD fetches URLs and unpacks archives"


def test_two_stages_on_the_same_pinned_base(instructions: list[Instruction]) -> None:
    build, final = stages(instructions)
    build_from = build[0].argument.split()
    final_from = final[0].argument.split()
    assert build_from[1:] == ["AS", "build"]
    image = build_from[0]
    assert ":" in image.rsplit("/", 1)[-1] and not image.endswith(":latest"), image
    assert final_from == [image], "the venv's python symlink needs the same base image"
    copies = [i.argument for i in final if i.keyword == "COPY"]
    assert "--from=build /opt/nri-plrm /opt/nri-plrm" in copies
    assert not any("pip install" in i.argument for i in final if i.keyword == "RUN")


def test_copied_sources_exist(instructions: list[Instruction]) -> None:
    for ins in instructions:
        if ins.keyword != "COPY" or ins.argument.startswith("--from"):
            continue
        *sources, _destination = shlex.split(ins.argument)
        for source in sources:
            assert (REPO / source).exists(), f"line {ins.line}: COPY {source}: not in the repo"


def _daemonset_container() -> dict[str, object]:
    for doc in yaml.safe_load_all(MANIFEST.read_text()):
        if doc and doc["kind"] == "DaemonSet":
            (container,) = doc["spec"]["template"]["spec"]["containers"]
            return dict(container)
    raise AssertionError("no DaemonSet in the manifest")


def test_entrypoint_and_cmd_match_the_daemonset(instructions: list[Instruction]) -> None:
    final = stages(instructions)[-1]
    (entrypoint,) = [json.loads(i.argument) for i in final if i.keyword == "ENTRYPOINT"]
    (cmd,) = [json.loads(i.argument) for i in final if i.keyword == "CMD"]
    assert entrypoint == ["/opt/nri-plrm/bin/nri-plrm"]
    container = _daemonset_container()
    assert "command" not in container
    assert cmd == container["args"] == ["run", "--config", "/etc/nri-plrm/config.toml"]
    config_copy = [i.argument.split() for i in final if i.keyword == "COPY"]
    assert ["packaging/config.toml", "/etc/nri-plrm/config.toml"] in config_copy


def test_user_and_port(instructions: list[Instruction]) -> None:
    final = stages(instructions)[-1]
    users = [i.argument for i in final if i.keyword == "USER"]
    assert users == ["0:0"]
    (exposed,) = [i.argument for i in final if i.keyword == "EXPOSE"]
    ports = _daemonset_container()["ports"]
    assert isinstance(ports, list)
    assert int(exposed) == ports[0]["containerPort"]


def test_image_carries_the_docs_doctor_points_to(instructions: list[Instruction]) -> None:
    """Issue 31 item 13: doctor run in the plugin's pod names /usr/share/doc/nri-plrm pages."""
    final = stages(instructions)[-1]
    copies = [shlex.split(i.argument) for i in final if i.keyword == "COPY"]
    assert ["README.md", "docs/", "/usr/share/doc/nri-plrm/"] in copies
