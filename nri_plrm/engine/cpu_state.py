"""The CPU Manager's saved state: parsing, the kubelet's ``validateState``, and the init-container
CPU reuse derived from it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from nri_plrm.base.cpuset import EMPTY, CPUSet, CPUSetError
from nri_plrm.engine.spec import PodSpec


class CPUStateError(ValueError):
    """Saved CPU manager state that does not fit this machine/configuration (``validateState``)."""


@dataclass
class SavedState:
    """What :func:`parse_state` read."""

    default: CPUSet
    entries: dict[str, dict[str, CPUSet]]
    pod_entries: dict[str, CPUSet]
    pool_consumers: dict[str, set[str]]
    init_slices: dict[str, set[str]]


def parse_state(data: object, policy_name: str) -> SavedState:
    """A saved state (``CPUManager.snapshot``); raises CPUStateError naming what is wrong."""
    state = _mapping(data, "cpu manager state")
    policy = state.get("policyName", policy_name)
    if policy != policy_name:
        raise CPUStateError(
            f'configured policy "{policy_name}" differs from state checkpoint policy "{policy}"'
        )
    default = _parse_state_set(state.get("defaultCpuSet", ""), "default CPU set")
    entries: dict[str, dict[str, CPUSet]] = {}
    for uid, names in _mapping(state.get("entries", {}), "entries").items():
        for name, text in _mapping(names, f'entries of pod "{uid}"').items():
            what = f'cpuset "{text}" for container "{name}" in pod "{uid}"'
            entries.setdefault(str(uid), {})[str(name)] = _parse_state_set(text, what)
    pods = {
        str(uid): _parse_state_set(text, f'pod cpuset "{text}" for pod "{uid}"')
        for uid, text in _mapping(state.get("podEntries", {}), "podEntries").items()
    }
    return SavedState(
        default,
        entries,
        pods,
        _name_sets(state.get("podPoolConsumers", {}), "podPoolConsumers"),
        _name_sets(state.get("podInitSlices", {}), "podInitSlices"),
    )


def validate_state(
    default: CPUSet,
    entries: Mapping[str, Mapping[str, CPUSet]],
    pods: Mapping[str, CPUSet],
    *,
    all_cpus: CPUSet,
    reserved: CPUSet,
    strict: bool,
) -> None:
    """The kubelet's ``validateState``: every CPU accounted once, reserved CPUs in (or, when
    ``strict``, out of) the default set. ``pods``: the pod entries (pod-level managers on).
    Raises CPUStateError with the kubelet's messages."""
    if not default:
        if entries:
            raise CPUStateError("default cpuset cannot be empty")
        return
    if strict:
        overlap = reserved & default
        if overlap:
            raise CPUStateError(
                f'some of strictly reserved cpus: "{overlap}" are present in '
                f'defaultCpuSet: "{default}"'
            )
    elif not reserved <= default:
        raise CPUStateError(
            f'not all reserved cpus: "{reserved}" are present in defaultCpuSet: "{default}"'
        )
    for uid, names in sorted(entries.items()):
        for name, cpus in sorted(names.items()):
            if cpus & default:
                raise CPUStateError(
                    f'pod: {uid}, container: {name} cpuset: "{cpus}" overlaps with default '
                    f'cpuset "{default}"'
                )
    known = default.union(*(c for names in entries.values() for c in names.values()))
    known = known.union(*pods.values())
    if known != all_cpus:
        raise CPUStateError(
            f'current set of available CPUs "{all_cpus}" doesn\'t match with CPUs in state '
            f'"{known}"'
        )


def reusable_init_cpus(
    pod: PodSpec, entries: Mapping[str, CPUSet], name: str | None = None
) -> CPUSet:
    """CPUs container ``name`` of ``pod`` may reuse, given the pod's saved ``entries``: those of
    the pod's regular (non-restartable) init containers listed before ``name`` (all of them when
    ``name`` is not an init container), minus the CPUs every other entry of the pod holds
    (sidecars, app containers, later init containers).

    The kubelet keeps this in memory (``cpusToReuse``: a regular init container adds its CPUs,
    any other container removes its own, another pod's allocation drops the map), so both agree
    when a pod's containers are allocated in spec order, as the kubelet does. Derived from the
    entries it does not change when NRI interleaves other pods or the plugin restarts.
    """
    donors: set[str] = set()
    reuse = 0
    for init in pod.init_containers:
        if init.name == name:
            break
        if init.restartable:
            continue
        donors.add(init.name)
        cpus = entries.get(init.name)
        if cpus is not None:
            reuse |= cpus.mask
    if not reuse:
        return EMPTY
    for other, cpus in entries.items():
        if other != name and other not in donors:
            reuse &= ~cpus.mask
    return CPUSet.from_mask(reuse)


def _mapping(value: object, what: str) -> Mapping[Any, Any]:
    if not isinstance(value, Mapping):
        raise CPUStateError(f"{what}: {value!r} is not an object")
    return value


def _name_sets(value: object, what: str) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for uid, names in _mapping(value, what).items():
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise CPUStateError(f'{what} of pod "{uid}": {names!r} is not a list of names')
        out[str(uid)] = set(names)
    return out


def _parse_state_set(text: object, what: str) -> CPUSet:
    if not isinstance(text, str):
        raise CPUStateError(f"could not parse {what}: {text!r} is not a string")
    try:
        return CPUSet.parse(text)
    except CPUSetError as err:
        raise CPUStateError(f"could not parse {what}: {err}") from err
