"""Invalid configuration files: each is refused with the right key path and rule."""

from __future__ import annotations

from pathlib import Path

import pytest

from nri_plrm.config.file import load_config, parse_config
from nri_plrm.config.settings import ConfigError

CASES: list[tuple[str, str, str]] = [
    # (toml, expected error prefix "key.path: value", expected rule fragment)
    ('[nri]\nsocket = "relative.sock"', 'nri.socket: "relative.sock"', "absolute path"),
    ("[nri]\nsocket = 5", "nri.socket: 5", "absolute path"),
    ('[nri]\nplugin_name = ""', 'nri.plugin_name: ""', "non-empty name"),
    ('[nri]\nplugin_name = "a b"', 'nri.plugin_name: "a b"', "letters, digits"),
    ('[nri]\nplugin_index = "5"', 'nri.plugin_index: "5"', "exactly 2 digits"),
    ("[nri]\nplugin_index = 50", "nri.plugin_index: 50", "exactly 2 digits"),
    ("[nri]\nrequest_timeout = 0", "nri.request_timeout: 0", "greater than 0"),
    ('[nri]\nreconnect = "yes"', 'nri.reconnect: "yes"', "true or false"),
    (
        '[nri]\nplugin_indx = "50"',
        'nri.plugin_indx: "50"',
        'unknown key; did you mean "plugin_index"',
    ),
    ('[nir]\nsocket = "/x"', 'nir: {"socket": "/x"}', 'unknown key; did you mean "nri"'),
    ('nri = "x"', 'nri: "x"', "must be a table"),
    ('[state]\ndir = "state"', 'state.dir: "state"', "absolute path"),
    ('[state]\nkubelet_state_dir = "kubelet"', 'state.kubelet_state_dir: "kubelet"', '"" to turn'),
    ('[pod_resources]\nmode = "0644"', 'pod_resources.mode: "0644"', '"0600"'),
    ("[pod_resources]\nmode = 511", "pod_resources.mode: 511", '"0660"'),
    ('[pod_resources]\ngroup = "monitoring"', 'pod_resources.group: "monitoring"', "no effect"),
    (
        '[pod_resources]\nsocket = "/a.sock"\nkubelet_socket = "/a.sock"',
        'pod_resources.kubelet_socket: "/a.sock"',
        "must differ",
    ),
    ("[pod_resources]\nburst = 0", "pod_resources.burst: 0", "greater than 0"),
    ('[metrics]\naddress = "9740"', 'metrics.address: "9740"', "host:port"),
    ('[metrics]\naddress = "localhost:99999"', 'metrics.address: "localhost:99999"', "host:port"),
    ('[log]\nlevel = "verbose"', 'log.level: "verbose"', "debug, info, warning, error"),
    ('[log]\nformat = "xml"', 'log.format: "xml"', "text, json"),
    ('[topology]\nsysfs_root = ""', 'topology.sysfs_root: ""', "absolute path"),
    ("[kubernetes]\nenabled = 1", "kubernetes.enabled: 1", "true or false"),
    ("[kubernetes]\nlookup_timeout = -1", "kubernetes.lookup_timeout: -1", "greater than 0"),
    (
        '[kubernetes]\nnode_resource_topology = "yes"',
        'kubernetes.node_resource_topology: "yes"',
        "true or false",
    ),
    (
        '[topology_manager]\npolicy = "None"',
        'topology_manager.policy: "None"',
        "must be one of none, best-effort, restricted, single-numa-node",
    ),
    (
        '[topology_manager]\npolicy = "singlenuma"',
        'topology_manager.policy: "singlenuma"',
        "must be one of none, best-effort, restricted, single-numa-node",
    ),
    ('[topology_manager]\nscope = "node"', 'topology_manager.scope: "node"', "container, pod"),
    (
        '[topology_manager]\noptions = { "prefer-closest-numa-nodes" = "maybe" }',
        'topology_manager.options.prefer-closest-numa-nodes: "maybe"',
        'bad value for option "prefer-closest-numa-nodes"',
    ),
    (
        '[topology_manager]\noptions = { "max-allowable-numa-nodes" = 4 }',
        "topology_manager.options.max-allowable-numa-nodes: 4",
        'the minimum value of "max-allowable-numa-nodes" should not be less than 8',
    ),
    (
        '[topology_manager]\noptions = { "max-allowable-numa-nodes" = "eight" }',
        'topology_manager.options.max-allowable-numa-nodes: "eight"',
        'unable to convert policy option to integer "max-allowable-numa-nodes"',
    ),
    (
        '[topology_manager]\noptions = { "prefer-closest-numa-node" = true }',
        "topology_manager.options.prefer-closest-numa-node: true",
        'unknown Topology Manager Policy option: "prefer-closest-numa-node"; '
        'did you mean "prefer-closest-numa-nodes"?',
    ),
    (
        "[topology_manager]\nprefer_closest_numa_nodes = true",
        "topology_manager.prefer_closest_numa_nodes: true",
        "unknown key",
    ),
    ('[topology_manager]\noptions = "x"', 'topology_manager.options: "x"', "must be a table"),
    ('[cpu_manager]\nreserved_cpus = ""', 'cpu_manager.reserved_cpus: ""', "at least one reserved"),
    (
        '[cpu_manager]\nreserved_cpus = "0-"',
        'cpu_manager.reserved_cpus: "0-"',
        "not a valid cpuset",
    ),
    ("[cpu_manager]\nreserved_cpus = 0", "cpu_manager.reserved_cpus: 0", "cpuset string"),
    (
        "[cpu_manager]\nreserved_cpu_count = 0",
        "cpu_manager.reserved_cpu_count: 0",
        "greater than 0",
    ),
    (
        '[cpu_manager]\nreserved_cpus = "0,1"\nreserved_cpu_count = 4',
        "cpu_manager.reserved_cpu_count: 4",
        'does not match reserved_cpus "0-1"',
    ),
    (
        '[cpu_manager]\noptions = { "full-pcpu-only" = true }',
        "cpu_manager.options.full-pcpu-only: true",
        'unknown CPU Manager Policy option: "full-pcpu-only"; did you mean "full-pcpus-only"?',
    ),
    (
        '[cpu_manager]\noptions = { "full-pcpus-only" = "yes" }',
        'cpu_manager.options.full-pcpus-only: "yes"',
        'bad value for option "full-pcpus-only"',
    ),
    (
        '[cpu_manager]\noptions = { "align-by-socket" = true }',
        "cpu_manager.options.align-by-socket: true",
        'Alpha-level Options not enabled, but option "align-by-socket" provided',
    ),
    (
        "[cpu_manager]\nenable_beta_options = false\n"
        'options = { "distribute-cpus-across-numa" = true }',
        "cpu_manager.options.distribute-cpus-across-numa: true",
        'Beta-level Options not enabled, but option "distribute-cpus-across-numa" provided',
    ),
    (
        "[cpu_manager]\nenable_alpha_options = true\n"
        'options = { "full-pcpus-only" = true, "distribute-cpus-across-cores" = true }',
        "cpu_manager.options.distribute-cpus-across-cores: true",
        "static policy options full-pcpus-only and distribute-cpus-across-cores can not be used",
    ),
    (
        '[cpu_manager]\noptions = { "prefer-align-cpus-by-uncorecache" = true, '
        '"distribute-cpus-across-numa" = "true" }',
        "cpu_manager.options.distribute-cpus-across-numa: true",
        "prefer-align-cpus-by-uncorecache and distribute-cpus-across-numa can not be used",
    ),
    (
        "[cpu_manager]\nenable_alpha_options = true\n"
        'options = { "align-by-socket" = true }\n'
        '[topology_manager]\npolicy = "single-numa-node"',
        "cpu_manager.options.align-by-socket: true",
        "Topolgy manager single-numa-node policy is incompatible with CPUManager align-by-socket",
    ),
    (
        '[memory_manager]\nreserved_memory = "512Mi"',
        'memory_manager.reserved_memory: "512Mi"',
        "must be a list",
    ),
    (
        '[memory_manager]\nreserved_memory = [ { memory = "512Mi" } ]',
        "memory_manager.reserved_memory[0].numa_node: missing",
        "must name its NUMA node",
    ),
    (
        '[memory_manager]\nreserved_memory = [ { numa_node = -1, memory = "512Mi" } ]',
        "memory_manager.reserved_memory[0].numa_node: -1",
        "integer >= 0",
    ),
    (
        '[memory_manager]\nreserved_memory = [ { numa_node = 0, memory = "1Gx" } ]',
        'memory_manager.reserved_memory[0].memory: "1Gx"',
        "unknown suffix",
    ),
    (
        '[memory_manager]\nreserved_memory = [ { numa_node = 0, memroy = "1Gi" } ]',
        'memory_manager.reserved_memory[0].memroy: "1Gi"',
        'unknown key; did you mean "memory"?',
    ),
    (
        '[memory_manager]\nreserved_memory = [ { numa_node = 0, memory = "1Gi", '
        '"hugepages-3Mi" = "6Mi" } ]',
        'memory_manager.reserved_memory[0].hugepages-3Mi: "6Mi"',
        'hugepage size "3Mi" is not a power-of-two',
    ),
    (
        '[memory_manager]\nreserved_memory = [ { numa_node = 0, memory = "1Gi", '
        '"hugepages-2Mi" = "3Mi" } ]',
        'memory_manager.reserved_memory[0].hugepages-2Mi: "3Mi"',
        "multiple of the 2Mi page size",
    ),
    (
        '[memory_manager]\nreserved_memory = [ { numa_node = 0, memory = "1Gi" }, '
        '{ numa_node = 0, memory = "1Gi" } ]',
        'memory_manager.reserved_memory[1].memory: "1Gi"',
        "duplicate reservation of memory on NUMA node 0 (also in entry 0)",
    ),
    (
        '[memory_manager]\nreserved_memory = [ { numa_node = 0, "hugepages-2Mi" = "2Mi" } ]',
        'memory_manager.reserved_memory: [{"numa_node": 0, "hugepages-2Mi": "2Mi"}]',
        "you should specify the system reserved memory",
    ),
    (
        "[memory_manager]\nreserved_memory = [ { numa_node = 0, memory = true } ]",
        "memory_manager.reserved_memory[0].memory: true",
        "quantity string",
    ),
]


