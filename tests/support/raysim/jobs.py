"""The Ray Jobs API of one simulated head: submissions and their lifecycle, pure.

:class:`Jobs` is the job table one head pod keeps. Like :class:`tests.support.raysim.serve.Head`
it never sleeps and reads no clock of its own: ``clock`` gives the time (seconds; the simulator
passes ``time.time``, unit tests a counter) and a job's status is worked out when it is read.

What it answers (the shapes of Ray 2.x's ``dashboard/modules/job``: ``JobDetails``,
``JobSubmitResponse``, ``JobStopResponse``, ``JobDeleteResponse``, ``JobLogsResponse``):

- :meth:`Jobs.submit` - ``POST /api/jobs/``: the body is checked as Ray's
  ``JobSubmitRequest`` (``entrypoint`` a string; ``submission_id``/``job_id`` strings;
  ``metadata`` strings to strings; ``runtime_env`` and ``entrypoint_resources`` objects;
  numbers for ``entrypoint_num_cpus``/``_gpus``; no other key): a bad one is a 400 whose
  text is a ``TypeError`` traceback. A ``submission_id`` already in the table is a 500
  saying ``Job with submission_id <id> already exists. Please use a different
  submission_id.`` (Ray's words, inside its traceback). Without one the head makes
  ``raysubmit_<16 characters>``. Answers ``{"job_id": id, "submission_id": id}``.
- :meth:`Jobs.get` - ``GET /api/jobs/<id>`` (a submission id or the driver's job id): the
  job's ``JobDetails``; 404 ``Job <id> does not exist`` for an unknown one.
- :meth:`Jobs.list` - ``GET /api/jobs/``: every job's details, in submission order.
- :meth:`Jobs.stop` - ``POST /api/jobs/<id>/stop``: a ``PENDING`` or ``RUNNING`` job is
  ``STOPPED`` from now on (``{"stopped": true}``); a terminal one answers ``false``.
- :meth:`Jobs.delete` - ``DELETE /api/jobs/<id>``: a terminal job is forgotten
  (``{"deleted": true}``); one that is not is a 500 (``Attempted to delete job '<id>',
  but it is in a non-terminal state <status>.``).
- :meth:`Jobs.logs` - ``GET /api/jobs/<id>/logs``: ``{"logs": ...}``, empty while
  ``PENDING``, then a line per step the simulated driver reached.

**The lifecycle** of a job submitted at ``t`` (``start_time`` = ``t``): ``PENDING`` for
``pending_s``, then ``RUNNING`` (``job_id`` and the driver fields appear) for ``run_s``,
then its ``outcome``: ``succeed`` -> ``SUCCEEDED``, ``fail`` -> ``FAILED`` (``message``
the given one, else Ray's "Job entrypoint command failed with exit code 1, ...",
``error_type`` ``JOB_ENTRYPOINT_COMMAND_ERROR``, ``driver_exit_code`` 1), ``forever`` ->
``RUNNING`` until stopped; ``end_time`` is the moment it became terminal (or was
stopped). Times are Unix epoch **milliseconds** (ints), as Ray reports them; ``end_time``
is ``null`` until then, ``job_id`` ``null`` while ``PENDING``.

**Choosing a job's behaviour** (:class:`Script`): the simulator's defaults
(:class:`Defaults`: ``--job-pending-s``, ``--job-run-s``, ``--job-outcome``), overridden
per job by ``raysim.<key>=<value>`` words in the entrypoint, overridden in turn by
``raysim.<key>`` metadata keys. Keys: ``outcome`` (``succeed``, ``fail``, ``forever``),
``pending_s`` and ``run_s`` (seconds, >= 0), ``message`` (the failure message). A bad
value or an unknown ``raysim.`` key refuses the submission (400, naming it).

>>> clock = iter([0.0, 0.5, 2.0, 9.0]).__next__
>>> jobs = Jobs(Defaults(pending_s=1.0, run_s=3.0), clock=clock, ip="198.18.1.7")
>>> jobs.submit({"entrypoint": "python x.py raysim.outcome=fail", "submission_id": "j"})
{'job_id': 'j', 'submission_id': 'j'}
>>> [jobs.get("j")["status"] for _ in range(3)]
['PENDING', 'RUNNING', 'FAILED']
"""

from __future__ import annotations

import dataclasses
import hashlib
import shlex
from collections.abc import Callable, Mapping
from typing import Any, Literal, cast

__all__ = ["OUTCOMES", "Defaults", "JobError", "Jobs", "Script", "route_of"]

