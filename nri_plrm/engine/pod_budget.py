"""The pod budget rules of the incremental (NRI) path: the kubelet's
``validatePodScopeResources`` applied one exclusive container at a time."""

from __future__ import annotations

from nri_plrm.engine.spec import CPU, EMPTY_POD_SHARED_POOL_ERROR, AdmissionError


def cpu_pool_emptied() -> str:
    """The kubelet's message when exclusive CPUs would leave shared containers none."""
    return (
        "pod rejected, sum of exclusive container cpu requests equals pod budget, leaving no "
        "cpus for shared containers"
    )


def memory_pool_emptied(resource: str) -> str:
    """The kubelet's message when exclusive memory would leave shared containers none."""
    return (
        f"pod rejected, sum of exclusive container {resource} requests equals pod budget, "
        "leaving no memory for shared containers"
    )


def check_slice(pool: int, request: int, shared_alive: bool, resource: str) -> None:
    """Incremental form of ``validatePodScopeResources`` for one exclusive container: the
    slice must fit in what is left of the budget and must not empty it while a shared
    container lives."""
    if request > pool:
        amount = f"{request} cpus" if resource == CPU else f"{request} of {resource}"
        raise AdmissionError(
            EMPTY_POD_SHARED_POOL_ERROR,
            f"pod rejected, exclusive container requests {amount}, but only {pool} available "
            "in the pod budget",
        )
    if shared_alive and request >= pool:
        raise AdmissionError(
            EMPTY_POD_SHARED_POOL_ERROR,
            cpu_pool_emptied() if resource == CPU else memory_pool_emptied(resource),
        )
