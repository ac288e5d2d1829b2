"""docs/operations.md (issue 31 item 12): every command of the upgrade, rollback and removal
procedures is checked against what it refers to (the package, the chart, the manifests, the
plugin's defaults and messages); a command no check knows fails the test."""

from __future__ import annotations

import re
import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from nri_plrm.base.quantity import memory_bytes
from nri_plrm.checkpoint.store import NewerFormatError
from nri_plrm.cli import build_parser
from nri_plrm.config.settings import TOPOLOGY_POLICIES, TOPOLOGY_SCOPES, Config
from nri_plrm.podsource import nrt
from nri_plrm.topology.machines import load_topology
from nri_plrm.topology.synthetic import DEFAULT_SPEC

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[2]
GUIDE = REPO / "docs" / "operations.md"
CHART = REPO / "packaging" / "helm" / "nri-plrm"
VALUES = yaml.safe_load((CHART / "values.yaml").read_text())
EXAMPLE = tomllib.loads((REPO / "packaging" / "config.toml").read_text())
MANIFEST = [
    d for d in yaml.safe_load_all((REPO / "packaging/kubernetes/nri-plrm.yaml").read_text()) if d
]
CRD = yaml.safe_load((CHART / "crds" / "noderesourcetopologies.yaml").read_text())


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", GUIDE.read_text(), flags=re.S)


def commands() -> list[list[str]]:
    return [
        shlex.split(line)
        for block in blocks("sh")
        for line in block.replace("\\\n", " ").splitlines()
        if line.strip()
    ]


def of_kind(kind: str) -> dict[str, Any]:
    (found,) = [d for d in MANIFEST if d["kind"] == kind]
    return found


NAMESPACE = of_kind("DaemonSet")["metadata"]["namespace"]
DAEMONSET = of_kind("DaemonSet")["metadata"]["name"]
STATE_DIR = Config().state.dir
KUBELET_DIR = str(Path(Config().state.kubelet_cpu_manager_state).parent)


def check_nri_plrm(argv: list[str]) -> None:
    args = build_parser().parse_args(argv[1:])
    assert args.command == "doctor", argv
    assert getattr(args, "config", "/etc/nri-plrm/config.toml") == "/etc/nri-plrm/config.toml"


def check_apt(argv: list[str]) -> None:
    if argv[1] == "purge":
        assert argv[2:] == ["nri-plrm"]
        return
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert argv[1] == "install"
    assert re.fullmatch(rf"\./dist/nri-plrm_{re.escape(version)}_[a-z0-9]+\.deb", argv[2])


def check_systemctl(argv: list[str]) -> None:
    assert argv[1] in {"start", "stop", "status"} and argv[2] in {"nri-plrm", "kubelet"}, argv


def check_helm(argv: list[str]) -> None:
    verb, release = argv[1], argv[2]
    assert release == VALUES.get("fullnameOverride") or release == DAEMONSET
    assert argv[argv.index("--namespace") + 1] == NAMESPACE
    if verb == "upgrade":
        assert (REPO / argv[3] / "Chart.yaml").is_file()
        for i, word in enumerate(argv):
            if word == "--set":
                node: Any = VALUES
                for part in argv[i + 1].split("=", 1)[0].split("."):
                    assert part in node, f"--set {argv[i + 1]}: no such value"
                    node = node[part]
    else:
        assert verb in {"rollback", "uninstall"} and len(argv) == 5, argv


def check_kubectl(argv: list[str]) -> None:
    if argv[1] == "-n":
        assert argv[2] == NAMESPACE
        argv = [argv[0], *argv[3:]]
    verb = argv[1]
    if verb in {"drain", "uncordon"}:
        assert argv[2] == "NODE"
    elif verb == "rollout":
        assert argv[2:] == ["status", f"daemonset/{DAEMONSET}"]
    elif verb == "exec":
        assert argv[2] == f"daemonset/{DAEMONSET}"
        check_nri_plrm(argv[argv.index("--") + 1 :])
    elif verb == "label":
        assert argv[2:4] == ["node", "NODE"]
        ((key, _),) = VALUES["nodeSelector"].items()
        assert argv[4] == f"{key}-", "removes the DaemonSet's node selector label"
    elif verb == "delete":
        check_kubectl_delete(argv[2:])
    else:
        raise AssertionError(f"kubectl {verb}: no check for it")


