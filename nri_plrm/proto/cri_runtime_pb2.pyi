from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class LinuxContainerResources(_message.Message):
    __slots__ = ("cpu_period", "cpu_quota", "cpu_shares", "memory_limit_in_bytes", "oom_score_adj", "cpuset_cpus", "cpuset_mems")
    CPU_PERIOD_FIELD_NUMBER: _ClassVar[int]
    CPU_QUOTA_FIELD_NUMBER: _ClassVar[int]
    CPU_SHARES_FIELD_NUMBER: _ClassVar[int]
    MEMORY_LIMIT_IN_BYTES_FIELD_NUMBER: _ClassVar[int]
    OOM_SCORE_ADJ_FIELD_NUMBER: _ClassVar[int]
    CPUSET_CPUS_FIELD_NUMBER: _ClassVar[int]
    CPUSET_MEMS_FIELD_NUMBER: _ClassVar[int]
    cpu_period: int
    cpu_quota: int
    cpu_shares: int
    memory_limit_in_bytes: int
    oom_score_adj: int
    cpuset_cpus: str
    cpuset_mems: str
    def __init__(self, cpu_period: _Optional[int] = ..., cpu_quota: _Optional[int] = ..., cpu_shares: _Optional[int] = ..., memory_limit_in_bytes: _Optional[int] = ..., oom_score_adj: _Optional[int] = ..., cpuset_cpus: _Optional[str] = ..., cpuset_mems: _Optional[str] = ...) -> None: ...

class UpdateContainerResourcesRequest(_message.Message):
    __slots__ = ("container_id", "linux")
    CONTAINER_ID_FIELD_NUMBER: _ClassVar[int]
    LINUX_FIELD_NUMBER: _ClassVar[int]
    container_id: str
    linux: LinuxContainerResources
    def __init__(self, container_id: _Optional[str] = ..., linux: _Optional[_Union[LinuxContainerResources, _Mapping]] = ...) -> None: ...

class UpdateContainerResourcesResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...
