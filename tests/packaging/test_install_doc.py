"""docs/install.md, followed literally: every snippet parses and every command is exercised.

``nri-plrm`` commands are run for real (paths of the installed package mapped onto the
repository), the ``state`` and ``/healthz`` ones against a running daemon registered with the
NRI simulator. Commands that need a node or a cluster (systemctl, kubectl, helm, apt, podman)
are checked against what they refer to: the unit, the package, the chart, the manifests. A
command no check knows fails the test, so a new line in the guide needs a check here.
scripts/ci-packaging.sh runs the same ``nri-plrm`` commands from the installed .deb.
"""

from __future__ import annotations

import asyncio
import json
import re
import shlex
import sys
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from fakenode import containerd_api, write_node
from plrm_daemon import Running, running_daemon
from plrm_runtime import FakeRuntime

from nri_plrm.config.file import parse_config
from nri_plrm.translate.manifest_to_pod import load_manifests

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[2]
GUIDE = REPO / "docs" / "install.md"
DEFAULT_CONFIG = tomllib.loads((REPO / "packaging" / "config.toml").read_text())
VALUES = yaml.safe_load((REPO / "packaging" / "helm" / "nri-plrm" / "values.yaml").read_text())
MANIFEST = [
    d for d in yaml.safe_load_all((REPO / "packaging/kubernetes/nri-plrm.yaml").read_text()) if d
]
NRI_TABLE = "io.containerd.nri.v1.nri"
NRI_PLRM = Path(sys.executable).with_name("nri-plrm")
CHECKPOINT_LAG = 15.0
"""Seconds the checkpoint may trail the plugin's decisions (its idle-time journal folding)."""


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", GUIDE.read_text(), flags=re.S)


def commands() -> list[list[str]]:
    """Every shell command of the guide, continuations joined, split on && and |."""
    found: list[list[str]] = []
    for block in blocks("sh"):
        for line in block.replace("\\\n", " ").splitlines():
            for part in re.split(r"&&|\|", line):
                if part.strip():
                    found.append(shlex.split(part))
    return found


def local_path(path: str) -> Path:
    """Where an installed path's content lives in the repository."""
    if path.startswith("/usr/share/nri-plrm/examples/"):
        return REPO / "examples" / path.rsplit("/", 1)[1]
    if path == "/etc/nri-plrm/config.toml":
        return REPO / "packaging" / "config.toml"
    return REPO / path


EXAMPLE_NAMESPACES = {
    pod.namespace for pod in load_manifests(sorted((REPO / "examples").glob("*.yaml")))
} - {"default"}


def of_kind(kind: str) -> dict[str, Any]:
    (found,) = [d for d in MANIFEST if d["kind"] == kind]
    return found


# --------------------------------------------------------------------------- snippets


def test_containerd_section() -> None:
    (snippet,) = blocks("toml")
    parsed = tomllib.loads(snippet)
    assert parsed["version"] == 3
    assert set(parsed) == {"version", "plugins"}, "NRI keys outside the plugin table are ignored"
    nri = parsed["plugins"][NRI_TABLE]
    assert nri["disable"] is False and nri["disable_connections"] is False
    assert nri["socket_path"] == DEFAULT_CONFIG["nri"]["socket"]
    for key in ("plugin_registration_timeout", "plugin_request_timeout"):
        assert re.fullmatch(r"\d+s", nri[key]), key
    assert float(nri["plugin_request_timeout"][:-1]) >= DEFAULT_CONFIG["nri"]["request_timeout"]


def test_kubelet_managers_none() -> None:
    (snippet,) = blocks("yaml")
    kubelet = yaml.safe_load(snippet)
    assert kubelet["kind"] == "KubeletConfiguration"
    assert kubelet["cpuManagerPolicy"] == "none"
    assert kubelet["memoryManagerPolicy"] == "None"
    assert kubelet["topologyManagerPolicy"] == "none"
    assert kubelet["featureGates"] == {"PodLevelResources": True}


