"""The SIGHUP reader (issue 28, finding 7): the file read in a thread of its own gives the same
Config as reading it on the spot; one read runs at a time, the GIL changing hands every 0.5 ms
meanwhile, and one that outlived its reload's deadline still ends, in bounded time."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

import pytest

from nri_plrm.config.file import load_config
from nri_plrm.config.reload import READ_SWITCH_INTERVAL, ConfigReader, ReloadTimeout
from nri_plrm.config.settings import MAX_CONFIG_BYTES, ConfigError

ROOT = Path(__file__).resolve().parents[2]


def slow_file(tmp_path: Path) -> Path:
    """A megabyte of unknown keys: the slowest file the bounds let through to the parser."""
    lines, size, i = ["[nri]\n"], 6, 0
    while size + len(line := f"k{i} = {i}\n") <= MAX_CONFIG_BYTES:
        lines.append(line)
        size += len(line)
        i += 1
    path = tmp_path / "slow.toml"
    path.write_text("".join(lines))
    return path


@pytest.mark.parametrize(
    "name", ["packaging/config.toml", "examples/pod-scope.toml", "examples/policy-none.toml"]
)
def test_the_reader_reads_the_same_config(name: str) -> None:
    path = str(ROOT / name)
    assert asyncio.run(ConfigReader().load(path, 30)) == load_config(path)


def test_every_problem_of_the_file_comes_back(tmp_path: Path) -> None:
    cfg = tmp_path / "config.toml"
    cfg.write_text('[log]\nlevel = "loud"\n[nri]\nsokcet = "/x"\n')
    with pytest.raises(ConfigError) as read:
        asyncio.run(ConfigReader().load(str(cfg), 30))
    with pytest.raises(ConfigError) as on_the_spot:
        load_config(cfg)
    assert read.value.errors == on_the_spot.value.errors
    assert read.value.errors == [
        'log.level: "loud": must be one of debug, info, warning, error',
        'nri.sokcet: "/x": unknown key; did you mean "socket"?',
    ]


def test_the_deep_file_is_refused_with_its_depth(tmp_path: Path) -> None:
    cfg = tmp_path / "config.toml"
    cfg.write_text("a" + ".a" * 59_999 + " = 1\n")
    started = time.monotonic()
    with pytest.raises(ConfigError, match=r"line 1: key a\.a\.a.*nested 60000 levels deep"):
        asyncio.run(ConfigReader().load(str(cfg), 30))
    assert time.monotonic() - started < 5


def test_a_read_past_its_deadline_ends_and_no_other_starts_meanwhile(tmp_path: Path) -> None:
    path = str(slow_file(tmp_path))
    reader = ConfigReader()
    interval = sys.getswitchinterval()

    async def main() -> None:
        with pytest.raises(ReloadTimeout, match=r"not read within 0\.001 s"):
            await reader.load(path, 0.001)
        assert reader.busy
        assert sys.getswitchinterval() == READ_SWITCH_INTERVAL
        with pytest.raises(RuntimeError, match="still running"):
            await reader.load(path, 30)
        deadline = time.monotonic() + 60
        while reader.busy:
            assert time.monotonic() < deadline, "the reader never ended"
            await asyncio.sleep(0.05)
        assert sys.getswitchinterval() == interval
        with pytest.raises(ConfigError, match="more errors not listed"):
            await reader.load(path, 60)

    asyncio.run(main())
