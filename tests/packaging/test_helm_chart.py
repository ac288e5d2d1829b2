"""The Helm chart, rendered by Helm's own engine, and the plain DaemonSet manifest made from it."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nri_plrm.config.file import parse_config
from nri_plrm.scheduler.settings import parse_settings

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

if os.environ.get("NRI_PLRM_REQUIRE_HELM") != "1":
    pytest.importorskip("helm_python", reason="helm-python-sdk renders the chart")
import helm_python

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "packaging" / "helm" / "nri-plrm"
DEFAULT_TABLES = frozenset(yaml.safe_load((CHART / "values.yaml").read_text())["config"])


def _load_render() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "nri_plrm_render_manifest", REPO / "packaging" / "kubernetes" / "render.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


render_module = _load_render()


def objects(values: dict[str, Any] | None = None) -> dict[tuple[str, str], dict[str, Any]]:
    """Rendered objects keyed by (kind, name)."""
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for text in render_module.render(values).values():
        for doc in yaml.safe_load_all(text):
            if doc:
                found[(doc["kind"], doc["metadata"]["name"])] = doc
    return found


def daemonset(values: dict[str, Any] | None = None) -> dict[str, Any]:
    return objects(values)[("DaemonSet", "nri-plrm")]


def container(ds: dict[str, Any]) -> dict[str, Any]:
    (only,) = ds["spec"]["template"]["spec"]["containers"]
    return only


def config_of(values: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
    cm = objects(values)[("ConfigMap", "nri-plrm")]
    text = cm["data"]["config.toml"]
    return text, tomllib.loads(text)


def mounts(ds: dict[str, Any]) -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    """mountPath -> (volumeMount, volume)."""
    volumes = {v["name"]: v for v in ds["spec"]["template"]["spec"]["volumes"]}
    return {m["mountPath"]: (m, volumes[m["name"]]) for m in container(ds)["volumeMounts"]}


def test_chart_lints_clean() -> None:
    result = helm_python.lint(str(CHART), strict=True)
    assert result["errors"] == []
    assert all(m["severity"] <= 1 for m in result["messages"]), result["messages"]


def test_plain_manifest_is_the_rendered_chart() -> None:
    committed = (REPO / "packaging" / "kubernetes" / "nri-plrm.yaml").read_text()
    assert committed == render_module.static_manifest(), (
        "packaging/kubernetes/nri-plrm.yaml is stale: run python packaging/kubernetes/render.py"
    )
    kinds = [doc["kind"] for doc in yaml.safe_load_all(committed) if doc]
    assert kinds == [
        "Namespace",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "ConfigMap",
        "DaemonSet",
    ]
    (namespace,) = [d for d in yaml.safe_load_all(committed) if d and d["kind"] == "Namespace"]
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"


def test_values_cover_every_config_key() -> None:
    defaults = tomllib.loads((REPO / "packaging" / "config.toml").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())["config"]
    for table, keys in defaults.items():
        for key in keys:
            assert key in values.get(table, {}), f"values.yaml config.{table}.{key} missing"


def test_rendered_config_is_valid_and_matches_values() -> None:
    text, parsed = config_of()
    config = parse_config(text, "configmap")
    values = yaml.safe_load((CHART / "values.yaml").read_text())["config"]
    assert parsed == values
    assert config.metrics.address == "0.0.0.0:9740"
    assert config.topology.sysfs_root == "/host/sys"
    assert config.kubernetes.enabled is True


def test_config_wiring_between_configmap_and_pod() -> None:
    ds = daemonset()
    c = container(ds)
    _, cfg = config_of()
    assert "command" not in c, "the image's ENTRYPOINT must stay in effect"
    assert c["args"] == ["run", "--config", "/etc/nri-plrm/config.toml"]
    mount, volume = mounts(ds)["/etc/nri-plrm"]
    assert mount["readOnly"] is True
    assert volume["configMap"]["name"] == "nri-plrm"
    env = {e["name"]: e for e in c["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert cfg["kubernetes"]["node_name"] == ""
    template = ds["spec"]["template"]
    assert len(template["metadata"]["annotations"]["checksum/config"]) == 64
    other = daemonset({"config": {"log": {"level": "debug"}}})
    assert (
        other["spec"]["template"]["metadata"]["annotations"]["checksum/config"]
        != template["metadata"]["annotations"]["checksum/config"]
    )


def test_host_mounts_match_the_config_paths() -> None:
    ds = daemonset()
    _, cfg = config_of()
    m = mounts(ds)
    nri_dir = str(Path(cfg["nri"]["socket"]).parent)
    mount, volume = m[nri_dir]
    assert mount["readOnly"] is True
    assert volume["hostPath"] == {"path": "/var/run/nri", "type": "DirectoryOrCreate"}
    mount, volume = m[str(Path(cfg["nri"]["cri_socket"]).parent)]
    assert mount["readOnly"] is True
    assert volume["hostPath"] == {"path": "/run/containerd", "type": "DirectoryOrCreate"}
    without = daemonset({"config": {"nri": {"cri_socket": ""}}})
    assert "cri-socket" not in {v["name"] for v in without["spec"]["template"]["spec"]["volumes"]}
    mount, volume = m[cfg["state"]["dir"]]
    assert not mount.get("readOnly", False)
    assert volume["hostPath"] == {"path": "/var/lib/nri-plrm", "type": "DirectoryOrCreate"}
    assert str(Path(cfg["pod_resources"]["socket"]).parent) == cfg["state"]["dir"]
    mount, volume = m[cfg["topology"]["sysfs_root"]]
    assert mount["readOnly"] is True
    assert volume["hostPath"] == {"path": "/sys", "type": "Directory"}
    mount, volume = m[cfg["state"]["kubelet_cpu_manager_state"]]
    assert mount["readOnly"] is True
    assert volume["hostPath"] == {"path": "/var/lib/kubelet/cpu_manager_state", "type": "File"}
    mount, volume = m["/host/kubelet/pod-resources"]
    assert mount["readOnly"] is True
    assert volume["hostPath"]["path"] == "/var/lib/kubelet/pod-resources"
    assert m["/tmp"][1]["emptyDir"]["medium"] == "Memory"


def test_probes_and_prometheus_annotations_follow_the_metrics_address() -> None:
    for address, port in (("0.0.0.0:9740", 9740), ("[::]:9100", 9100), (":9200", 9200)):
        ds = daemonset({"config": {"metrics": {"address": address}}})
        c = container(ds)
        assert c["ports"] == [{"name": "metrics", "containerPort": port, "protocol": "TCP"}]
        for probe in ("livenessProbe", "startupProbe"):
            assert c[probe]["httpGet"] == {"path": "/healthz", "port": "metrics"}
            assert c[probe]["periodSeconds"] > 0 and c[probe]["failureThreshold"] > 0
        annotations = ds["spec"]["template"]["metadata"]["annotations"]
        assert annotations["prometheus.io/scrape"] == "true"
        assert annotations["prometheus.io/port"] == str(port)
        assert annotations["prometheus.io/path"] == "/metrics"
    off = daemonset({"prometheusAnnotations": False})
    assert "prometheus.io/scrape" not in off["spec"]["template"]["metadata"]["annotations"]


def test_default_probes_restart_a_stuck_loop_but_not_a_slow_start() -> None:
    """/healthz is 503 from 1 s of a stuck loop (issue 12): the liveness probe must act on that
    within half a minute, outlast a Synchronize stall of containerd's 2 s budget and a containerd
    restart, and leave registration to the startup probe."""
    from nri_plrm.daemon.liveness import LOOP_STALL_AFTER

    c = container(daemonset({}))
    live, start = c["livenessProbe"], c["startupProbe"]
    restart_after = live["periodSeconds"] * live["failureThreshold"]
    assert 10 <= restart_after <= 30
    assert live["failureThreshold"] >= 3
    assert live["periodSeconds"] > 2 + LOOP_STALL_AFTER, "one stall fails at most one probe"
    assert start["periodSeconds"] * start["failureThreshold"] >= 60, "slow start is not killed"


@pytest.mark.parametrize(
    ("address", "rule"),
    [
        ("127.0.0.1:9740", "must listen on all addresses"),
        ("", "must be host:port"),
        ("9740", "must be host:port"),
    ],
)
def test_unprobeable_metrics_address_fails_the_render(address: str, rule: str) -> None:
    with pytest.raises(helm_python.HelmError, match=rule) as failure:
        render_module.render({"config": {"metrics": {"address": address}}})
    assert "config.metrics.address" in str(failure.value)


def test_security_context_scheduling_and_resources() -> None:
    ds = daemonset()
    pod = ds["spec"]["template"]["spec"]
    sc = container(ds)["securityContext"]
    assert sc["runAsUser"] == 0 and sc["privileged"] is False
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    assert "hostNetwork" not in pod and "hostPID" not in pod
    assert pod["nodeSelector"] == {"nri-plrm/enabled": "true"}
    assert {"operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    assert {"operator": "Exists", "effect": "NoExecute"} in pod["tolerations"]
    assert pod["priorityClassName"] == "system-node-critical"
    resources = container(ds)["resources"]
    assert resources["requests"]["cpu"] and resources["requests"]["memory"]
    assert resources["limits"]["memory"]
    assert "cpu" not in resources["limits"], "the agent itself must not be Guaranteed/pinned"
    selector = ds["spec"]["selector"]["matchLabels"]
    assert selector.items() <= ds["spec"]["template"]["metadata"]["labels"].items()


def test_rbac_for_the_pod_cache() -> None:
    objs = objects()
    ds = objs[("DaemonSet", "nri-plrm")]
    pod = ds["spec"]["template"]["spec"]
    account = objs[("ServiceAccount", "nri-plrm")]
    assert pod["serviceAccountName"] == account["metadata"]["name"]
    assert pod["automountServiceAccountToken"] is True
    role = objs[("ClusterRole", "nri-plrm")]
    rules = {
        (g, r): sorted(rule["verbs"])
        for rule in role["rules"]
        for g in rule["apiGroups"]
        for r in rule["resources"]
    }
    assert rules == {
        ("", "pods"): ["get", "list", "watch"],
        ("", "pods/status"): ["patch"],
        ("", "events"): ["create", "patch"],
        ("events.k8s.io", "events"): ["create", "patch"],
        ("", "nodes"): ["get"],
        ("topology.node.k8s.io", "noderesourcetopologies"): ["create", "get", "patch", "update"],
        ("resource.k8s.io", "resourceclaims"): ["get", "list", "watch"],
        ("resource.k8s.io", "resourceslices"): ["get", "list", "watch"],
    }
    binding = objs[("ClusterRoleBinding", "nri-plrm")]
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": "nri-plrm",
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "nri-plrm", "namespace": "nri-plrm"}
    ]


def role_rules(values: dict[str, Any]) -> set[tuple[str, str]]:
    role = objects(values)[("ClusterRole", "nri-plrm")]
    return {(g, r) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]}


def test_node_resource_topology_on_by_default_and_its_rbac_goes_with_it() -> None:
    _, config = config_of()
    assert config["kubernetes"]["enabled"] is True
    assert config["kubernetes"]["node_resource_topology"] is True
    nrt = ("topology.node.k8s.io", "noderesourcetopologies")
    assert nrt in role_rules({})
    off = {"config": {"kubernetes": {"node_resource_topology": False}}}
    assert nrt not in role_rules(off)
    assert ("", "nodes") not in role_rules(off)
    assert config_of(off)[1]["kubernetes"]["node_resource_topology"] is False
    no_api = {"config": {"kubernetes": {"enabled": False}}}
    assert nrt not in role_rules(no_api)


def test_chart_ships_the_crd_as_an_optional_crds_entry() -> None:
    """The CRD lives in crds/ (installed only when missing, skipped with --skip-crds), is not a
    template (Helm would then own and delete a CRD that NFD may also ship), is cluster-scoped
    v1alpha2 as the scheduler plugin reads it, and the kubectl copy is the same document."""
    with helm_python.Chart.load(str(CHART)) as chart:
        (crd,) = chart.crds
    doc = yaml.safe_load(crd["data"])
    assert doc["kind"] == "CustomResourceDefinition"
    assert doc["metadata"]["name"] == "noderesourcetopologies.topology.node.k8s.io"
    spec = doc["spec"]
    assert (spec["group"], spec["scope"]) == ("topology.node.k8s.io", "Cluster")
    assert spec["names"]["kind"] == "NodeResourceTopology"
    assert spec["names"]["plural"] == "noderesourcetopologies"
    (version,) = spec["versions"]
    assert (version["name"], version["served"], version["storage"]) == ("v1alpha2", True, True)
    schema = version["schema"]["openAPIV3Schema"]
    assert schema["required"] == ["zones"]
    assert set(schema["properties"]) == {
        "apiVersion",
        "kind",
        "metadata",
        "topologyPolicies",
        "attributes",
        "zones",
    }
    zone = schema["properties"]["zones"]["items"]
    assert zone["required"] == ["name", "type"]
    assert set(zone["properties"]) == {"name", "type", "parent", "costs", "attributes", "resources"}
    resource = zone["properties"]["resources"]["items"]
    assert resource["required"] == ["name", "capacity", "allocatable", "available"]
    for quantity in ("capacity", "allocatable", "available"):
        assert resource["properties"][quantity]["x-kubernetes-int-or-string"] is True
    assert all("CustomResourceDefinition" not in text for text in render_module.render().values())
    kubectl_copy = REPO / "packaging" / "kubernetes" / "noderesourcetopologies-crd.yaml"
    assert yaml.safe_load(kubectl_copy.read_text()) == doc
    assert kubectl_copy.read_text() == render_module.crd_manifest()


def test_pod_cache_off_and_no_rbac() -> None:
    objs = objects(
        {
            "rbac": {"create": False},
            "serviceAccount": {"create": False},
            "config": {"kubernetes": {"enabled": False}},
        }
    )
    kinds = {kind for kind, _ in objs}
    assert kinds == {"ConfigMap", "DaemonSet"}
    pod = objs[("DaemonSet", "nri-plrm")]["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False
    assert pod["serviceAccountName"] == "default"


def test_overrides_reach_the_rendered_objects() -> None:
    objs = objects(
        {
            "fullnameOverride": "plrm",
            "image": {"repository": "registry.example/nri-plrm", "tag": "9.9.9"},
            "config": {
                "cpu_manager": {"reserved_cpus": None, "reserved_cpu_count": 2},
                "topology_manager": {"policy": "restricted", "scope": "container"},
                "memory_manager": {
                    "reserved_memory": [
                        {"numa_node": 0, "memory": "1Gi"},
                        {"numa_node": 1, "memory": "1Gi", "hugepages-2Mi": "0"},
                    ]
                },
            },
        }
    )
    ds = objs[("DaemonSet", "plrm")]
    assert container(ds)["image"] == "registry.example/nri-plrm:9.9.9"
    cm = objs[("ConfigMap", "plrm")]
    text = cm["data"]["config.toml"]
    parsed = tomllib.loads(text)
    assert "reserved_cpus" not in parsed["cpu_manager"]
    assert parsed["cpu_manager"]["reserved_cpu_count"] == 2
    assert parsed["memory_manager"]["reserved_memory"][1] == {
        "numa_node": 1,
        "memory": "1Gi",
        "hugepages-2Mi": "0",
    }
    config = parse_config(text, "configmap")
    assert config.topology_manager.policy == "restricted"
    _, volume = mounts(ds)["/etc/nri-plrm"]
    assert volume["configMap"]["name"] == "plrm"


def test_strings_are_escaped_for_toml() -> None:
    text, parsed = config_of({"config": {"log": {"level": 'a "quoted"\\ value'}}})
    assert parsed["log"]["level"] == 'a "quoted"\\ value'
    assert text.count("[log]") == 1


_scalars = (
    st.text(max_size=12)
    | st.integers(min_value=-(2**53), max_value=2**53)
    | st.booleans()
    | st.floats(allow_nan=False, allow_infinity=False)
)
_values = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
_LOG_DEFAULTS = frozenset(yaml.safe_load((CHART / "values.yaml").read_text())["config"]["log"])
_settings = st.dictionaries(
    st.text(max_size=8).filter(lambda key: key not in _LOG_DEFAULTS),
    _values,
    min_size=1,
    max_size=4,
)


def as_helm_sees_it(value: Any) -> Any:
    """Helm holds every number as a float64 (a whole one prints as a TOML integer)."""
    if isinstance(value, (bool, str)):
        return value
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, list):
        return [as_helm_sees_it(v) for v in value]
    return {k: as_helm_sees_it(v) for k, v in value.items()}


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_settings)
def test_any_config_values_render_to_equal_toml(extra: dict[str, Any]) -> None:
    """The chart's TOML writer, fuzzed: any keys and values under a table parse back equal."""
    _, parsed = config_of({"config": {"log": extra}})
    for key, value in extra.items():
        assert as_helm_sees_it(parsed["log"][key]) == as_helm_sees_it(value)


