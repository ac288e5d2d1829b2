"""``nri-plrm simulate --resize``: parsing, the JSON and table shapes, and the commands of
examples/README.md ("Previewing an in-place resize") printing what the README shows."""

from __future__ import annotations

import io
import json
import shlex
from pathlib import Path

import pytest

from nri_plrm.cli import main
from nri_plrm.cli.inputs import UsageError
from nri_plrm.cli.simulate_resize import parse_resize

REPO = Path(__file__).resolve().parents[2]
README = REPO / "examples" / "README.md"
GI = 1 << 30


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(list(argv), out=out)
    return code, out.getvalue()


def readme_pairs() -> list[tuple[str, str]]:
    """(command, documented "resizes:" block) from the README's resize section."""
    section = README.read_text().split("## Previewing an in-place resize", 1)[1]
    section = section.split("\n## ", 1)[0]
    pairs = []
    for chunk in section.split("```sh\n")[1:]:
        command, rest = chunk.split("```", 1)
        block = rest.split("```text\n", 1)[1].split("```", 1)[0]
        pairs.append((command.strip(), block))
    return pairs


@pytest.mark.parametrize("pair", readme_pairs(), ids=["defaults", "opt-in"])
def test_the_readme_commands_print_what_the_readme_shows(pair: tuple[str, str]) -> None:
    command, block = pair
    argv = shlex.split(command)
    assert argv[:2] == ["nri-plrm", "simulate"]
    args = [str(REPO / a) if a.startswith("examples/") else a for a in argv[1:]]
    code, out = run(*args)
    assert code == 0
    assert block in out


def test_json_lists_the_resizes_and_the_final_state() -> None:
    code, out = run(
        "simulate",
        "--output",
        "json",
        "--config",
        str(REPO / "examples" / "resize-opt-in.toml"),
        "--resize",
        "default/classic-guaranteed/web=cpu=4",
        "--resize",
        "default/classic-guaranteed/web=cpu=2,memory=3Gi",
        str(REPO / "examples" / "classic-guaranteed.yaml"),
    )
    assert code == 0
    doc = json.loads(out)
    assert doc["resizes"][0] == {
        "target": "default/classic-guaranteed/web",
        "admitted": True,
        "reason": "",
        "message": "",
        "explanation": "",
    }
    second = doc["resizes"][1]
    assert (second["admitted"], second["reason"]) == (False, "Infeasible")
    assert second["message"].startswith("Resize is infeasible for Guaranteed Pods alongside Memory")
    web = next(c for c in doc["pods"][0]["containers"] if c["name"] == "web")
    assert (web["cpus"], web["mems"], web["cpu_quota"]) == ("1-2,33-34", "0", -1)


@pytest.mark.parametrize(
    ("value", "error"),
    [
        ("default/web", "expected NAMESPACE/POD[/CONTAINER]=cpu=Q[,memory=Q]"),
        ("default=cpu=2", "expected NAMESPACE/POD[/CONTAINER]=cpu=Q[,memory=Q]"),
        ("a/b/c/d=cpu=2", "expected NAMESPACE/POD[/CONTAINER]=cpu=Q[,memory=Q]"),
        ("a/b=gpu=2", "'gpu=2'"),
        ("a/b=cpu=2,cpu=3", "each resource once"),
        ("a/b=cpu=two", "cpu='two'"),
        ("a/b=memory=0", "must be positive"),
    ],
)
def test_bad_values_name_the_value_and_the_rule(value: str, error: str) -> None:
    with pytest.raises(UsageError) as info:
        parse_resize(value)
    assert f"--resize {value!r}" in str(info.value) and error in str(info.value)


def test_parsed_values() -> None:
    r = parse_resize("ns/pod/ctr=cpu=1500m,memory=2Gi")
    assert (r.namespace, r.pod, r.container) == ("ns", "pod", "ctr")
    assert r.values == {"cpu": 1500, "memory": 2 * GI}
    assert parse_resize("ns/pod=cpu=6").container == ""


@pytest.mark.parametrize(
    ("value", "error"),
    [
        ("default/nope/web=cpu=2", "no pod of that name in the manifests"),
        ("default/classic-guaranteed/nope=cpu=2", "the pod has no container of that name"),
        ("default/classic-guaranteed=cpu=6", "the pod has no pod-level resources"),
    ],
)
def test_a_resize_naming_nothing_known_is_a_usage_error(
    value: str, error: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _ = run("simulate", "--resize", value, str(REPO / "examples" / "classic-guaranteed.yaml"))
    assert code == 2
    assert error in capsys.readouterr().err
