"""Real containerd for end-to-end tests: the kit beside the clone (``../shared/containerd``).

``Testbed`` starts a private containerd (2.4-dev or 2.1.9) under a directory of its own through
the kit's ``testbed`` script and drives pods with crictl as a kubelet would: kubelet-style
cgroup parents, the kubelet's translation of requests and limits into CRI resources, pod-level
resources in the sandbox config. ``PluginProcess`` runs the real ``nri-plrm run`` against the
kit's NRI socket. ``Cgroup`` reads what the kernel holds for a container. ``leftovers`` lists
what a stopped testbed left on the machine (processes, mounts, cgroups), which must be nothing.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.request import urlopen

from podres_raw import RawPodResourcesClient

KIT_ENV = "CONTAINERD_KIT"
"""Environment variable naming the kit's folder (default: ``../shared/containerd`` beside the
clone)."""

VERSIONS = ("2.4", "2.1")
"""The containerd builds of the kit: 2.4-dev (NRI v0.12.2) and v2.1.9 (NRI v0.8.0)."""

CGROUP_ROOT = Path("/sys/fs/cgroup")
PERIOD = 100_000
"""The kubelet's CFS period (us)."""
MIB = 1 << 20
POOL_BOUND = 5.0
"""Seconds within which a shared container's cgroup follows its pool in these tests."""


def kit_path() -> Path:
    """The kit's folder: ``$CONTAINERD_KIT``, else ``../shared/containerd`` beside the clone."""
    configured = os.environ.get(KIT_ENV)
    if configured:
        return Path(configured)
    return Path(__file__).resolve().parents[3] / "shared" / "containerd"


def kit_unavailable() -> str | None:
    """Why the real-containerd tests cannot run here, or None when they can."""
    kit = kit_path()
    if not (kit / "testbed").is_file():
        return f"no containerd kit at {kit} (set {KIT_ENV} to the kit's folder)"
    if sys.platform != "linux" or os.geteuid() != 0:
        return f"the containerd kit at {kit} needs root on Linux"
    if shutil.which("runc") is None:
        return f"the containerd kit at {kit} needs runc in PATH (apt-get install runc)"
    return None


def cgroup_v2() -> bool:
    """True on a unified (cgroup v2 only) hierarchy."""
    return (CGROUP_ROOT / "cgroup.controllers").exists()


# ------------------------------------------------------------------ kubelet-style configs