def test_schema_names_every_config_table() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    assert set(schema["properties"]["config"]["properties"]) == DEFAULT_TABLES
    defaults = tomllib.loads((REPO / "packaging" / "config.toml").read_text())
    assert set(defaults) == DEFAULT_TABLES


@pytest.mark.parametrize(
    ("values", "where"),
    [
        ({"imge": {"repository": "x"}}, "additional properties 'imge'"),
        ({"config": {"topology_manger": {}}}, "at '/config'"),
        ({"livenessProbe": {"periodSeconds": 0}}, "/livenessProbe/periodSeconds"),
        ({"hostPaths": {"sysfs": "sys"}}, "/hostPaths/sysfs"),
        ({"image": {"pullPolicy": "Sometimes"}}, "/image/pullPolicy"),
        ({"nodeSelector": {"nri-plrm/enabled": True}}, "/nodeSelector"),
    ],
)
def test_schema_rejects_mistyped_values(values: dict[str, Any], where: str) -> None:
    with pytest.raises(helm_python.HelmValuesError, match=re.escape(where)):
        render_module.render(values)


def test_kubelet_state_export_gets_a_host_directory_of_its_own() -> None:
    """Issue 16: the export is mounted from hostPaths.kubeletStateExportDir, only when set, and
    every mount of the kubelet's directory stays read-only."""
    assert "kubelet-state-export" not in {m["name"] for m in container(daemonset())["volumeMounts"]}
    values = {"config": {"state": {"kubelet_state_dir": "/var/lib/nri-plrm-export/"}}}
    ds = daemonset(values)
    mount, volume = mounts(ds)["/var/lib/nri-plrm-export"]
    assert not mount.get("readOnly", False)
    assert volume["hostPath"] == {"path": "/var/lib/nri-plrm-export", "type": "DirectoryOrCreate"}
    text, _ = config_of(values)
    assert parse_config(text, "configmap").state.kubelet_state_dir == "/var/lib/nri-plrm-export/"
    for mount, volume in mounts(ds).values():
        if volume.get("hostPath", {}).get("path", "").startswith("/var/lib/kubelet"):
            assert mount["readOnly"] is True, mount


