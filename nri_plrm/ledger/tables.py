"""The ledger's tables: the pods the plugin tracks and their containers' ids.

The engine keeps the allocations; these tables keep what only NRI knows (sandbox and container
ids, the pod's NRI intent, whether an existing pod could be placed at all).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from nri_plrm.engine.facade import Engine
from nri_plrm.engine.spec import PodSpec
from nri_plrm.engine.spec_json import KeptForms, spec_from_dict
from nri_plrm.translate.nri_to_pod import PodIntent, intent_from_dict, intent_to_dict

TABLES_LAYOUT = 1
"""Version of the tables' part of the checkpoint ``data`` (the store versions the file)."""

ContainerKey = tuple[str, str]
"""A container by (pod uid, container name)."""


SpecSource = Callable[[], "PodSpec | None"]
"""Where a whole-mode pod's full spec is kept (the engine's, as its resizes leave it)."""


@dataclass
class PodRecord:
    """One pod the plugin tracks."""

    intent: PodIntent
    sandbox_id: str
    whole: SpecSource | None = field(default=None, compare=False, repr=False)
    """Whole-pod mode: where the pod's full spec is kept (the engine keeps it, once); None in
    NRI-only mode."""
    managed: bool = True
    """False for an existing pod that could not be placed at adoption (left alone)."""
    containers: dict[str, str] = field(default_factory=dict)
    """Container name -> container id, in creation order."""

    @property
    def uid(self) -> str:
        return self.intent.spec.uid

    @property
    def spec(self) -> PodSpec | None:
        """The full spec in whole-pod mode (read from where it is kept); None in NRI-only
        mode."""
        return None if self.whole is None else self.whole()

    @property
    def pod_spec(self) -> PodSpec:
        """The spec the engine decides with: the full one, or the NRI intent's."""
        return self.spec if self.spec is not None else self.intent.spec

    def label(self) -> str:
        """``namespace/name`` for logs and errors."""
        return f"{self.intent.spec.namespace}/{self.intent.spec.name}"


@dataclass
class Tables:
    """Pods by uid and container ids to their (pod uid, name)."""

    pods: dict[str, PodRecord] = field(default_factory=dict)
    ids: dict[str, ContainerKey] = field(default_factory=dict)
    intent_forms: KeptForms = field(default_factory=KeptForms, compare=False, repr=False)
    """The intents' JSON-able forms, kept between snapshots (read them only)."""

    def container_id(self, key: ContainerKey) -> str | None:
        """The id of the container ``key`` names, or None."""
        record = self.pods.get(key[0])
        return record.containers.get(key[1]) if record is not None else None

    def snapshot(self, generation: int) -> dict[str, Any]:
        """JSON-able tables; a whole-mode pod's spec is not repeated (the engine keeps it)."""
        forms = self.intent_forms
        pods = {
            uid: {
                "intent": forms.form(p.intent, intent_to_dict),
                "sandbox_id": p.sandbox_id,
                "managed": p.managed,
                "containers": [[name, cid] for name, cid in p.containers.items()],
            }
            for uid, p in self.pods.items()
        }
        forms.done()
        return {"layout": TABLES_LAYOUT, "generation": generation, "pods": pods}

    @classmethod
    def restore(cls, data: Mapping[str, Any], engine: Engine) -> Tables:
        """Inverse of :meth:`snapshot`; a whole-mode pod's spec comes from ``engine`` (files
        written before that carry it themselves, it is read from there then)."""
        tables = cls()
        for uid, entry in data.get("pods", {}).items():
            whole: SpecSource | None = None
            if engine.pod_spec(uid) is not None:
                whole = partial(engine.pod_spec, uid)
            elif entry.get("spec") is not None:
                whole = kept_spec(spec_from_dict(entry["spec"]))
            pod = PodRecord(
                intent=intent_from_dict(entry["intent"]),
                sandbox_id=str(entry.get("sandbox_id", "")),
                whole=whole,
                managed=bool(entry.get("managed", True)),
            )
            for name, cid in entry.get("containers", []):
                pod.containers[str(name)] = str(cid)
                tables.ids[str(cid)] = (uid, str(name))
            tables.pods[uid] = pod
        return tables


def kept_spec(spec: PodSpec) -> SpecSource:
    """A source of ``spec`` itself: a pod known whole that the engine does not hold (an older
    checkpoint's tables carried it; a refused admission is reported with it)."""
    return lambda: spec