def test_doctor_is_the_first_and_last_step() -> None:
    cmds = commands()
    assert cmds[0] == ["nri-plrm", "doctor"]
    assert cmds[-2] == ["nri-plrm", "doctor", "--config", "/etc/nri-plrm/config.toml"]
    daemonset = of_kind("DaemonSet")["metadata"]
    assert cmds[-1] == [
        "kubectl",
        "-n",
        daemonset["namespace"],
        "exec",
        f"daemonset/{daemonset['name']}",
        "--",
        "nri-plrm",
        "doctor",
    ]


# --------------------------------------------------------------------------- commands


def check_systemctl(argv: list[str]) -> None:
    action, unit = argv[1], argv[2]
    unit_text = (REPO / "systemd" / "nri-plrm.service").read_text()
    if unit == "nri-plrm":
        assert action in {"start", "stop", "restart", "status", "reload"}
        assert "ExecReload=" in unit_text
    else:
        assert unit in {"containerd", "kubelet"}
        assert f"{unit}.service" in unit_text, f"the unit does not order itself against {unit}"


def check_journalctl(argv: list[str]) -> None:
    assert argv[1:3] == ["-u", "nri-plrm"]


def check_test(argv: list[str]) -> None:
    assert argv[1:] == ["-S", DEFAULT_CONFIG["nri"]["socket"]]


def check_echo(argv: list[str]) -> None:
    assert len(argv) == 2


def check_containerd(argv: list[str]) -> None:
    assert argv[1:] == ["config", "dump"]


def check_grep(argv: list[str]) -> None:
    assert argv[-1] == NRI_TABLE


def check_rm(argv: list[str]) -> None:
    state = DEFAULT_CONFIG["state"]["kubelet_cpu_manager_state"]
    assert argv[1:] == ["-f", state, state.replace("cpu_manager", "memory_manager")]


def check_apt(argv: list[str]) -> None:
    if argv[0] == "apt-get":
        assert argv[1:] == ["install", "-y", "python3-venv"]
        assert "python3-venv" in (REPO / "packaging" / "deb" / "build.sh").read_text()
        return
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert argv[1] == "install"
    assert re.fullmatch(rf"\./dist/nri-plrm_{re.escape(version)}_[a-z0-9]+\.deb", argv[2])


def check_build(argv: list[str]) -> None:
    assert argv == ["packaging/deb/build.sh", "--output", "dist"]
    script = (REPO / "scripts" / "ci-packaging.sh").read_text()
    assert "packaging/deb/build.sh --output" in script


def check_podman(argv: list[str]) -> None:
    if argv[1] == "build":
        assert (REPO / argv[argv.index("-f") + 1]).is_file()
        assert argv[-1] == "."
        tag = argv[argv.index("-t") + 1]
        assert tag.endswith(
            ":"
            + of_kind("DaemonSet")["spec"]["template"]["spec"]["containers"][0]["image"].rsplit(
                ":", 1
            )[1]
        )
    else:
        assert argv[1] == "push"


def check_helm(argv: list[str]) -> None:
    assert argv[1:3] == ["install", "nri-plrm"]
    assert (REPO / argv[3] / "Chart.yaml").is_file()
    assert argv[argv.index("--namespace") + 1] == of_kind("Namespace")["metadata"]["name"]
    for i, word in enumerate(argv):
        if word == "--set":
            key = argv[i + 1].split("=", 1)[0]
            node: Any = VALUES
            for part in key.split("."):
                assert part in node, f"--set {key}: no such value"
                node = node[part]