@pytest.mark.parametrize(
    ("values", "key"),
    [
        (
            {
                "config": {"state": {"kubelet_state_dir": "/export"}},
                "hostPaths": {"kubeletStateExportDir": "/var/lib/kubelet/"},
            },
            "hostPaths.kubeletStateExportDir",
        ),
        (
            {
                "config": {"state": {"kubelet_state_dir": "/export"}},
                "hostPaths": {"kubeletStateExportDir": "/var/lib/kubelet/nri-plrm"},
            },
            "hostPaths.kubeletStateExportDir",
        ),
        (
            {
                "config": {"state": {"kubelet_state_dir": "/export"}},
                "hostPaths": {
                    "kubeletDir": "/data/kubelet",
                    "kubeletStateExportDir": "/data/kubelet",
                },
            },
            "hostPaths.kubeletStateExportDir",
        ),
        ({"config": {"state": {"kubelet_state_dir": "/host/kubelet"}}}, "kubelet_state_dir"),
        (
            {"config": {"state": {"kubelet_state_dir": "/host/kubelet/pod-resources"}}},
            "kubelet_state_dir",
        ),
    ],
)
def test_export_onto_the_kubelets_directory_fails_the_render(
    values: dict[str, Any], key: str
) -> None:
    with pytest.raises(helm_python.HelmError, match="refuses to start at its next restart") as err:
        render_module.render(values)
    assert key in str(err.value)