def test_enough_cases() -> None:
    assert len(CASES) >= 30


@pytest.mark.parametrize(("text", "prefix", "rule"), CASES, ids=[c[1][:60] for c in CASES])
def test_invalid_file_refused(tmp_path: Path, text: str, prefix: str, rule: str) -> None:
    path = tmp_path / "config.toml"
    path.write_text(text + "\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    matching = [e for e in info.value.errors if e.startswith(prefix + ":") or e.startswith(prefix)]
    assert matching, f"no error for {prefix!r} in {info.value.errors}"
    assert any(rule in e for e in matching), f"rule {rule!r} not in {matching}"
    assert len(info.value.errors) == 1, info.value.errors


def test_every_error_is_collected() -> None:
    text = """
[nri]
plugin_index = "x"
socket = "rel"
[log]
level = "loud"
[cpu_manager]
reserved_cpus = ""
[typo_table]
"""
    with pytest.raises(ConfigError) as info:
        parse_config(text, "t.toml")
    keys = sorted(e.split(":", 1)[0] for e in info.value.errors)
    assert keys == [
        "cpu_manager.reserved_cpus",
        "log.level",
        "nri.plugin_index",
        "nri.socket",
        "typo_table",
    ]
    assert str(info.value).count("\n") == 4


def test_not_toml() -> None:
    with pytest.raises(ConfigError) as info:
        parse_config("[nri\n", "bad.toml")
    assert info.value.errors[0].startswith("bad.toml: not valid TOML:")


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path / "absent.toml")
    assert "cannot read the config file" in info.value.errors[0]
    assert str(tmp_path / "absent.toml") in info.value.errors[0]


