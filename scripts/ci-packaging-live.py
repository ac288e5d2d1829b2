"""Run the INSTALLED nri-plrm as systemd would, against a simulated containerd, and check it.

Called by scripts/ci-packaging.sh inside a private mount namespace where the package's /usr, /opt
and /etc are overlaid on the machine's, so ``/usr/bin/nri-plrm``, ``/etc/nri-plrm/config.toml``
and ``/lib/systemd/system/nri-plrm.service`` are the installed files. It runs with the CI
virtualenv's Python, which has the repository's test helpers (the runtime-side NRI simulator).

What it proves, in the order an operator meets it (docs/install.md):
1. the unit's ExecStart, expanded with /etc/default/nri-plrm, starts the installed plugin with
   the installed default configuration (only host paths moved into a scratch directory);
2. the plugin registers with an NRI runtime, tells systemd ``READY=1`` on ``NOTIFY_SOCKET`` and
   feeds the watchdog (``WATCHDOG=1``) within the unit's ``WatchdogSec``;
3. ``/healthz`` answers 200; the seed pod ``pod-scope-mixed`` from the installed examples is
   pinned as documented (main-app: 2 exclusive CPUs, quota -1; sidecars: the other 2);
4. ``nri-plrm state --config FILE`` (checkpoint) and ``--socket`` (PodResources) show it;
5. SIGHUP (``systemctl reload``) keeps it running; SIGTERM stops it with ``STOPPING=1``, exit 0.

Usage: python scripts/ci-packaging-live.py SCRATCH_DIR UNIT_FILE
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "support"))

from fakesysfs import write_sysfs  # noqa: E402
from nrisim import NRISimulator  # noqa: E402
from plrm_runtime import FakeRuntime  # noqa: E402

from nri_plrm.topology.machines import load_topology  # noqa: E402
from nri_plrm.topology.synthetic import DEFAULT_SPEC  # noqa: E402
from nri_plrm.translate.manifest_to_pod import load_manifests  # noqa: E402

INSTALLED = "/usr/bin/nri-plrm"
CONFIG = Path("/etc/nri-plrm/config.toml")
DEFAULTS = Path("/etc/default/nri-plrm")
EXAMPLE = Path("/usr/share/nri-plrm/examples/pod-scope-mixed.yaml")
ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}
CHECKPOINT_LAG = 15.0


def step(text: str) -> None:
    print(f"ci-packaging-live: {text}", file=sys.stderr, flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def scratch_config(tmp: Path, port: int) -> Path:
    """The installed default config with every host path moved under ``tmp``."""
    text = CONFIG.read_text()
    moves = [
        ('"/var/run/nri/nri.sock"', f'"{tmp}/nri.sock"'),
        ('"/var/lib/nri-plrm/pod-resources.sock"', f'"{tmp}/state/pod-resources.sock"'),
        ('"/var/lib/nri-plrm"', f'"{tmp}/state"'),
        ('"/var/lib/kubelet/cpu_manager_state"', f'"{tmp}/kubelet/cpu_manager_state"'),
        ('"127.0.0.1:9740"', f'"127.0.0.1:{port}"'),
        ('sysfs_root = "/sys"', f'sysfs_root = "{tmp}/sys"'),
    ]
    for old, new in moves:
        if text.count(old) != 1:
            raise SystemExit(f"{CONFIG}: expected {old} exactly once (the documented default)")
        text = text.replace(old, new)
    path = tmp / "config.toml"
    path.write_text(text)
    return path


def exec_start(unit: Path, config: Path) -> list[str]:
    """The unit's ExecStart with its environment expanded as systemd would."""
    env: dict[str, str] = {}
    lines = unit.read_text().splitlines()
    for line in lines:
        if line.startswith("Environment="):
            key, _, value = line.removeprefix("Environment=").partition("=")
            env[key] = value
    for line in DEFAULTS.read_text().splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            env[key] = value
    env["NRI_PLRM_CONFIG"] = str(config)
    (command,) = [x.removeprefix("ExecStart=") for x in lines if x.startswith("ExecStart=")]
    argv: list[str] = []
    for word in shlex.split(command):
        if word.startswith("${") and word.endswith("}"):
            argv.append(env[word[2:-1]])
        elif word.startswith("$"):
            argv.extend(env[word[1:]].split())
        else:
            argv.append(word)
    return argv


def unit_watchdog_usec(unit: Path) -> str:
    """``WATCHDOG_USEC`` as systemd sets it from the unit's ``WatchdogSec=`` (in seconds)."""
    for line in unit.read_text().splitlines():
        if line.startswith("WatchdogSec="):
            return str(int(line.removeprefix("WatchdogSec=").removesuffix("s")) * 1_000_000)
    raise SystemExit(f"{unit}: no WatchdogSec=")