def check_kubectl(argv: list[str], run_nri_plrm: Callable[[list[str]], None]) -> None:
    namespace = None
    if argv[1] == "-n":
        namespace, argv = argv[2], [argv[0], *argv[3:]]
    verb = argv[1]
    if verb in {"drain", "uncordon"}:
        assert argv[2] == "NODE"
    elif verb == "label":
        key, value = argv[4].split("=")
        if argv[2] == "node":
            assert VALUES["nodeSelector"] == {key: value}
        else:
            assert of_kind("Namespace")["metadata"]["labels"][key] == value
    elif verb == "create":
        assert argv[2] == "namespace" and len(argv) == 4
        assert argv[3] in {of_kind("Namespace")["metadata"]["name"]} | EXAMPLE_NAMESPACES
    elif verb == "wait":
        assert argv[2] == "--for=condition=Ready" and argv[3].startswith("pod/")
        (pod,) = load_manifests([REPO / "examples" / f"{argv[3][4:]}.yaml"])
        assert pod.namespace == namespace
    elif verb == "apply":
        assert local_path(argv[3]).is_file(), argv[3]
    elif verb == "rollout":
        assert namespace == of_kind("DaemonSet")["metadata"]["namespace"]
        assert argv[2:] == ["status", "daemonset/" + of_kind("DaemonSet")["metadata"]["name"]]
    elif verb == "exec":
        inner = argv[argv.index("--") + 1 :]
        if argv[2].startswith("daemonset/"):
            assert namespace == of_kind("DaemonSet")["metadata"]["namespace"]
            run_nri_plrm(inner)
        else:
            raise AssertionError(
                f"kubectl exec {argv[2]}: the examples run the pause image (no shell, no cat); "
                "read the result with nri-plrm state"
            )
    else:
        raise AssertionError(f"kubectl {verb}: no check for it")


async def run_cli(args: list[str]) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        str(NRI_PLRM),
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


def config_file(tmp: Path, running: Running) -> Path:
    """The running daemon's settings as a file for ``--config``, with the NRI timeouts mirrored
    from the guide's containerd section as step 1 says."""
    c = running.config
    nri = tomllib.loads(blocks("toml")[0])["plugins"][NRI_TABLE]
    path = tmp / "operator.toml"
    path.write_text(
        f'[nri]\nsocket = "{c.nri.socket}"\n'
        f"request_timeout = {float(nri['plugin_request_timeout'][:-1])}\n"
        f"registration_timeout = {float(nri['plugin_registration_timeout'][:-1])}\n"
        f'[state]\ndir = "{c.state.dir}"\n'
        f'kubelet_cpu_manager_state = "{c.state.kubelet_cpu_manager_state}"\n'
        f'[pod_resources]\nsocket = "{c.pod_resources.socket}"\n'
        f'[metrics]\naddress = "{c.metrics.address}"\n'
        f'[topology]\nsysfs_root = "{c.topology.sysfs_root}"\n'
    )
    parse_config(path.read_text(), str(path))
    return path


