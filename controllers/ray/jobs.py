"""The Ray Jobs API's requests and answers as data: :class:`JobInfo` (``GET
/api/jobs/<id>``) and :class:`JobSubmitRequest` (``POST /api/jobs/``), with no I/O (no
aiohttp, no client), so that what decides from them (:mod:`controllers.rayjob.plan`)
stays pure. The client that sends and parses them is :mod:`controllers.ray.dashboard`
(``parse_job_info``, ``parse_job_list``).

>>> JobInfo.model_validate({"status": "SUCCEEDED", "end_time": 1}).terminal
True
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Annotated, Any

import pydantic

from api.v1 import rayjob

__all__ = ["JobInfo", "JobStatus", "JobSubmitRequest"]


JobStatus = rayjob.JobStatus
"""Ray's job statuses (``PENDING``, ``RUNNING``, ``STOPPED``, ``SUCCEEDED``, ``FAILED``):
the API's own enum, a ``str`` enum with ``terminal``; a status Ray adds later is kept as
the string."""


def _none_to(default: object) -> Callable[[object], object]:
    def convert(value: object) -> object:
        return default if value is None else value

    return convert


_JobText = Annotated[str, pydantic.BeforeValidator(_none_to(""))]
_JobMetadata = Annotated[dict[str, str], pydantic.BeforeValidator(_none_to({}))]


class JobInfo(pydantic.BaseModel):
    """One job as Ray's Jobs API reports it (``JobDetails``); fields Ray adds are ignored.

    ``start_time`` and ``end_time`` are Unix epoch **milliseconds** as Ray sends them,
    ``None`` when absent or null (``end_time`` until the job is terminal; KubeRay copies
    them to ``status.rayJobInfo`` only when non-zero). ``job_id`` is Ray's driver job id
    (``None`` while ``PENDING``), ``submission_id`` the id the job was submitted with
    (``None`` for a job a driver started outside the Jobs API). ``message`` and
    ``entrypoint`` read a null as ``""``, ``metadata`` as ``{}``.

    >>> info = JobInfo.model_validate({"submission_id": "s", "status": "RUNNING", "new": 1})
    >>> info.status == JobStatus.RUNNING, info.start_time, info.metadata
    (True, None, {})
    """

    model_config = pydantic.ConfigDict(extra="ignore", frozen=True, strict=True)

    status: str
    job_id: str | None = None
    submission_id: str | None = None
    message: _JobText = ""
    start_time: int | None = None
    end_time: int | None = None
    entrypoint: _JobText = ""
    metadata: _JobMetadata = pydantic.Field(default_factory=dict)
    error_type: str | None = None

    @property
    def terminal(self) -> bool:
        """Whether Ray will not change the status any more (``STOPPED``, ``SUCCEEDED``,
        ``FAILED``)."""
        return self.status in (JobStatus.STOPPED, JobStatus.SUCCEEDED, JobStatus.FAILED)


@dataclasses.dataclass(frozen=True, kw_only=True)
class JobSubmitRequest:
    """What ``submit_job`` POSTs to ``/api/jobs/`` (Ray's ``JobSubmitRequest``).

    :meth:`body` is the JSON, shaped as KubeRay v1.7.0 sends it: ``entrypoint`` always;
    every other key only when it is set and not empty or zero (``None``, ``""``, ``{}``
    and ``0`` are left out, as Go's ``omitempty``); a negative number is sent as it is
    (Ray judges it).

    >>> JobSubmitRequest(entrypoint="python x.py", submission_id="j-1", metadata={},
    ...                  entrypoint_num_cpus=0, entrypoint_num_gpus=-1).body()
    {'entrypoint': 'python x.py', 'submission_id': 'j-1', 'entrypoint_num_gpus': -1}
    """

    entrypoint: str
    submission_id: str | None = None
    """The id to submit with; Ray makes one (``raysubmit_...``) when it is absent."""
    metadata: Mapping[str, str] | None = None
    runtime_env: Mapping[str, Any] | None = None
    """The runtime environment as an object (KubeRay: ``runtimeEnvYAML`` parsed)."""
    entrypoint_num_cpus: float | None = None
    entrypoint_num_gpus: float | None = None
    entrypoint_resources: Mapping[str, float] | None = None
    """Custom resources (KubeRay: ``entrypointResources`` JSON-decoded)."""

    def body(self) -> dict[str, Any]:
        """The JSON object to POST (see the class docstring)."""
        result: dict[str, Any] = {"entrypoint": self.entrypoint}
        for field in dataclasses.fields(self)[1:]:
            value = getattr(self, field.name)
            if isinstance(value, Mapping):
                value = dict(value) or None
            if value is None or value == "" or (isinstance(value, int | float) and value == 0):
                continue
            result[field.name] = value
        return result