Outcome = Literal["succeed", "fail", "forever"]
OUTCOMES: tuple[Outcome, ...] = ("succeed", "fail", "forever")
PREFIX = "raysim."
TERMINAL = ("STOPPED", "SUCCEEDED", "FAILED")
_REQUEST_KEYS = {
    "entrypoint", "submission_id", "job_id", "runtime_env", "metadata",
    "entrypoint_num_cpus", "entrypoint_num_gpus", "entrypoint_memory", "entrypoint_resources",
}  # fmt: skip
_ALPHABET = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"


class JobError(Exception):
    """An answer other than 200: ``status`` and the plain-text ``text`` Ray would send."""

    def __init__(self, status: int, text: str) -> None:
        self.status = status
        self.text = text
        super().__init__(f"{status}: {text}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Defaults:
    """How a job behaves unless its entrypoint or metadata says otherwise. Every field states
    its default."""

    pending_s: float = 1.0
    """Seconds a job stays ``PENDING`` (Ray: the runtime env and the supervisor starting).
    Default 1 s."""

    run_s: float = 3.0
    """Seconds a job stays ``RUNNING`` before its outcome. Default 3 s."""

    outcome: Outcome = "succeed"
    """``succeed``, ``fail`` or ``forever`` (running until stopped). Default ``succeed``."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Script:
    """One job's behaviour, from :class:`Defaults` and the job's own directives."""

    pending_s: float
    run_s: float
    outcome: Outcome
    message: str = ""

    @classmethod
    def of(cls, defaults: Defaults, entrypoint: str, metadata: Mapping[str, str]) -> Script:
        """The script of a job; :class:`JobError` 400 for a bad directive.

        >>> Script.of(Defaults(), "python a.py raysim.run_s=0.5 'raysim.message=no luck'",
        ...           {"raysim.outcome": "fail"})
        Script(pending_s=1.0, run_s=0.5, outcome='fail', message='no luck')
        """
        try:
            words = shlex.split(entrypoint)
        except ValueError:
            words = entrypoint.split()
        directives = {
            word[len(PREFIX) :].split("=", 1)[0]: word.split("=", 1)[1]
            for word in words
            if word.startswith(PREFIX) and "=" in word
        }
        directives.update(
            {key[len(PREFIX) :]: value for key, value in metadata.items() if key.startswith(PREFIX)}
        )
        fields: dict[str, Any] = dataclasses.asdict(defaults)
        for key, value in directives.items():
            if key in ("pending_s", "run_s"):
                try:
                    seconds = float(value)
                except ValueError:
                    seconds = -1.0
                if not 0 <= seconds < float("inf"):
                    raise JobError(400, f"raysim: {PREFIX}{key}={value!r} is not seconds >= 0")
                fields[key] = seconds
            elif key == "outcome":
                if value not in OUTCOMES:
                    choices = ", ".join(OUTCOMES)
                    raise JobError(
                        400, f"raysim: {PREFIX}outcome={value!r} is not one of {choices}"
                    )
                fields[key] = value
            elif key == "message":
                fields[key] = value
            else:
                raise JobError(400, f"raysim: unknown directive {PREFIX}{key}")
        return cls(**fields)


@dataclasses.dataclass(slots=True)
class _Job:
    submission_id: str
    number: int
    request: dict[str, Any]
    script: Script
    submitted_at: float
    stopped_at: float | None = None


def _traceback(error: str, where: str) -> str:
    """The text of Ray's 500/400: the job head's traceback, ending in ``error``."""
    return (
        "Traceback (most recent call last):\n"
        f'  File "/ray/python/ray/dashboard/modules/job/job_head.py", line 305, in {where}\n'
        f"    resp = await job_agent_client.{where}_internal(...)\n"
        f"{error}\n"
    )


def _check(body: Any) -> dict[str, Any]:
    def refuse(message: str) -> JobError:
        return JobError(400, _traceback(f"TypeError: {message}", "submit_job"))

    if not isinstance(body, dict):
        raise refuse("the request body must be a JSON object")
    unknown = sorted(set(body) - _REQUEST_KEYS)
    if unknown:
        raise refuse(f"__init__() got an unexpected keyword argument '{unknown[0]}'")
    if not isinstance(body.get("entrypoint"), str):
        raise refuse(f"entrypoint must be a string, got {type(body.get('entrypoint'))}")
    for key in ("submission_id", "job_id"):
        if body.get(key) is not None and not isinstance(body[key], str):
            raise refuse(f"{key} must be a string if provided, got {type(body[key])}")
    metadata = body.get("metadata")
    if metadata is not None and not (
        isinstance(metadata, dict)
        and all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items())
    ):
        raise refuse("metadata must be a dict of strings to strings")
    for key in ("runtime_env", "entrypoint_resources"):
        if body.get(key) is not None and not isinstance(body[key], dict):
            raise refuse(f"{key} must be a dict, got {type(body[key])}")
    for key in ("entrypoint_num_cpus", "entrypoint_num_gpus"):
        value = body.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
            raise refuse(f"{key} must be a number, got {type(value)}")
    return body


def _hex_id(*parts: str, length: int = 56) -> str:
    return hashlib.sha256("/".join(parts).encode()).hexdigest()[:length]


def route_of(path: str) -> tuple[str, str] | None:
    """``(submission id, route)`` of a Jobs API path, the route with ``{id}`` for the id;
    ``None`` for any other path. The collection's own id is ``""``.

    >>> route_of("/api/jobs/"), route_of("/api/jobs/j-1/stop"), route_of("/api/serve/")
    (('', '/api/jobs/'), ('j-1', '/api/jobs/{id}/stop'), None)
    """
    if path.rstrip("/") == "/api/jobs":
        return "", "/api/jobs/"
    if not path.startswith("/api/jobs/"):
        return None
    parts = path[len("/api/jobs/") :].split("/")
    if len(parts) == 1:
        return parts[0], "/api/jobs/{id}"
    if len(parts) == 2 and parts[1] in ("stop", "logs"):
        return parts[0], "/api/jobs/{id}/" + parts[1]
    return None


class Jobs:
    """The job table of one head pod (see the module docstring)."""

    __slots__ = ("_clock", "_count", "_defaults", "_jobs", "ip")

    def __init__(
        self, defaults: Defaults, *, clock: Callable[[], float], ip: str = "0.0.0.0"
    ) -> None:
        self._defaults = defaults
        self._clock = clock
        self.ip = ip
        self._jobs: dict[str, _Job] = {}
        self._count = 0

    # -- the REST subset -----------------------------------------------------------------------

    def submit(self, body: Any) -> dict[str, str]:
        """``POST /api/jobs/``; :class:`JobError` for a 400 or 500."""
        request = _check(body)
        metadata = cast(dict[str, str], request.get("metadata") or {})
        script = Script.of(self._defaults, request["entrypoint"], metadata)
        submission_id = request.get("submission_id") or request.get("job_id")
        if not submission_id:
            digest = hashlib.sha256(f"{self.ip}/{self._count}".encode()).digest()
            submission_id = "raysubmit_" + "".join(
                _ALPHABET[b % len(_ALPHABET)] for b in digest[:16]
            )
        if submission_id in self._jobs:
            raise JobError(
                500,
                _traceback(
                    "RuntimeError: Request failed with status code 400: ValueError: Job with "
                    f"submission_id {submission_id} already exists. "
                    "Please use a different submission_id.",
                    "submit_job",
                ),
            )
        self._count += 1
        self._jobs[submission_id] = _Job(
            submission_id=submission_id, number=self._count, request=dict(request),
            script=script, submitted_at=self._clock(),
        )  # fmt: skip
        return {"job_id": submission_id, "submission_id": submission_id}

    def get(self, job_or_submission_id: str) -> dict[str, Any]:
        """``GET /api/jobs/<id>``; :class:`JobError` 404 for an unknown id."""
        return self._details(self._find(job_or_submission_id), self._clock())

    def list(self) -> list[dict[str, Any]]:
        """``GET /api/jobs/``: every job, in submission order."""
        now = self._clock()
        return [self._details(job, now) for job in self._jobs.values()]

    def stop(self, job_or_submission_id: str) -> dict[str, bool]:
        """``POST /api/jobs/<id>/stop``."""
        job = self._find(job_or_submission_id)
        now = self._clock()
        if self._status(job, now) in TERMINAL:
            return {"stopped": False}
        job.stopped_at = now
        return {"stopped": True}

    def delete(self, job_or_submission_id: str) -> dict[str, bool]:
        """``DELETE /api/jobs/<id>``: only a terminal job."""
        job = self._find(job_or_submission_id)
        status = self._status(job, self._clock())
        if status not in TERMINAL:
            raise JobError(
                500,
                _traceback(
                    "RuntimeError: Request failed with status code 500: RuntimeError: "
                    f"Attempted to delete job '{job.submission_id}', but it is in a "
                    f"non-terminal state {status}.",
                    "delete_job",
                ),
            )
        del self._jobs[job.submission_id]
        return {"deleted": True}

    def logs(self, job_or_submission_id: str) -> dict[str, str]:
        """``GET /api/jobs/<id>/logs``."""
        job = self._find(job_or_submission_id)
        return {"logs": self._logs(job, self._status(job, self._clock()))}

    def clear(self) -> None:
        """The head restarted without GCS fault tolerance: every job is forgotten."""
        self._jobs.clear()

    def __len__(self) -> int:
        return len(self._jobs)

    # -- internals -----------------------------------------------------------------------------

    def _find(self, job_or_submission_id: str) -> _Job:
        job = self._jobs.get(job_or_submission_id)
        if job is not None:
            return job
        now = self._clock()
        for candidate in self._jobs.values():  # a driver's job id, once it has one
            if self._job_id(candidate) == job_or_submission_id and self._ran(
                candidate, self._status(candidate, now)
            ):
                return candidate
        raise JobError(404, f"Job {job_or_submission_id} does not exist")

    def _ran(self, job: _Job, status: str) -> bool:
        """Whether the driver started (one stopped while ``PENDING`` never did)."""
        if status == "PENDING":
            return False
        return (
            status != "STOPPED" or job.stopped_at is None or (job.stopped_at >= self._times(job)[0])
        )

    @staticmethod
    def _job_id(job: _Job) -> str:
        """Ray's driver job id, hex of the little-endian job number (``02000000``)."""
        return (job.number + 1).to_bytes(4, "little").hex()

    def _times(self, job: _Job) -> tuple[float, float | None]:
        """When the job starts running and when it ends by itself (``None``: never)."""
        running = job.submitted_at + job.script.pending_s
        if job.script.outcome == "forever":
            return running, None
        return running, running + job.script.run_s

    def _status(self, job: _Job, now: float) -> str:
        running, ends = self._times(job)
        natural = "PENDING" if now < running else "RUNNING"
        if ends is not None and now >= ends:
            natural = "SUCCEEDED" if job.script.outcome == "succeed" else "FAILED"
        if job.stopped_at is not None and (ends is None or job.stopped_at < ends):
            return "STOPPED"
        return natural

    def _end(self, job: _Job, status: str) -> float | None:
        if status == "STOPPED":
            return job.stopped_at
        if status in TERMINAL:
            return self._times(job)[1]
        return None

    def _failure(self, job: _Job) -> str:
        return job.script.message or (
            "Job entrypoint command failed with exit code 1, last available logs "
            "(truncated to 20,000 chars):\n" + self._logs(job, "RUNNING")
        )

    def _logs(self, job: _Job, status: str) -> str:
        if not self._ran(job, status):
            return ""
        lines = [f"raysim: {job.submission_id} running {job.request['entrypoint']}"]
        if status == "SUCCEEDED":
            lines.append("raysim: finished")
        elif status == "FAILED":
            lines.append(f"raysim: failed: {job.script.message or 'exit code 1'}")
        elif status == "STOPPED":
            lines.append("raysim: stopped")
        return "\n".join(lines) + "\n"

    def _details(self, job: _Job, now: float) -> dict[str, Any]:
        status = self._status(job, now)
        started = self._ran(job, status)
        end = self._end(job, status)
        node_id = _hex_id("node", self.ip)
        message = {
            "PENDING": "Job has not started yet.",
            "RUNNING": "Job is currently running.",
            "STOPPED": "Job was intentionally stopped.",
            "SUCCEEDED": "Job finished successfully.",
        }.get(status) or self._failure(job)
        request = job.request
        job_id = self._job_id(job) if started else None
        return {
            "type": "SUBMISSION",
            "job_id": job_id,
            "submission_id": job.submission_id,
            "driver_info": (
                {"id": job_id, "node_ip_address": self.ip, "pid": str(2000 + job.number)}
                if started else None
            ),
            "status": status,
            "entrypoint": request["entrypoint"],
            "message": message,
            "error_type": "JOB_ENTRYPOINT_COMMAND_ERROR" if status == "FAILED" else None,
            "start_time": int(job.submitted_at * 1000),
            "end_time": None if end is None else int(end * 1000),
            "metadata": dict(request.get("metadata") or {}),
            "runtime_env": request.get("runtime_env") or {},
            "driver_agent_http_address": f"http://{self.ip}:52365" if started else None,
            "driver_node_id": node_id if started else None,
            "driver_exit_code": {"SUCCEEDED": 0, "FAILED": 1}.get(status),
        }  # fmt: skip
