"""Hostile configuration files (issue 12, finding 5): a FIFO or device at the config path, an
oversized file, arrays nested 5,000 deep, huge tables of unknown keys. Each is a configuration
error (exit 2) with bounded messages, and a SIGHUP with such a file keeps the running daemon
answering containerd with its running configuration."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import pytest
from daemon_process import config_text, daemon_on_simulator, run_cli, stop_cleanly, wait_logged
from fakesysfs import write_sysfs
from plrm_runtime import FakeRuntime

from nri_plrm.config.file import load_config, parse_config
from nri_plrm.config.settings import MAX_CONFIG_BYTES, MAX_ECHO_CHARS, MAX_ERRORS, ConfigError
from nri_plrm.topology.machines import MACHINES
from nri_plrm.translate.manifest_to_pod import load_manifests

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
NESTED = "x = " + "[" * 5000 + "]" * 5000 + "\n"


def unknown_keys(total_bytes: int) -> str:
    """A ``[nri]`` table of unknown keys with long values, about ``total_bytes`` long."""
    value = "v" * 1000
    lines = [f'k{i} = "{value}"' for i in range(total_bytes // 1010)]
    return "[nri]\n" + "\n".join(lines) + "\n"


def test_fifo_at_the_config_path_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "config.toml"
    os.mkfifo(fifo)
    start = time.monotonic()
    with pytest.raises(ConfigError, match="must be a regular file"):
        load_config(fifo)
    assert time.monotonic() - start < 5
    proc = run_cli("check-config", str(fifo), timeout=30)
    assert proc.returncode == 2, proc.stderr
    assert "prw-" in proc.stderr and "regular file" in proc.stderr


def test_device_and_directory_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"crw-.*must be a regular file"):
        load_config("/dev/null")
    with pytest.raises(ConfigError, match=r"drwx.*must be a regular file"):
        load_config(tmp_path)


def test_symlink_to_a_regular_file_is_read(tmp_path: Path) -> None:
    """A Kubernetes ConfigMap volume presents the file through symlinks."""
    real = tmp_path / "..data" / "config.toml"
    real.parent.mkdir()
    real.write_text('[log]\nlevel = "debug"\n')
    (tmp_path / "config.toml").symlink_to(real)
    assert load_config(tmp_path / "config.toml").log.level == "debug"


def test_file_over_one_mib_is_refused(tmp_path: Path) -> None:
    cfg = tmp_path / "config.toml"
    comment = "# " + "x" * 97 + "\n"
    cfg.write_text(comment * (MAX_CONFIG_BYTES // len(comment) + 1))
    assert cfg.stat().st_size > MAX_CONFIG_BYTES
    with pytest.raises(ConfigError, match=f"larger than {MAX_CONFIG_BYTES} bytes"):
        load_config(cfg)
    cfg.write_text(comment * (MAX_CONFIG_BYTES // len(comment)))
    assert load_config(cfg).log.level == "info"


@pytest.mark.parametrize("command", ["check-config", "run"])
def test_deep_nesting_is_a_config_error_exit_2(tmp_path: Path, command: str) -> None:
    cfg = tmp_path / "config.toml"
    cfg.write_text(NESTED)
    assert cfg.stat().st_size == 10005
    with pytest.raises(ConfigError, match="line 1: a value of key x: nested 5000 levels deep"):
        parse_config(NESTED, "nested")
    args = ["run", "--config", str(cfg)] if command == "run" else ["check-config", str(cfg)]
    proc = run_cli(*args)
    assert proc.returncode == 2, proc.stderr
    assert "nested 5000 levels deep: keys nest at most 32 levels" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_echoed_values_are_cut_and_errors_counted() -> None:
    text = unknown_keys(3 * MAX_CONFIG_BYTES) + "[nir]\n" + unknown_keys(MAX_CONFIG_BYTES)[6:]
    with pytest.raises(ConfigError) as failure:
        parse_config(text, "big")
    errors = failure.value.errors
    assert len(errors) == MAX_ERRORS
    assert errors[-1].startswith("big: ") and errors[-1].endswith("more errors not listed")
    for line in errors[:-1]:
        key, value, _rule = line.split(": ", 2)
        assert len(value) <= MAX_ECHO_CHARS, line
        assert len(key) <= MAX_ECHO_CHARS
    assert len(str(failure.value)) < 20_000
    with pytest.raises(ConfigError) as one:
        parse_config('[nri]\nsocket = "' + "s" * 100_000 + '"\n', "long")
    (line,) = one.value.errors
    assert line.startswith('nri.socket: "sss') and "(100002 characters)" in line
    assert len(line.split(": ")[1]) <= MAX_ECHO_CHARS


@pytest.mark.parametrize(
    "text",
    [
        '[cpu_manager]\nreserved_cpus = "' + "1," * 50_000 + 'a"',
        '[[memory_manager.reserved_memory]]\nnuma_node = 0\nmemory = "' + "9" * 100_000 + 'Zi"',
        '[topology_manager]\noptions = { "' + "y" * 100_000 + '" = true }',
    ],
)
def test_rules_quoting_the_value_are_cut_too(text: str) -> None:
    """Parser messages (a bad cpuset, a bad quantity, an unknown option name) quote the value."""
    with pytest.raises(ConfigError) as failure:
        parse_config(text, "long")
    (line,) = failure.value.errors
    assert len(line) < 3 * MAX_ECHO_CHARS + 200, line[:400]


@pytest.mark.parametrize("hostile", ["fifo", "oversized", "nested"])
def test_sighup_with_a_hostile_file_keeps_the_daemon_answering(
    tmp_path: Path, hostile: str
) -> None:
    write_sysfs(MACHINES["default"], str(tmp_path / "sys"))
    cfg = tmp_path / "config.toml"
    cfg.write_text(config_text(tmp_path))
    log = tmp_path / "daemon.log"
    (spec,) = load_manifests([EXAMPLES / "pod-scope-mixed.yaml"])

    async def main() -> None:
        async with daemon_on_simulator(cfg, log, tmp_path / "nri.sock") as (sim, proc):
            cfg.unlink()
            if hostile == "fifo":
                os.mkfifo(cfg)
            elif hostile == "oversized":
                cfg.write_text(unknown_keys(2 * MAX_CONFIG_BYTES))
            else:
                cfg.write_text(NESTED)
            proc.send_signal(signal.SIGHUP)
            text = await wait_logged(log, "SIGHUP: keeping the running configuration")
            assert max(len(line) for line in text.splitlines()) < 2000
            pod = await FakeRuntime(sim).launch(spec)
            assert pod.id
            assert await stop_cleanly(proc) == 0

    asyncio.run(main())


def test_real_errors_are_listed_before_unknown_keys_under_the_cap() -> None:
    """Issue 31 item 13: 60 unknown keys in [nri] must not push [log]'s bad level past the cap."""
    typos = "".join(f"typo_{i:02d} = 1\n" for i in range(60))
    text = f'[nri]\n{typos}[log]\nlevel = "loud"\n'
    with pytest.raises(ConfigError) as failure:
        parse_config(text, "typos")
    errors = failure.value.errors
    assert len(errors) == MAX_ERRORS
    assert errors[0].startswith('log.level: "loud": ')
    assert errors[1].startswith("nri.typo_00: 1: unknown key")
    assert errors[-1] == "typos: 12 more errors not listed"
