"""The CPU Manager's state (the kubelet's ``cpumanager/state``): :class:`CPUState`, the reader
and writer the static policy (:mod:`.cpu_manager`) and adoption change it through; its saved
form, parsing and the kubelet's ``validateState``; and the init-container CPU reuse derived
from it."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, TypeVar

from nri_plrm.base.cpuset import EMPTY, CPUSet, CPUSetError
from nri_plrm.engine.spec import PodSpec

POLICY_STATIC = "static"


_NO_ENTRIES: Mapping[str, CPUSet] = MappingProxyType({})
"""The container entries of a pod without any (read only)."""


T = TypeVar("T")


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


class CPUState:
    """The kubelet's CPU manager ``State`` (``GetCPUSet``/``SetCPUSet``, ``GetDefaultCPUSet``/
    ``SetDefaultCPUSet``, ``Delete``) with the pod-level additions: pod entries (the CPUs
    reserved for a pod-level pod, its "bubble"), the containers whose exclusive slice consumes
    the pod shared pool, and the regular init containers holding an exclusive slice of it.

    It records what it is told; the static policy decides (it never checks a CPU is free).
    """

    def __init__(self, default: CPUSet) -> None:
        self.default = default
        """The default set (``GetDefaultCPUSet``): the node shared pool. Read it; change it with
        :meth:`set_default`."""
        self._entries: dict[str, dict[str, CPUSet]] = {}
        self._pod_entries: dict[str, CPUSet] = {}
        self._pool_consumers: dict[str, set[str]] = {}
        self._init_slices: dict[str, set[str]] = {}

    # -- reader ------------------------------------------------------------------------------
    def get_cpuset(self, pod_uid: str, name: str) -> CPUSet | None:
        """The container's entry (``GetCPUSet``), or None."""
        entries = self._entries.get(pod_uid)
        return None if entries is None else entries.get(name)

    def get_cpuset_or_default(self, pod_uid: str, name: str) -> CPUSet:
        """``GetCPUSetOrDefault``: the container's entry, else the default set."""
        entry = self.get_cpuset(pod_uid, name)
        return self.default if entry is None else entry

    def pod_containers(self, pod_uid: str) -> Mapping[str, CPUSet]:
        """The container entries of one pod (read only; empty when none)."""
        return self._entries.get(pod_uid, _NO_ENTRIES)

    def assignments(self) -> dict[str, dict[str, CPUSet]]:
        """A copy of every container entry (``GetCPUAssignments``), pods without one left out."""
        return {uid: dict(names) for uid, names in self._entries.items() if names}

    def pod_cpus(self, pod_uid: str) -> CPUSet | None:
        """The pod entry of a pod-level pod, or None."""
        return self._pod_entries.get(pod_uid)

    def pod_entries(self) -> dict[str, CPUSet]:
        """A copy of every pod entry."""
        return dict(self._pod_entries)

    def is_pool_consumer(self, pod_uid: str, name: str) -> bool:
        """True when the container's entry is a live exclusive slice of the pod shared pool."""
        return name in self._pool_consumers.get(pod_uid, ())

    def is_init_slice(self, pod_uid: str, name: str) -> bool:
        """True when the container is a regular init container holding an exclusive slice."""
        return name in self._init_slices.get(pod_uid, ())

    def pod_shared_pool(self, pod_uid: str) -> CPUSet:
        """The pod shared pool: pod entry minus the live exclusive slices (empty: no entry)."""
        bubble = self._pod_entries.get(pod_uid)
        if bubble is None:
            return EMPTY
        held = 0
        entries = self._entries.get(pod_uid, {})
        for name in self._pool_consumers.get(pod_uid, ()):
            if name in entries:
                held |= entries[name].mask
        return CPUSet.from_mask(bubble.mask & ~held)

    def to_dict(self, policy_name: str) -> dict[str, Any]:
        """The saved form (read back by :func:`parse_state`)."""
        return {
            "policyName": policy_name,
            "defaultCpuSet": str(self.default),
            "entries": {
                uid: {name: str(cpus) for name, cpus in sorted(names.items())}
                for uid, names in sorted(self._entries.items())
                if names
            },
            "podEntries": {uid: str(cpus) for uid, cpus in sorted(self._pod_entries.items())},
            "podPoolConsumers": {
                uid: sorted(names) for uid, names in sorted(self._pool_consumers.items()) if names
            },
            "podInitSlices": {
                uid: sorted(names) for uid, names in sorted(self._init_slices.items()) if names
            },
        }

    # -- writer ------------------------------------------------------------------------------
    def set_default(self, cpus: CPUSet) -> None:
        """``SetDefaultCPUSet``."""
        self.default = cpus

    def set_cpuset(self, pod_uid: str, name: str, cpus: CPUSet) -> None:
        """``SetCPUSet``: record (or replace) the container's entry; its slice marks stay."""
        self._entries.setdefault(pod_uid, {})[name] = cpus

    def delete(self, pod_uid: str, name: str) -> CPUSet | None:
        """``Delete``: drop the container's entry and slice marks; the entry it held, or None.
        The pod's entry and its other containers stay."""
        entries = self._entries.get(pod_uid)
        if entries is None or name not in entries:
            return None
        self.release_slice(pod_uid, name)
        cpus = entries.pop(name)
        if not entries:
            del self._entries[pod_uid]
        return cpus

    def set_pod(self, pod_uid: str, cpus: CPUSet) -> None:
        """Record (or replace) a pod-level pod's pod entry."""
        self._pod_entries[pod_uid] = cpus

    def mark_pool_consumers(self, pod_uid: str, names: Iterable[str]) -> None:
        """Mark the containers' entries as exclusive slices of the pod shared pool."""
        self._pool_consumers.setdefault(pod_uid, set()).update(names)

    def mark_init_slices(self, pod_uid: str, names: Iterable[str]) -> None:
        """Mark the containers as regular init containers holding an exclusive slice."""
        self._init_slices.setdefault(pod_uid, set()).update(names)

    def release_slice(self, pod_uid: str, name: str) -> None:
        """Unmark the container's slice (its entry, if any, stays and no longer consumes the
        pod shared pool)."""
        consumers = self._pool_consumers.get(pod_uid)
        if consumers is not None:
            consumers.discard(name)
        inits = self._init_slices.get(pod_uid)
        if inits is not None:
            inits.discard(name)

    def remove_pod(self, pod_uid: str) -> None:
        """Forget everything recorded for the pod (entries, pod entry, slice marks)."""
        self._entries.pop(pod_uid, None)
        self._pod_entries.pop(pod_uid, None)
        self._pool_consumers.pop(pod_uid, None)
        self._init_slices.pop(pod_uid, None)

    # -- one pod saved and put back (Engine.readmit) -------------------------------------------
    def save_pod(self, pod_uid: str) -> SavedPodCPUs:
        """The pod's entries and the default set now, for :meth:`restore_pod`."""
        entries = self._entries.get(pod_uid)
        consumers = self._pool_consumers.get(pod_uid)
        inits = self._init_slices.get(pod_uid)
        return SavedPodCPUs(
            pod_uid,
            self.default,
            None if entries is None else dict(entries),
            self._pod_entries.get(pod_uid),
            None if consumers is None else set(consumers),
            None if inits is None else set(inits),
        )

    def restore_pod(self, saved: SavedPodCPUs) -> None:
        """Back to ``saved``: valid when only that pod changed since :meth:`save_pod`."""
        uid = saved.pod_uid
        self.default = saved.default
        _put(self._entries, uid, None if saved.entries is None else dict(saved.entries))
        _put(self._pod_entries, uid, saved.pod_entry)
        _put(self._pool_consumers, uid, _copied(saved.pool_consumers))
        _put(self._init_slices, uid, _copied(saved.init_slices))

    def replace(
        self,
        default: CPUSet,
        entries: Mapping[str, Mapping[str, CPUSet]],
        pod_entries: Mapping[str, CPUSet],
        pool_consumers: Mapping[str, set[str]] | None = None,
        init_slices: Mapping[str, set[str]] | None = None,
    ) -> None:
        """Replace the whole state (``SetDefaultCPUSet`` + ``SetCPUAssignments``)."""
        self.default = default
        self._entries = {uid: dict(names) for uid, names in entries.items()}
        self._pod_entries = dict(pod_entries)
        self._pool_consumers = {uid: set(n) for uid, n in (pool_consumers or {}).items()}
        self._init_slices = {uid: set(n) for uid, n in (init_slices or {}).items()}


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


@dataclass(frozen=True)
class SavedPodCPUs:
    """One pod's CPU entries and the default set, as :meth:`CPUState.save_pod` read them."""

    pod_uid: str
    default: CPUSet
    entries: dict[str, CPUSet] | None
    pod_entry: CPUSet | None
    pool_consumers: set[str] | None
    init_slices: set[str] | None


def _put(table: dict[str, T], key: str, value: T | None) -> None:
    if value is None:
        table.pop(key, None)
    else:
        table[key] = value


def _copied(names: set[str] | None) -> set[str] | None:
    return None if names is None else set(names)
