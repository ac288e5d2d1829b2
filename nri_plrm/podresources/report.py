"""Build PodResources v1 messages from the plugin's view, with the kubelet's reporting rules.

Container ``cpu_ids`` carry exclusive CPUs only; a container in a pod shared pool or the node
shared pool reports empty ``cpu_ids`` and, in a pod shared pool, empty ``memory``. Pod-level
``cpu_ids`` and ``memory`` carry the pod's allocation in scope ``pod`` (the view leaves them
empty in scope ``container``). Devices and DRA claims can be overlaid from the kubelet's own
reply so device consumers keep working when pointed at this endpoint.
"""

from __future__ import annotations

from collections.abc import Sequence

from nri_plrm.engine.spec import AssignmentType, ContainerAssignment, MemoryBlock
from nri_plrm.ledger.view import (
    ContainerView,
    PodResourcesView,
    PodView,
    reported_containers,
)
from nri_plrm.proto import podresources_api_pb2 as pb
from nri_plrm.util.steps import Steps, finish


def memory_message(block: MemoryBlock) -> pb.ContainerMemory:
    """One memory block as ``ContainerMemory`` (type, bytes, NUMA nodes)."""
    return pb.ContainerMemory(
        memory_type=block.resource,
        size=block.size,
        topology=pb.TopologyInfo(nodes=[pb.NUMANode(ID=n) for n in block.numa_nodes]),
    )


def container_message(container: ContainerView) -> pb.ContainerResources:
    """A container's exclusive CPUs and memory (empty for shared-pool containers)."""
    msg = pb.ContainerResources(name=container.name)
    assignment = container.assignment
    if assignment is None:
        return msg
    if assignment.exclusive:
        msg.cpu_ids.extend(assignment.cpus.sorted())
    if _reports_memory(assignment):
        msg.memory.extend(memory_message(b) for b in assignment.memory)
    return msg


def _reports_memory(assignment: ContainerAssignment) -> bool:
    return assignment.assignment is not AssignmentType.POD_SHARED


def pod_message(pod: PodView) -> pb.PodResources:
    """A pod with its reported containers and pod-level allocation."""
    return pb.PodResources(
        name=pod.name,
        namespace=pod.namespace,
        containers=[container_message(c) for c in reported_containers(pod)],
        cpu_ids=pod.cpus.sorted(),
        memory=[memory_message(b) for b in pod.memory],
    )


def list_response(view: PodResourcesView) -> pb.ListPodResourcesResponse:
    """``List``: every pod."""
    return finish(list_steps(view.pods()))


def list_steps(pods: Sequence[PodView]) -> Steps[pb.ListPodResourcesResponse]:
    """``List`` of ``pods``, yielding after each pod's message: a server thread runs it with
    ``steps.beside_loop`` so the event loop's thread can take the GIL between pods (a reply of
    500 containers holds it for a few milliseconds)."""
    messages = []
    for pod in pods:
        messages.append(pod_message(pod))
        yield
    return pb.ListPodResourcesResponse(pod_resources=messages)


def allocatable_response(view: PodResourcesView) -> pb.AllocatableResourcesResponse:
    """``GetAllocatableResources``: allocatable CPUs and memory blocks with size > 0."""
    return pb.AllocatableResourcesResponse(
        cpu_ids=view.allocatable_cpus().sorted(),
        memory=[memory_message(b) for b in view.allocatable_memory() if b.size > 0],
    )


def merge_devices(ours: pb.PodResources, kubelet: pb.PodResources) -> None:
    """Copy ``devices`` and ``dynamic_resources`` of the kubelet's containers into ours."""
    by_name = {c.name: c for c in kubelet.containers}
    for container in ours.containers:
        theirs = by_name.get(container.name)
        if theirs is None:
            continue
        del container.devices[:]
        container.devices.extend(theirs.devices)
        del container.dynamic_resources[:]
        container.dynamic_resources.extend(theirs.dynamic_resources)


def merge_list(ours: pb.ListPodResourcesResponse, kubelet: pb.ListPodResourcesResponse) -> None:
    """Overlay the kubelet's devices onto every pod both replies know."""
    index = {(p.namespace, p.name): p for p in kubelet.pod_resources}
    for pod in ours.pod_resources:
        theirs = index.get((pod.namespace, pod.name))
        if theirs is not None:
            merge_devices(pod, theirs)


def merge_allocatable(
    ours: pb.AllocatableResourcesResponse, kubelet: pb.AllocatableResourcesResponse
) -> None:
    """Take the kubelet's allocatable devices."""
    del ours.devices[:]
    ours.devices.extend(kubelet.devices)
