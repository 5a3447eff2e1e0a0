"""``RayCronJob``: RayJobs created on a cron schedule (KubeRay v1.7.0, gate ``RayCronJob``).

Field names and rules follow KubeRay v1.7.0 (``ray-operator/apis/ray/v1/raycronjob_types.go``):

- ``jobTemplate`` (required): the :class:`~api.v1.rayjob.RayJobSpec` of every RayJob
  created (a spec only: KubeRay has no metadata template).
- ``schedule`` (required): a standard five-field cron expression or a descriptor
  (``@hourly``, ``@every 5m``); ``timeZone``: an IANA zone name (the operator's local
  zone when unset).
- ``suspend``: create no new RayJob while ``true`` (existing ones are left alone).

Status: ``lastScheduleTime``, the scheduled tick last handled (not the wall-clock time
its RayJob was created).

>>> cron = RayCronJob.model_validate({
...     "metadata": {"name": "nightly"},
...     "spec": {"schedule": "0 3 * * *", "jobTemplate": {"entrypoint": "python etl.py"}},
... })
>>> cron.spec.job_template.submission_mode
'K8sJobMode'
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

import pydantic

from api.v1 import groupversion, meta, rayjob
from runtime.client import resources

__all__ = ["RayCronJob", "RayCronJobSpec", "RayCronJobStatus"]


class RayCronJobSpec(meta.Model):
    """The desired state of a RayCronJob."""

    job_template: rayjob.RayJobSpec
    """The spec of every RayJob created."""
    schedule: str
    """A cron expression (five fields, or a descriptor such as ``@hourly``)."""
    time_zone: Annotated[str, pydantic.Field(min_length=1)] | None = None
    """The IANA time zone of ``schedule``; the operator's zone when unset."""
    suspend: bool | None = None
    """Create no RayJob while ``true``."""


class RayCronJobStatus(meta.Model):
    """The observed state of a RayCronJob."""

    VOLATILE_FIELDS: ClassVar[frozenset[str]] = frozenset()

    last_schedule_time: meta.Time | None = None
    """The scheduled time of the last RayJob created."""


class RayCronJob(meta.Model):
    """RayJobs created on a schedule."""

    RESOURCE: ClassVar[resources.Resource] = groupversion.RAYCRONJOBS
    CATEGORIES: ClassVar[tuple[str, ...]] = ("all",)
    SHORT_NAMES: ClassVar[tuple[str, ...]] = ()
    SERVED_VERSIONS: ClassVar[tuple[str, ...]] = ()
    LEGACY_VERSIONS: ClassVar[tuple[str, ...]] = ()
    PRINTER_COLUMNS: ClassVar[tuple[meta.PrinterColumn, ...]] = (
        meta.PrinterColumn("schedule", "string", ".spec.schedule"),
        meta.PrinterColumn("timezone", "string", ".spec.timeZone"),
        meta.PrinterColumn("last schedule", "date", ".status.lastScheduleTime"),
        meta.PrinterColumn.AGE,
        meta.PrinterColumn("suspend", "boolean", ".spec.suspend"),
    )
    """KubeRay v1.7.0's columns."""

    api_version: Literal["ray.io/v1"] = "ray.io/v1"
    kind: Literal["RayCronJob"] = "RayCronJob"
    metadata: meta.RawObject = pydantic.Field(default_factory=dict)
    spec: RayCronJobSpec
    status: RayCronJobStatus = pydantic.Field(default_factory=RayCronJobStatus)