def cpu_shares(millis: int) -> int:
    """The kubelet's MilliCPUToShares (minimum 2)."""
    return max(2, millis * 1024 // 1000)


def linux_resources(
    request_millis: int = 0, limit_millis: int = 0, memory: int = 0
) -> dict[str, int]:
    """The CRI ``LinuxContainerResources`` the kubelet writes for these requests and limits
    (a request defaults to the limit; no request and no limit: shares 2, no quota)."""
    request = request_millis or limit_millis
    resources = {"cpu_period": PERIOD, "cpu_shares": cpu_shares(request)}
    if limit_millis:
        resources["cpu_quota"] = max(1000, limit_millis * PERIOD // 1000)
    if memory:
        resources["memory_limit_in_bytes"] = memory
    return resources


QOS_PARENTS = {
    "guaranteed": "/kubepods",
    "burstable": "/kubepods/burstable",
    "besteffort": "/kubepods/besteffort",
}


@dataclass
class Pod:
    """A pod as the kubelet hands it to CRI. ``budget`` = (CPU millis, memory bytes) are its
    pod-level resources (requests == limits) or, for a classic pod, the kubelet's aggregate of
    its containers, written to the sandbox config either way (as the kubelet does)."""

    name: str
    qos: str
    budget: tuple[int, int] | None = None
    namespace: str = "default"
    uid: str = field(default_factory=lambda: str(uuid.uuid4()))
    sandbox_id: str = ""

    @property
    def cgroup_parent(self) -> str:
        return f"{QOS_PARENTS[self.qos]}/pod{self.uid}"

    def labels(self) -> dict[str, str]:
        return {
            "io.kubernetes.pod.name": self.name,
            "io.kubernetes.pod.namespace": self.namespace,
            "io.kubernetes.pod.uid": self.uid,
        }

    def config(self, log_dir: Path) -> dict[str, Any]:
        linux: dict[str, Any] = {
            "cgroup_parent": self.cgroup_parent,
            "security_context": {"namespace_options": {"network": 2, "pid": 1, "ipc": 0}},
        }
        if self.budget is not None:
            millis, memory = self.budget
            linux["resources"] = linux_resources(millis, millis, memory)
        return {
            "metadata": {
                "name": self.name,
                "namespace": self.namespace,
                "uid": self.uid,
                "attempt": 0,
            },
            "labels": self.labels(),
            "log_directory": str(log_dir / self.uid),
            "linux": linux,
        }

    def inherited(self) -> dict[str, int]:
        """The resources of a container without requests or limits in this pod: the pod's
        limits when it has pod-level resources (the kubelet's getCPULimit / getMemoryLimit),
        else BestEffort's shares 2."""
        if self.budget is None:
            return linux_resources()
        millis, memory = self.budget
        return linux_resources(millis, millis, memory)


EXCLUSIVE_1CPU = linux_resources(1000, 1000, 64 * MIB)
"""A Guaranteed container of 1 CPU and 64 MiB, as the kubelet writes it."""


def container_config(
    pod: Pod,
    name: str,
    resources: Mapping[str, int],
    command: Iterable[str] = ("sleep", "3600"),
    attempt: int = 0,
) -> dict[str, Any]:
    """A busybox container of ``pod`` with these CRI resources."""
    return {
        "metadata": {"name": name, "attempt": attempt},
        "image": {"image": "docker.io/library/busybox:testbed"},
        "command": list(command),
        "log_path": f"{name}.log",
        "labels": {"io.kubernetes.container.name": name, **pod.labels()},
        "linux": {
            "resources": dict(resources),
            "security_context": {"namespace_options": {"network": 2, "pid": 1, "ipc": 0}},
        },
    }


# ------------------------------------------------------------------ the kernel's view


@dataclass(frozen=True)
class Cgroup:
    """A container's cgroup (its cgroupfs path, e.g. ``/kubepods/pod<uid>/<id>``)."""

    path: str

    def _read(self, controller: str, v1_file: str, v2_file: str) -> str:
        if cgroup_v2():
            target = CGROUP_ROOT / self.path.lstrip("/") / v2_file
        else:
            target = CGROUP_ROOT / controller / self.path.lstrip("/") / v1_file
        return target.read_text().strip()

    def cpus(self) -> str:
        return self._read("cpuset", "cpuset.cpus", "cpuset.cpus")

    def mems(self) -> str:
        return self._read("cpuset", "cpuset.mems", "cpuset.mems")

    def quota(self) -> int:
        """The CFS quota in us; -1 for none."""
        if cgroup_v2():
            value = self._read("cpu", "", "cpu.max").split()[0]
            return -1 if value == "max" else int(value)
        return int(self._read("cpu", "cpu.cfs_quota_us", ""))


def pod_cgroup_dirs(uids: Iterable[str]) -> list[Path]:
    """Every cgroup directory of these pods (``pod<uid>``) in any hierarchy."""
    names = {f"pod{uid}" for uid in uids}
    if not names:
        return []
    found = []
    tops = [CGROUP_ROOT] if cgroup_v2() else [p for p in CGROUP_ROOT.iterdir() if p.is_dir()]
    for top in tops:
        kubepods = top / "kubepods"
        if not kubepods.is_dir():
            continue
        for parent in (kubepods, kubepods / "burstable", kubepods / "besteffort"):
            found.extend(parent / name for name in names if (parent / name).is_dir())
    return found


def leftovers(root: Path, uids: Iterable[str]) -> list[str]:
    """What a testbed under ``root`` left behind after ``down``: processes that name it (its
    containerd, shims), mounts below it and the cgroups of the pods ``uids``."""
    left = []
    needle = str(root).encode()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        if needle in cmdline:
            command = cmdline.replace(b"\0", b" ").decode(errors="replace")
            left.append(f"process {proc.name}: {command[:200]}")
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        mountpoint = line.split()[4]
        if mountpoint == str(root) or mountpoint.startswith(f"{root}/"):
            left.append(f"mount {mountpoint}")
    left.extend(f"cgroup {path}" for path in pod_cgroup_dirs(uids))
    return left


# ------------------------------------------------------------------ containerd


class KitError(AssertionError):
    """A kit or crictl command failed; carries its output."""


class Testbed:
    """One private containerd of the kit, under ``root`` (a short new directory)."""

    __test__ = False

    def __init__(self, version: str, root: Path, kit: Path | None = None) -> None:
        self.version = version
        self.root = root
        self.kit = kit or kit_path()
        self.env: dict[str, str] = {}
        self.pods: list[Pod] = []
        """Every pod run here (their cgroups are checked after ``down``)."""
        self.specs = root / "specs"
        self.logs = root / "pods"

    def _script(self, *args: str, timeout: float = 120) -> str:
        done = subprocess.run(
            [str(self.kit / "testbed"), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
        if done.returncode != 0:
            raise KitError(
                f"testbed {' '.join(args)}: exit {done.returncode}\n{done.stderr[-3000:]}"
            )
        return done.stdout

    def up(self) -> None:
        self._script("up", str(self.root), "--containerd", self.version)
        env_file = self.root / "testbed.env"
        self.env = dict(
            line.split("=", 1) for line in env_file.read_text().splitlines() if "=" in line
        )
        self.specs.mkdir(exist_ok=True)
        self.logs.mkdir(exist_ok=True)

    def down(self) -> None:
        self._script("down", str(self.root))

    def restart(self) -> None:
        """Restart containerd (pods keep running; plugins lose their connection)."""
        self._script("restart", str(self.root))

    @property
    def nri_socket(self) -> str:
        return self.env["NRI_SOCKET"]

    @property
    def containerd_log(self) -> Path:
        return Path(self.env["CONTAINERD_LOG"])

    def crictl(self, *args: str, timeout: float = 60) -> str:
        """``crictl ARGS`` against this containerd; raises KitError with crictl's message."""
        done = subprocess.run(
            [str(self.kit / "testbed"), "crictl", str(self.root), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
        if done.returncode != 0:
            raise KitError(f"crictl {' '.join(args)}: {done.stderr.strip()}")
        return done.stdout.strip()

    def _spec_file(self, name: str, body: Mapping[str, Any]) -> str:
        path = self.specs / f"{name}-{uuid.uuid4().hex[:8]}.json"
        path.write_text(json.dumps(body))
        return str(path)

    def run_pod(self, pod: Pod) -> str:
        """``crictl runp``: the sandbox id (also kept in ``pod.sandbox_id``)."""
        self.pods.append(pod)
        config = self._spec_file(f"pod-{pod.name}", pod.config(self.logs))
        pod.sandbox_id = self.crictl("runp", config)
        return pod.sandbox_id

    def create(self, pod: Pod, name: str, resources: Mapping[str, int], **kw: Any) -> str:
        """``crictl create`` of a container in ``pod``: its id."""
        ctr = self._spec_file(f"ctr-{name}", container_config(pod, name, resources, **kw))
        sandbox = self._spec_file(f"pod-{pod.name}", pod.config(self.logs))
        return self.crictl("create", pod.sandbox_id, ctr, sandbox)

    def start(self, cid: str) -> None:
        self.crictl("start", cid)

    def run_container(self, pod: Pod, name: str, resources: Mapping[str, int], **kw: Any) -> str:
        """create + start; the container's id."""
        cid = self.create(pod, name, resources, **kw)
        self.start(cid)
        return cid

    def run_best_effort_pods(self, count: int, workers: int = 4) -> list[str]:
        """``count`` BestEffort pods of one ``sleep`` container each, started by ``workers``
        concurrent crictl clients; their container ids."""

        def one(index: int) -> str:
            pod = Pod(f"best-effort-{index}", "besteffort")
            self.run_pod(pod)
            return self.run_container(pod, "work", pod.inherited())

        with ThreadPoolExecutor(workers) as pool:
            return list(pool.map(one, range(count)))

    def remove_pod(self, pod: Pod) -> None:
        """``crictl stopp`` + ``rmp`` (the kubelet's removal of a pod)."""
        self.crictl("stopp", pod.sandbox_id)
        self.crictl("rmp", pod.sandbox_id)

    def inspect(self, cid: str) -> dict[str, Any]:
        info: dict[str, Any] = json.loads(self.crictl("inspect", "-o", "json", cid))
        return info

    def state(self, cid: str) -> str:
        """CONTAINER_CREATED, CONTAINER_RUNNING or CONTAINER_EXITED."""
        return str(self.inspect(cid)["status"]["state"])

    def cgroup(self, cid: str) -> Cgroup:
        return Cgroup(self.inspect(cid)["info"]["runtimeSpec"]["linux"]["cgroupsPath"])

    def follows(self, cid: str, cpus: str, bound: float = POOL_BOUND) -> float:
        """Wait until the container's cgroup holds ``cpus``; the seconds it took."""
        cgroup = self.cgroup(cid)
        return wait_until(
            lambda: cgroup.cpus() == cpus,
            bound,
            lambda: f"{cid[:12]} holds {cgroup.cpus()}, not {cpus}, after {bound} s",
        )

    def leftovers(self) -> list[str]:
        return leftovers(self.root, (pod.uid for pod in self.pods))


def short_dir(prefix: str) -> Path:
    """A new directory for a testbed: short, since unix socket paths are (80 characters at
    most for the kit)."""
    return Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))


# ------------------------------------------------------------------ the plugin


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PluginProcess:
    """``nri-plrm run --config FILE`` against a testbed's NRI socket, every path under
    ``work``; ``extra`` is appended to the config (e.g. a ``[topology_manager]`` table)."""

    REGISTERED = "registered and synchronized with containerd"

    def __init__(self, work: Path, nri_socket: str, cri_socket: str, extra: str = "") -> None:
        self.work = work
        work.mkdir(parents=True, exist_ok=True)
        self.log = work / "plugin.log"
        self.podresources = str(work / "pod-resources.sock")
        self.port = free_port()
        self.config = work / "config.toml"
        self.config.write_text(
            f"""
[nri]
socket = "{nri_socket}"
cri_socket = "{cri_socket}"
[state]
dir = "{work}/state"
kubelet_cpu_manager_state = ""
[pod_resources]
socket = "{self.podresources}"
[metrics]
address = "127.0.0.1:{self.port}"
[log]
level = "info"
[topology]
sysfs_root = "/sys"
cgroup_root = ""
{extra}"""
        )
        self.proc: subprocess.Popen[bytes] | None = None

    def registrations(self) -> int:
        return self.log.read_text().count(self.REGISTERED) if self.log.exists() else 0

    def start(self, timeout: float = 30) -> None:
        """Start the plugin and wait until it registered and synchronized."""
        seen = self.registrations()
        env = {k: v for k, v in os.environ.items() if k != "NOTIFY_SOCKET"}
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "nri_plrm.cli", "run", "--config", str(self.config)],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=out,
                env=env,
            )
        self.wait_registered(seen, timeout)

    def wait_registered(self, seen: int, timeout: float = 30) -> None:
        """Wait for registration number ``seen + 1`` (a start or a reconnect)."""
        wait_until(
            lambda: self.registrations() > seen,
            timeout,
            lambda: f"plugin did not register; its log:\n{self.tail()}",
            poll=0.05,
        )

    def wait_logged(self, text: str, timeout: float = 10) -> None:
        """Wait until the plugin logged ``text`` (its log lines are written in batches)."""
        wait_until(
            lambda: text in self.log.read_text(),
            timeout,
            lambda: f"{text!r} not logged; the plugin's log:\n{self.tail()}",
            poll=0.05,
        )

    def tail(self, chars: int = 6000) -> str:
        return self.log.read_text()[-chars:] if self.log.exists() else "(no log)"

    def kill(self) -> None:
        """SIGKILL, as the OOM killer would."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> int:
        """SIGTERM; the exit code (the plugin was asked to stop if it still ran)."""
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(20)

    def pods(self) -> dict[str, dict[str, Any]]:
        """PodResources ``List`` from the plugin's socket, by pod name."""
        client = RawPodResourcesClient(self.podresources)
        try:
            return {pod["name"]: pod for pod in client.list()}
        finally:
            client.close()

    def metric(self, name: str) -> dict[tuple[tuple[str, str], ...], float]:
        """The samples of a metric on /metrics, by their sorted labels."""
        with urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as reply:
            text = reply.read().decode()
        samples = {}
        pattern = re.compile(rf"^{re.escape(name)}(\{{[^}}]*\}})? (\S+)$")
        for line in text.splitlines():
            if (match := pattern.match(line)) is not None:
                labels = tuple(sorted(re.findall(r'(\w+)="([^"]*)"', match.group(1) or "")))
                samples[labels] = float(match.group(2))
        return samples


def all_follow(cgroups: Iterable[Cgroup], cpus: str, bound: float = POOL_BOUND) -> float:
    """Wait until every one of these cgroups holds ``cpus``; the seconds until the last did."""
    waiting = list(cgroups)
    start = time.monotonic()
    while waiting:
        waiting = [cgroup for cgroup in waiting if cgroup.cpus() != cpus]
        if time.monotonic() - start > bound:
            paths = ", ".join(c.path for c in waiting[:3])
            raise AssertionError(f"{len(waiting)} cgroups not on {cpus} after {bound} s: {paths}")
        if waiting:
            time.sleep(0.005)
    return time.monotonic() - start


def plugin_on(bed: Testbed, extra: str = "") -> PluginProcess:
    """A plugin process (not started) for ``bed``, its files in ``bed.root/plugin``."""
    return PluginProcess(bed.root / "plugin", bed.nri_socket, bed.env["CONTAINERD_SOCKET"], extra)


def wait_until(
    check: Callable[[], bool],
    timeout: float,
    message: Callable[[], str],
    poll: float = 0.02,
) -> float:
    """Poll ``check`` until true; the seconds it took. Fails with ``message()`` at timeout."""
    start = time.monotonic()
    while not check():
        if time.monotonic() - start > timeout:
            raise AssertionError(message())
        time.sleep(poll)
    return time.monotonic() - start
