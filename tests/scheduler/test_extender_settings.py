"""``[scheduler_extender]``: defaults, every key, refusals with the key path, the command's
``--help`` and a bad file refusing to start."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from nri_plrm.cli import main
from nri_plrm.config.settings import ConfigError
from nri_plrm.scheduler.settings import ExtenderSettings, parse_settings


def test_defaults_and_every_key() -> None:
    assert parse_settings("") == ExtenderSettings()
    text = """
[scheduler_extender]
address = "127.0.0.1:8888"
kubeconfig = "/etc/kube.conf"
resync = 2
scoring = "most-allocated"
assume_ttl = 30.5
unknown_nodes = "fail"
log_level = "debug"
"""
    assert parse_settings(text) == ExtenderSettings(
        "127.0.0.1:8888", "/etc/kube.conf", 2.0, "most-allocated", 30.5, "fail", "debug"
    )


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (
            'scoring = "fewest"',
            "f: scheduler_extender.scoring: 'fewest': must be one of "
            "least-allocated, most-allocated",
        ),
        ("resync = 0", "f: scheduler_extender.resync: 0: must be > 0 and <= 3600"),
        ('resync = "1s"', "f: scheduler_extender.resync: '1s': must be a number of seconds"),
        ("assume_ttl = nan", "f: scheduler_extender.assume_ttl: nan: must be > 0"),
        ('address = "9742"', "f: scheduler_extender.address: '9742': must be host:port"),
        ('unknown_nodes = "skip"', "f: scheduler_extender.unknown_nodes: 'skip': must be one"),
        ("colour = 1", "f: scheduler_extender.colour: unknown key (known: address,"),
        ("kubeconfig = 1", "f: scheduler_extender.kubeconfig: 1: must be a string"),
    ],
)
def test_bad_values_are_refused_with_their_key_path(line: str, expected: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_settings(f"[scheduler_extender]\n{line}\n", "f")
    assert info.value.errors[0].startswith(expected), info.value.errors


def test_help_and_a_bad_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["scheduler-extender", "--help"]) == 0
    assert "k8s.io/kube-scheduler/extender/v1" in capsys.readouterr().out
    bad = tmp_path / "extender.toml"
    bad.write_text('[scheduler_extender]\nscoring = "fewest"\n')
    assert main(["scheduler-extender", "--config", str(bad)], io.StringIO()) == 2
    assert "scheduler_extender.scoring: 'fewest'" in capsys.readouterr().err