def cli(*args: str) -> str:
    result = subprocess.run(
        [INSTALLED, *args], env=ENV, capture_output=True, text=True, timeout=60, check=False
    )
    if result.returncode != 0:
        raise SystemExit(f"nri-plrm {' '.join(args)}: exit {result.returncode}\n{result.stderr}")
    return result.stdout


async def notification(sock: socket.socket, key: str, timeout: float) -> dict[str, str]:
    """The next datagram carrying ``key``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        remaining = deadline - loop.time()
        if remaining <= 0:
            raise SystemExit(f"no {key}=1 on NOTIFY_SOCKET within {timeout} s")
        data = await asyncio.wait_for(loop.sock_recv(sock, 4096), remaining)
        fields = dict(line.split("=", 1) for line in data.decode().splitlines() if line)
        if fields.get(key) == "1":
            return fields


async def live(tmp: Path, unit: Path) -> None:
    write_sysfs(load_topology(DEFAULT_SPEC), str(tmp / "sys"))
    (tmp / "kubelet").mkdir()
    (tmp / "kubelet" / "cpu_manager_state").write_text(
        '{"policyName":"none","defaultCpuSet":"","checksum":1353318690}'
    )
    port = free_port()
    config = scratch_config(tmp, port)
    argv = exec_start(unit, config)
    step(f"ExecStart: {' '.join(argv)}")
    if argv[0] != INSTALLED:
        raise SystemExit(f"ExecStart runs {argv[0]}, not {INSTALLED}")

    sim = await NRISimulator.start(str(tmp / "nri.sock"))
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notify.bind(str(tmp / "notify.sock"))
    notify.setblocking(False)
    watchdog_usec = unit_watchdog_usec(unit)
    proc = await asyncio.create_subprocess_exec(
        *argv,
        env={**ENV, "NOTIFY_SOCKET": str(tmp / "notify.sock"), "WATCHDOG_USEC": watchdog_usec},
    )
    try:
        await sim.wait_registered(timeout=30)
        ready = await notification(notify, "READY", 30)
        step(f"READY=1 received (STATUS={ready.get('STATUS', '')!r})")
        await notification(notify, "WATCHDOG", int(watchdog_usec) / 1_000_000)
        step(f"WATCHDOG=1 received within WatchdogSec ({int(watchdog_usec) // 1_000_000} s)")
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=10) as r:
            if r.status != 200:
                raise SystemExit(f"/healthz answered {r.status}")
        step("/healthz 200")

        (spec,) = load_manifests([EXAMPLE])
        runtime = FakeRuntime(sim)
        pod = await runtime.launch(spec)
        main_app = runtime.applied(pod, "main-app")
        shared = {runtime.applied(pod, n).cpus for n in ("metrics-sidecar", "logging-sidecar")}
        step(
            f"pod-scope-mixed: main-app cpus {main_app.cpus} quota {main_app.quota}; "
            f"sidecars {shared}"
        )
        if runtime.cpus_of(pod, "main-app").size() != 2 or main_app.quota != -1:
            raise SystemExit("main-app did not get 2 exclusive CPUs with quota -1")
        if len(shared) != 1 or not shared.pop():
            raise SystemExit("the sidecars do not share one pod shared pool")

        loop = asyncio.get_running_loop()
        for args in (("--config", str(config), "--socket"), ("--config", str(config))):
            # The PodResources view is immediate; the checkpoint absorbs the decision journal
            # once the plugin is idle, within seconds.
            deadline = loop.time() + CHECKPOINT_LAG
            while "pod-scope-mixed" not in json.dumps(
                json.loads(cli("state", *args, "--output", "json"))
            ):
                if loop.time() > deadline:
                    raise SystemExit(f"nri-plrm state {' '.join(args)} does not show the pod")
                await asyncio.sleep(0.2)
            step(f"nri-plrm state {' '.join(args)}: shows pod-scope-mixed")
        print(cli("state", "--config", str(config)), file=sys.stderr)

        proc.send_signal(signal.SIGHUP)
        await asyncio.sleep(1)
        if proc.returncode is not None:
            raise SystemExit(f"SIGHUP stopped the plugin (exit {proc.returncode})")
        proc.send_signal(signal.SIGTERM)
        await notification(notify, "STOPPING", 30)
        code = await asyncio.wait_for(proc.wait(), 30)
        if code != 0:
            raise SystemExit(f"the plugin exited with {code} after SIGTERM")
        step("SIGHUP kept it running; SIGTERM: STOPPING=1 and exit 0")
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        notify.close()
        await sim.close()


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    tmp = Path(sys.argv[1])
    tmp.mkdir(parents=True, exist_ok=True)
    os.chmod(tmp, 0o700)
    asyncio.run(live(tmp, Path(sys.argv[2])))
    step("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