def test_every_command_is_exercised(tmp_path: Path) -> None:
    cmds = commands()
    assert len(cmds) >= 25
    assert NRI_PLRM.exists(), f"{NRI_PLRM}: the nri-plrm command next to this Python"

    async def scenario() -> list[str]:
        ran: list[str] = []
        async with running_daemon(tmp_path / "node") as running:
            runtime = FakeRuntime(running.sim)
            (spec,) = load_manifests([REPO / "examples" / "pod-scope-mixed.yaml"])
            await runtime.launch(spec)
            operator_config = config_file(tmp_path, running)
            # doctor reads containerd's and the kubelet's files as the guide writes them.
            containerd_socket = str(tmp_path / "containerd.sock")
            node_options = write_node(
                tmp_path / "host", running.config.nri.socket, containerd_socket
            )
            pending: list[list[str]] = []

            def run_nri_plrm(argv: list[str]) -> None:
                assert argv[0] == "nri-plrm"
                pending.append(argv[1:])

            for argv in cmds:
                tool = argv[0]
                if tool == "nri-plrm":
                    run_nri_plrm(argv)
                elif tool == "curl":
                    url = argv[-1]
                    assert url == f"http://{DEFAULT_CONFIG['metrics']['address']}/healthz"
                    live = running.metrics_url + "/healthz"
                    with urllib.request.urlopen(live, timeout=10) as response:
                        assert response.status == 200
                    ran.append("curl")
                elif tool == "kubectl":
                    check_kubectl(argv, run_nri_plrm)
                else:
                    checks: dict[str, Callable[[list[str]], None]] = {
                        "systemctl": check_systemctl,
                        "journalctl": check_journalctl,
                        "test": check_test,
                        "echo": check_echo,
                        "containerd": check_containerd,
                        "grep": check_grep,
                        "rm": check_rm,
                        "apt-get": check_apt,
                        "apt": check_apt,
                        "packaging/deb/build.sh": check_build,
                        "podman": check_podman,
                        "helm": check_helm,
                    }
                    assert tool in checks, f"{shlex.join(argv)}: no check for this command"
                    checks[tool](argv)
            for args in pending:
                mapped = [
                    str(operator_config)
                    if a == "/etc/nri-plrm/config.toml" and args[0] in ("state", "doctor")
                    else a
                    for a in args
                ]
                if mapped[0] == "doctor":
                    if "--config" not in mapped:  # its default is /etc/nri-plrm/config.toml
                        mapped += ["--config", str(operator_config)]
                    mapped += node_options
                expanded: list[str] = []
                for a in mapped:
                    if "*" in a:
                        expanded += sorted(str(p) for p in local_path(a).parent.glob("*.yaml"))
                    elif a.startswith(("/etc/", "/usr/share/")):
                        expanded.append(str(local_path(a)))
                    else:
                        expanded.append(a)
                if expanded[0] == "state":
                    expanded += ["--output", "json"]
                with containerd_api(containerd_socket):
                    code, out, err = await run_cli(expanded)
                assert code == 0, f"nri-plrm {shlex.join(args)}: exit {code}: {err}{out}"
                if expanded[0] == "state":
                    # The checkpoint absorbs the decision journal once the plugin is idle
                    # (at most CHECKPOINT_LAG seconds); the PodResources view is immediate.
                    deadline = asyncio.get_running_loop().time() + CHECKPOINT_LAG
                    while "pod-scope-mixed" not in out:
                        assert asyncio.get_running_loop().time() < deadline, (
                            f"nri-plrm {shlex.join(args)} does not show the running pod: {out}"
                        )
                        await asyncio.sleep(0.2)
                        code, out, err = await run_cli(expanded)
                        assert code == 0, err
                    json.loads(out)
                ran.append("nri-plrm " + args[0])
        return ran

    ran = asyncio.run(scenario())
    assert sorted(set(ran)) == [
        "curl",
        "nri-plrm check-config",
        "nri-plrm doctor",
        "nri-plrm simulate",
        "nri-plrm state",
        "nri-plrm topology",
    ]


def test_example_namespaces_exist_before_the_example_is_applied() -> None:
    """Applying an example into a namespace nobody created fails (``namespaces not found``)."""
    created = {"default"}
    applied = 0
    for argv in commands():
        if argv[:3] == ["kubectl", "create", "namespace"]:
            created.add(argv[3])
        elif argv[:2] == ["kubectl", "apply"] and "/examples/" in argv[3]:
            applied += 1
            for pod in load_manifests([local_path(argv[3])]):
                assert pod.namespace in created, f"{argv[3]}: namespace {pod.namespace} not created"
    assert applied


def slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    text = re.sub(r"[^a-z0-9 -]", "", heading.strip().lower())
    return text.replace(" ", "-")


def test_links_to_install_sections_resolve() -> None:
    anchors = {slug(h) for h in re.findall(r"^#+ (.+)$", GUIDE.read_text(), flags=re.M)}
    docs = REPO / "docs"
    for page in ("install.md", "troubleshooting.md"):
        links = re.findall(r"\]\((?:install\.md)?#([a-z0-9-]+)\)", (docs / page).read_text())
        assert links, page
        for anchor in links:
            assert anchor in anchors, f"{page}: link to #{anchor}: no such section in install.md"