def test_rate_limit_values_are_not_seconds() -> None:
    with pytest.raises(ConfigError) as info:
        parse_config("[pod_resources]\nqps = 0\n[nri]\nrequest_timeout = 7200\n")
    assert info.value.errors == [
        "nri.request_timeout: 7200: must be a number of seconds greater than 0 and at most 3600",
        "pod_resources.qps: 0: must be a number greater than 0",
    ]


def test_device_timeout_must_leave_room_in_the_request_budget() -> None:
    with pytest.raises(ConfigError) as info:
        parse_config("[nri]\nrequest_timeout = 1.0\n[pod_resources]\ndevice_timeout = 1.0\n")
    assert any(
        line.startswith("pod_resources.device_timeout: 1.0: must be less than nri.request_timeout")
        for line in info.value.errors
    ), info.value.errors
    with pytest.raises(ConfigError) as info:
        parse_config("[pod_resources]\ndevice_timeout = -1\n")
    assert any(line.startswith("pod_resources.device_timeout") for line in info.value.errors)


def test_count_against_an_invalid_cpuset_names_only_the_files_value() -> None:
    """The count is not compared against the default reserved CPUs the invalid value left."""
    with pytest.raises(ConfigError) as info:
        parse_config('[cpu_manager]\nreserved_cpus = "0-99999"\nreserved_cpu_count = 1000\n')
    (error,) = info.value.errors
    assert error.startswith('cpu_manager.reserved_cpus: "0-99999": not a valid cpuset')
    with pytest.raises(ConfigError) as info:
        parse_config('[cpu_manager]\nreserved_cpus = "0-3"\nreserved_cpu_count = 1000\n')
    assert info.value.errors == [
        'cpu_manager.reserved_cpu_count: 1000: does not match reserved_cpus "0-3" (4 CPUs); set '
        "only one of them"
    ]


@pytest.mark.parametrize(
    ("table", "value", "field"),
    [
        ("cpu_manager", "1", "cpuManagerPolicyOptions"),
        ("cpu_manager", "0", "cpuManagerPolicyOptions"),
        ("cpu_manager", "1.0", "cpuManagerPolicyOptions"),
        ("topology_manager", "1", "topologyManagerPolicyOptions"),
    ],
)
def test_a_number_as_a_boolean_option_is_refused_with_the_rule(
    table: str, value: str, field: str
) -> None:
    """The kubelet's loader refuses a JSON number in its map of strings; the string is read."""
    name = "full-pcpus-only" if table == "cpu_manager" else "prefer-closest-numa-nodes"
    with pytest.raises(ConfigError) as info:
        parse_config(f'[{table}]\noptions = {{ "{name}" = {value} }}\n')
    assert info.value.errors == [
        f'{table}.options.{name}: {value}: bad value for option "{name}": {value} is a number: '
        f'write a string ("true", "false" or "{value}") or a boolean; the kubelet refuses a '
        f"number in {field}, a map of strings"
    ]
    parse_config(f'[{table}]\noptions = {{ "{name}" = "{value[0]}" }}\n')