def check_kubectl_delete(args: list[str]) -> None:
    if args[0] == "-f":
        path = REPO / args[1]
        kinds = [d["kind"] for d in yaml.safe_load_all(path.read_text()) if d]
        assert kinds[0] in {"Namespace", "CustomResourceDefinition"}, (path, kinds)
    elif args[0] == "namespace":
        assert args[1:] == [NAMESPACE]
    else:
        resource = f"{nrt.PLURAL}.{nrt.GROUP}"
        assert args[0] == resource
        assert CRD["spec"]["names"]["plural"] == nrt.PLURAL and CRD["spec"]["group"] == nrt.GROUP
        written = nrt.nrt_object("NODE", "uid", [], load_topology(DEFAULT_SPEC), "none", "pod")
        if args[1] == "-l":
            ((key, value),) = written["metadata"]["labels"].items()
            assert args[2:] == [f"{key}={value}"]
        else:
            assert args[1:] == [written["metadata"]["name"]], "named after the node"


def check_rm(argv: list[str]) -> None:
    if argv[1] == "-rf":
        assert argv[2:] == [STATE_DIR] == [VALUES["hostPaths"]["stateDir"]]
    else:
        assert argv[1:] == [
            "-f",
            f"{KUBELET_DIR}/cpu_manager_state",
            f"{KUBELET_DIR}/memory_manager_state",
        ]


def check_mv(argv: list[str]) -> None:
    assert argv[1] == STATE_DIR and argv[2] == STATE_DIR + ".newer"


CHECKS: dict[str, Callable[[list[str]], None]] = {
    "nri-plrm": check_nri_plrm,
    "apt": check_apt,
    "systemctl": check_systemctl,
    "helm": check_helm,
    "kubectl": check_kubectl,
    "rm": check_rm,
    "mv": check_mv,
}


def test_every_command_is_checked() -> None:
    cmds = commands()
    assert len(cmds) >= 25
    for argv in cmds:
        assert argv[0] in CHECKS, f"{shlex.join(argv)}: no check for this command"
        CHECKS[argv[0]](argv)


def test_removal_drains_first_and_restores_the_kubelet_before_uncordon() -> None:
    text = GUIDE.read_text()
    removal = text.split("\n## Removal\n", 1)[1].split("\n## ", 1)[0]
    steps = re.findall(r"^### (\d)\. (.+)$", removal, flags=re.M)
    assert [n for n, _ in steps] == ["1", "2", "3", "4", "5"]
    order = [shlex.join(c) for c in commands()]
    drain = order.index("kubectl drain NODE --ignore-daemonsets --delete-emptydir-data")
    purge = order.index("apt purge nri-plrm")
    stop = order.index("systemctl stop kubelet")
    rm = order.index(f"rm -f {KUBELET_DIR}/cpu_manager_state {KUBELET_DIR}/memory_manager_state")
    start = order.index("systemctl start kubelet")
    assert drain < purge < stop < rm < start < len(order) - 1
    assert order[start + 1] == "kubectl uncordon NODE"


def test_kubelet_configuration_mirrors_the_plugins_defaults() -> None:
    (kubelet,) = [yaml.safe_load(b) for b in blocks("yaml")]
    assert kubelet["kind"] == "KubeletConfiguration"
    assert kubelet["cpuManagerPolicy"] == "static"
    assert kubelet["memoryManagerPolicy"] == "Static"
    assert kubelet["topologyManagerPolicy"] == EXAMPLE["topology_manager"]["policy"]
    assert kubelet["topologyManagerPolicy"] in TOPOLOGY_POLICIES
    assert kubelet["topologyManagerScope"] == EXAMPLE["topology_manager"]["scope"]
    assert kubelet["topologyManagerScope"] in TOPOLOGY_SCOPES
    assert kubelet["reservedSystemCPUs"] == EXAMPLE["cpu_manager"]["reserved_cpus"]
    reserved = [
        (e["numaNode"], memory_bytes(e["limits"]["memory"])) for e in kubelet["reservedMemory"]
    ]
    assert reserved == [
        (e.numa_node, e.limits["memory"]) for e in Config().memory_manager.reserved_memory
    ]


def test_downgrade_refusal_points_to_this_guide() -> None:
    message = str(NewerFormatError("checkpoint", Path(STATE_DIR) / "state.json", 2, 1))
    assert '(docs/operations.md, "Rollback and downgrade")' in message
    assert "\n## Rollback and downgrade\n" in GUIDE.read_text()
    quoted = " ".join(GUIDE.read_text().split("\n## Rollback and downgrade\n", 1)[1].split())
    assert " ".join(message.split(" aside ")[0].split()) in quoted


def test_troubleshooting_quotes_the_refusals() -> None:
    from nri_plrm.cli.run import missing_config_hint

    text = " ".join((REPO / "docs" / "troubleshooting.md").read_text().split())
    refusal = str(NewerFormatError("checkpoint", Path(STATE_DIR) / "state.json", 7, 3))
    quoted = refusal.split(" (a newer")[0].replace("7", "N").replace("3", "M")
    assert f"not starting: state directory {STATE_DIR}: {quoted}" in text
    assert missing_config_hint("/etc/nri-plrm/config.toml").split(" (every")[0] in text