@pytest.mark.parametrize("path", ["/var/lib/nri-plrm", "/tmp", "/etc/nri-plrm", "/var/run/nri/"])
def test_export_onto_another_mount_fails_the_render(path: str) -> None:
    with pytest.raises(helm_python.HelmError, match="another volume is mounted there"):
        render_module.render({"config": {"state": {"kubelet_state_dir": path}}})


def test_dra_rbac_goes_with_the_pod_cache() -> None:
    dra = {("resource.k8s.io", "resourceclaims"), ("resource.k8s.io", "resourceslices")}
    assert dra <= role_rules({})
    assert not dra & role_rules({"config": {"kubernetes": {"enabled": False}}})


# ----------------------------------------------------------------- scheduler extender

EXTENDER = "nri-plrm-scheduler-extender"


def extender_on(**extra: Any) -> dict[tuple[str, str], dict[str, Any]]:
    return objects({"schedulerExtender": {"enabled": True, **extra}})


def test_scheduler_extender_off_by_default() -> None:
    assert not [key for key in objects() if key[1] == EXTENDER]


def test_scheduler_extender_deployment_settings_service_and_rbac() -> None:
    found = extender_on(settings={"scoring": "most-allocated"})
    deployment = found[("Deployment", EXTENDER)]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["args"] == [
        "scheduler-extender",
        "--config",
        "/etc/nri-plrm-extender/extender.toml",
    ]
    assert container["ports"] == [{"name": "http", "containerPort": 9742}]
    assert container["readinessProbe"]["httpGet"]["path"] == "/healthz"
    assert deployment["spec"]["replicas"] == 1  # the assume cache is the process's own
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    spec = deployment["spec"]["template"]["spec"]
    assert spec["serviceAccountName"] == EXTENDER and spec["securityContext"]["runAsNonRoot"]
    settings = parse_settings(found[("ConfigMap", EXTENDER)]["data"]["extender.toml"], "chart")
    assert settings.scoring == "most-allocated" and settings.address == "0.0.0.0:9742"
    assert found[("Service", EXTENDER)]["spec"]["ports"][0]["port"] == 9742
    rules = found[("ClusterRole", EXTENDER)]["rules"]
    assert {(tuple(r["resources"]), tuple(r["verbs"])) for r in rules} == {
        (("noderesourcetopologies",), ("get", "list", "watch")),
        (("pods/binding",), ("create",)),
    }
    binding = found[("ClusterRoleBinding", EXTENDER)]
    assert binding["subjects"][0]["name"] == EXTENDER


def test_kube_scheduler_configuration_example_calls_the_extender() -> None:
    data = extender_on(port=9800, schedulerName="numa")[("ConfigMap", EXTENDER)]["data"]
    config = yaml.safe_load(data["kube-scheduler-config.yaml"])
    assert config["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    assert config["kind"] == "KubeSchedulerConfiguration"
    assert config["profiles"] == [{"schedulerName": "numa"}]
    (extender,) = config["extenders"]
    assert extender["urlPrefix"] == f"http://{EXTENDER}.nri-plrm.svc:9800"
    assert (extender["filterVerb"], extender["prioritizeVerb"], extender["bindVerb"]) == (
        "filter",
        "prioritize",
        "bind",
    )
    assert extender["nodeCacheCapable"] is True


def test_schema_refuses_an_unknown_extender_scoring() -> None:
    with pytest.raises(Exception, match="scoring"):
        extender_on(settings={"scoring": "fewest"})
