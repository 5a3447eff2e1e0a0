"""The Ray dashboard client: what the operator asks a Ray head, and how the request gets there.

**The protocol** (:class:`DashboardClient`, one per Ray cluster; the aiohttp
implementation comes from :meth:`Dashboards.client_for`, a fake from
:mod:`controllers.ray.fake`):

- ``await get_serve_applications()`` -> :class:`ServeDetails`:
  ``GET /api/serve/applications/?api_type=declarative`` (the applications deployed
  through the REST API, as KubeRay asks). Parsed into pydantic models holding what a
  reconciler reads: per application ``status``, ``message``, ``route_prefix`` (``None``
  while it deploys: measured on Ray 2.60) and ``deployments`` ``{name: {status,
  message}}``. Unknown fields are kept (``model_extra``) and never an error; a status
  string Ray adds later is kept as the string (compare with :class:`ApplicationStatus`
  / :class:`DeploymentStatus`, which are ``str`` enums).
- ``await put_serve_applications(config)``: ``PUT /api/serve/applications/`` with the
  JSON body (a mapping, e.g. from :func:`controllers.ray.serveconfig.serve_config`).
  Serve answers 200 at once and deploys asynchronously; applications left out of the
  config are removed by Serve.
- ``await serve_proxy_healthy(pod)`` -> ``bool``: ``GET <pod>:<serve port>/-/healthz``
  on a pod's Serve proxy; ``True`` only on HTTP 200. **Never raises** a
  :class:`DashboardError`: unreachable, timed out, any other status, or a pod without
  an IP (direct modes) is ``False``, as KubeRay treats any failure. ``pod`` is a
  :class:`ServePod` or a pod object (``status.podIP``, ``metadata.name`` and
  ``namespace``, the first container's port named ``serve``, default 8000: see
  :func:`serve_pod`).

The Ray Jobs API (``/api/jobs/``, as Ray 2.x's job module serves it and KubeRay v1.7.0's
``HTTPMode`` calls it; a job id in a path is percent-encoded as one segment):

- ``await submit_job(request)`` -> ``str``: ``POST /api/jobs/`` with
  :meth:`JobSubmitRequest.body` (``entrypoint`` always; ``submission_id``,
  ``metadata``, ``runtime_env``, ``entrypoint_num_cpus``, ``entrypoint_num_gpus``,
  ``entrypoint_resources`` only when set and not empty or zero, as KubeRay sends them);
  the answer's ``submission_id`` (else its ``job_id``: Ray's ``JobSubmitResponse`` has
  both, equal). A submission id already in use is :class:`DashboardJobExists`.
- ``await get_job(submission_id)`` -> :class:`JobInfo` or ``None``: ``GET
  /api/jobs/<id>`` (a submission id or a driver job id); ``None`` on Ray's 404.
- ``await list_jobs()`` -> ``list[JobInfo]``: ``GET /api/jobs/``, every job the head
  knows, driver jobs (no ``submission_id``) too; at most :data:`MAX_JOBS`.
- ``await stop_job(submission_id)`` -> ``bool``: ``POST /api/jobs/<id>/stop``; Ray's
  ``stopped`` (``False``: the job was already terminal).
- ``await delete_job(submission_id)`` -> ``bool``: ``DELETE /api/jobs/<id>``; Ray's
  ``deleted``. Ray refuses to delete a job that is not terminal (a 500,
  :class:`DashboardHTTPError`): stop it first.
- ``await get_job_logs(submission_id)`` -> ``str``: ``GET /api/jobs/<id>/logs``, Ray's
  ``logs`` (``""`` before the driver started); read with the same body cap as every
  answer, so a longer log is :class:`DashboardMalformed`.

``stop_job``, ``delete_job`` and ``get_job_logs`` of an id Ray does not know raise
:class:`DashboardJobNotFound`. Job statuses are :class:`JobStatus` (``str`` enum; a new
one is kept as the string); times are epoch milliseconds as Ray sends them. The Jobs
calls carry the auth token like the Serve calls.

**Errors**, all :class:`DashboardError` (each carries ``method`` and ``url``):
:class:`DashboardUnreachable` (refused, reset, DNS failure; in kubernetes-proxy mode
also the API server's own 503, "error trying to reach service" / "no endpoints
available"), :class:`DashboardTimeout` (the connect or total timeout passed),
:class:`DashboardHTTPError` (a non-2xx answer: ``status`` and the body's ``text``,
such as Serve's plain-text 400 for a config without ``import_path``; in
kubernetes-proxy mode the API server's refusals too, e.g. 403 with its message) and
:class:`DashboardMalformed` (a 2xx body that is not JSON or not the expected shape, or
with more than :data:`MAX_APPLICATIONS` applications or :data:`MAX_JOBS` jobs) and
:class:`DashboardRedirected` (a 3xx answer, naming its ``Location``). Two
:class:`DashboardHTTPError` subclasses name Jobs API answers a caller may want to tell
apart: :class:`DashboardJobExists` (the submission id is taken: Ray's 500 saying
:data:`JOB_EXISTS_MARKER`; "already submitted" may be success) and
:class:`DashboardJobNotFound` (Ray's 404 for an unknown job, never the API server's own
404).

**Never followed, never unbounded**: redirects are not followed in any mode (a head
that answers the PUT with a 307 would otherwise have the config re-sent wherever it
points, and in kubernetes-proxy mode the manager's bearer token with it); every body is
read with a cap (``Dashboards(max_body_bytes=)``, default 4 MiB: Serve's answer for a
config at the CRD's 1.5 MiB bound fits), refused as :class:`DashboardMalformed` past it
without keeping what was read.

**Timeouts** (:class:`Timeouts`): connect 2 s and total 2 s by default (KubeRay's
client has a 2 s total timeout), 10 s total through the API server's proxy (KubeRay
v1.7.0's ``RayHTTPClientProxyTimeoutSeconds``: the first Serve PUT to a real head
takes about 2 s there); every request has both. Nothing is retried here: the
reconciler's next pass is the retry (KubeRay requeues a RayService every 2 s).

**Address modes** (:func:`address` builds an :class:`Address`; ``Mode``):

- ``service`` (the default): the dashboard at
  ``http://<head svc>.<ns>.svc.<cluster domain>:8265``; a pod's Serve proxy at
  ``http://<pod IP>:<serve port>/-/healthz``;
- ``pod-ip``: the dashboard at ``http://<head pod IP>:8265``; Serve proxies as above;
- ``kubernetes-proxy``: the dashboard at
  ``<API server>/api/v1/namespaces/<ns>/services/<head svc>:dashboard/proxy/...``; a
  pod's Serve proxy at ``<API server>/api/v1/namespaces/<ns>/pods/<pod>:<serve
  port>/proxy/-/healthz``.

``service`` is KubeRay's default (its health check goes to the pod IP even then);
``kubernetes-proxy`` is KubeRay's ``--use-kubernetes-proxy``: the requests go
through the API server's proxy subresources (the head service's port **named**
``dashboard``) with the manager's own API client, i.e. the same session, TLS and
credentials (:meth:`runtime.client.client.Client.send`), so a manager outside the
cluster needs nothing but the API server. IPv6 addresses are bracketed.

**Auth**: with ``auth_token``, dashboard requests (Serve and Jobs) carry ``x-ray-authorization:
Bearer <token>`` (Ray's header for token authentication behind proxies, which
consume ``Authorization``). KubeRay v1.5.0 has no token support; KubeRay 1.6 sends
this header with the token from the Secret named after the cluster (or
``authOptions.secretName``), key ``auth_token``. The Serve proxy health check
carries no token.

**Sessions**: :class:`Dashboards` owns **one** aiohttp session for the direct modes,
created on first use and shared by every client it hands out (a client is a small
object: ask for one per cluster and reconcile); :meth:`Dashboards.close` closes it
once. The kubernetes-proxy mode uses the API client's session, which
:class:`Dashboards` does not close. :class:`DashboardFactory` is the protocol that
both :class:`Dashboards` and :class:`controllers.ray.fake.FakeDashboards` satisfy.

>>> address("service", cluster="demo", namespace="ray").applications_url
'http://demo-head-svc.ray.svc.cluster.local:8265/api/serve/applications/'
>>> address("pod-ip", cluster="demo", namespace="ray", head_pod_ip="fd00::5").applications_url
'http://[fd00::5]:8265/api/serve/applications/'
>>> a = address("kubernetes-proxy", cluster="demo", namespace="ray")
>>> a.applications_url
'/api/v1/namespaces/ray/services/demo-head-svc:dashboard/proxy/api/serve/applications/'
>>> a.healthz_url(ServePod(namespace="ray", name="demo-head-x7k2p", ip=None))
'/api/v1/namespaces/ray/pods/demo-head-x7k2p:8000/proxy/-/healthz'
"""

from __future__ import annotations

import dataclasses
import json
import urllib.parse
from collections.abc import Callable, Mapping
from typing import Any, Literal, Protocol, TypeAlias

import aiohttp
import pydantic

from api.v1 import meta
from controllers.ray import jobs, serve
from runtime.client import client as client_
from runtime.client import errors as errors_

__all__ = [
    "ADDRESS_MODES",
    "APPLICATIONS_PATH",
    "AUTH_HEADER",
    "JOBS_PATH",
    "JOB_EXISTS_MARKER",
    "MAX_APPLICATIONS",
    "MAX_BODY_BYTES",
    "MAX_JOBS",
    "Address",
    "ApplicationDetails",
    "ApplicationStatus",
    "DashboardClient",
    "DashboardError",
    "DashboardFactory",
    "DashboardHTTPError",
    "DashboardJobExists",
    "DashboardJobNotFound",
    "DashboardMalformed",
    "DashboardRedirected",
    "DashboardTimeout",
    "DashboardUnreachable",
    "Dashboards",
    "DeploymentDetails",
    "DeploymentStatus",
    "JobInfo",
    "JobStatus",
    "JobSubmitRequest",
    "Mode",
    "PodRef",
    "ServeDetails",
    "ServePod",
    "Timeouts",
    "address",
    "parse_job_info",
    "parse_job_list",
    "parse_serve_details",
    "serve_pod",
]

Mode = Literal["service", "pod-ip", "kubernetes-proxy"]
ADDRESS_MODES: tuple[Mode, ...] = ("service", "pod-ip", "kubernetes-proxy")
"""The address modes, the default first."""

DEFAULT_DASHBOARD_PORT = 8265
DEFAULT_SERVE_PORT = serve.DEFAULT_SERVE_PORT
DEFAULT_CLUSTER_DOMAIN = "cluster.local"
APPLICATIONS_PATH = "/api/serve/applications/"
HEALTHZ_PATH = "/-/healthz"
AUTH_HEADER = "x-ray-authorization"
_DASHBOARD_PORT_NAME = "dashboard"
_SERVE_PORT_NAME = "serve"
MAX_BODY_BYTES = 4 * 1024 * 1024
"""Default cap on a dashboard answer's body (bytes)."""
MAX_APPLICATIONS = 1000
"""More applications in one answer than this is refused as malformed (a head cannot
run that many; the bound keeps one answer's parse short)."""
JOBS_PATH = "/api/jobs/"
MAX_JOBS = 10_000
"""More jobs in one ``GET /api/jobs/`` answer than this is refused as malformed (Ray keeps
every submission until it is deleted; the bound keeps one answer's parse short)."""
JOB_EXISTS_MARKER = "Please use a different submission_id"
"""What Ray's answer to a submission with a submission id already in use says (Ray 2.x:
``Job with submission_id <id> already exists. Please use a different submission_id.``,
inside a 500's traceback; KubeRay v1.7.0 looks for this sentence)."""
_ERROR_TEXT_IN_MESSAGE = 1000
"""Characters of a response body quoted in an error's message (``text`` keeps all)."""


# -- models ---------------------------------------------------------------------------------


ApplicationStatus = serve.ApplicationStatus
DeploymentStatus = serve.DeploymentStatus
DeploymentDetails = serve.DeploymentDetails
ApplicationDetails = serve.ApplicationDetails
ServeDetails = serve.ServeDetails
"""The models of Serve's answers live in :mod:`controllers.ray.serve` (pure data, no I/O);
these names are theirs."""


def parse_serve_details(body: bytes | str) -> ServeDetails:
    """Parse a ``GET /api/serve/applications/`` body; :class:`DashboardMalformed` if it
    is not JSON or not that shape.

    >>> d = parse_serve_details(b'{"applications": {"a": {"status": "RUNNING", "x": 1}}}')
    >>> d.applications["a"].status == ApplicationStatus.RUNNING, d.applications["a"].message
    (True, '')
    """
    try:
        decoded = json.loads(body)
    except ValueError as exc:
        raise DashboardMalformed(f"the body is not JSON ({exc})", text=_as_text(body)) from None
    applications = decoded.get("applications") if isinstance(decoded, dict) else None
    if isinstance(applications, dict) and len(applications) > MAX_APPLICATIONS:
        raise DashboardMalformed(
            f"the body lists {len(applications)} applications, more than {MAX_APPLICATIONS}"
        )
    try:
        return ServeDetails.model_validate(decoded)
    except pydantic.ValidationError as exc:
        problems = "; ".join(
            f"{meta.field_path(e['loc']) or '(top)'}: {e['msg']}" for e in exc.errors()
        )
        raise DashboardMalformed(
            f"the body is not Serve's details ({problems})", text=_as_text(body)
        ) from None


JobStatus = jobs.JobStatus
JobInfo = jobs.JobInfo
JobSubmitRequest = jobs.JobSubmitRequest
"""The models of the Jobs API live in :mod:`controllers.ray.jobs` (pure data, no I/O);
these names are theirs."""


def parse_job_info(body: bytes | str) -> JobInfo:
    """Parse a ``GET /api/jobs/<id>`` body; :class:`DashboardMalformed` if it is not JSON
    or not one job (an object with a string ``status``).

    >>> parse_job_info(b'{"status": "SUCCEEDED", "start_time": 1700000000000, '
    ...                b'"end_time": 1700000003000, "message": null}').end_time
    1700000003000
    """
    return _job(_json(body, "a job"), body)


def parse_job_list(body: bytes | str) -> list[JobInfo]:
    """Parse a ``GET /api/jobs/`` body (a JSON list of jobs, submitted and driver jobs
    alike); :class:`DashboardMalformed` if it is not that, or lists more than
    :data:`MAX_JOBS`.

    >>> [j.submission_id for j in parse_job_list(b'[{"status": "RUNNING", "submission_id": "a"}]')]
    ['a']
    """
    decoded = _json(body, "the job list")
    if not isinstance(decoded, list):
        raise DashboardMalformed("the body is not a list of jobs", text=_as_text(body))
    if len(decoded) > MAX_JOBS:
        raise DashboardMalformed(f"the body lists {len(decoded)} jobs, more than {MAX_JOBS}")
    return [_job(item, body, where=f"[{index}]") for index, item in enumerate(decoded)]


def _json(body: bytes | str, what: str) -> Any:
    try:
        return json.loads(body)
    except ValueError as exc:
        raise DashboardMalformed(
            f"the body is not JSON ({exc}), not {what}", text=_as_text(body)
        ) from None


def _job(decoded: Any, body: bytes | str, *, where: str = "") -> JobInfo:
    try:
        return JobInfo.model_validate(decoded)
    except pydantic.ValidationError as exc:
        problems = "; ".join(
            f"{where}{meta.field_path(e['loc']) or '(top)'}: {e['msg']}" for e in exc.errors()
        )
        raise DashboardMalformed(
            f"the body is not Ray's job details ({problems})", text=_as_text(body)
        ) from None


# -- errors ---------------------------------------------------------------------------------


class DashboardError(Exception):
    """A request to a Ray head failed; ``method`` and ``url`` say which (when known)."""

    def __init__(self, message: str, *, method: str = "", url: str = "") -> None:
        self.method = method
        self.url = url
        self.detail = message
        where = f"{method} {url}: " if method and url else ""
        super().__init__(f"{where}{message}")


class DashboardUnreachable(DashboardError):
    """No answer from the head: connection refused or reset, DNS failure, no route;
    through the API server's proxy, its 503 for a backend it cannot reach."""


class DashboardTimeout(DashboardError):
    """The connect or total timeout passed before the answer was complete."""


class DashboardHTTPError(DashboardError):
    """A non-2xx answer: ``status`` and the body as ``text`` (Serve's errors are plain text)."""

    def __init__(self, status: int, text: str, *, method: str = "", url: str = "") -> None:
        self.status = status
        self.text = text
        quoted = text.strip()[:_ERROR_TEXT_IN_MESSAGE]
        super().__init__(
            f"HTTP {status}" + (f": {quoted}" if quoted else ""), method=method, url=url
        )


class DashboardJobExists(DashboardHTTPError):
    """``submit_job``: Ray refused the submission because its ``submission_id`` is already
    in use (a 500, or a 400 from older heads, saying :data:`JOB_EXISTS_MARKER`). The job
    was submitted before, maybe by an earlier pass: a caller may take it as success.
    ``submission_id`` is the id sent."""

    def __init__(
        self, status: int, text: str, submission_id: str, *, method: str = "", url: str = ""
    ) -> None:
        self.submission_id = submission_id
        super().__init__(status, text, method=method, url=url)


class DashboardJobNotFound(DashboardHTTPError):
    """Ray's own 404 for a job id it does not know (``stop_job``, ``delete_job``,
    ``get_job_logs``; ``get_job`` answers ``None`` instead). ``submission_id`` is the id
    asked for. The API server's 404 in kubernetes-proxy mode (no such service) is a plain
    :class:`DashboardHTTPError`, never this."""

    def __init__(
        self, status: int, text: str, submission_id: str, *, method: str = "", url: str = ""
    ) -> None:
        self.submission_id = submission_id
        super().__init__(status, text, method=method, url=url)


class DashboardRedirected(DashboardError):
    """A 3xx answer: never followed; ``status`` and ``location`` say where it pointed."""

    def __init__(self, status: int, location: str, *, method: str = "", url: str = "") -> None:
        self.status = status
        self.location = location
        super().__init__(
            f"HTTP {status} redirect to {location or '(no Location)'} refused "
            "(redirects are never followed)",
            method=method,
            url=url,
        )


class DashboardMalformed(DashboardError):
    """A 2xx answer whose body is not JSON or not the expected shape; ``text`` is the body."""

    def __init__(self, message: str, *, text: str = "", method: str = "", url: str = "") -> None:
        self.text = text
        super().__init__(message, method=method, url=url)


# -- addresses ------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class ServePod:
    """Where a pod's Serve proxy listens: its IP (direct modes) or name (kubernetes-proxy)."""

    namespace: str
    name: str
    ip: str | None
    port: int = DEFAULT_SERVE_PORT


PodRef: TypeAlias = ServePod | Mapping[str, Any]
"""A :class:`ServePod`, or a pod object as the API returns it."""


def serve_pod(pod: PodRef) -> ServePod:
    """The :class:`ServePod` of a pod object: ``status.podIP`` (``None`` when it has
    none yet), and the first container's port named ``serve`` (default 8000), as KubeRay.

    >>> serve_pod({"metadata": {"name": "h", "namespace": "ns"}, "status": {"podIP": "198.18.0.4"},
    ...            "spec": {"containers": [{"ports": [{"name": "serve", "containerPort": 9000}]}]}})
    ServePod(namespace='ns', name='h', ip='198.18.0.4', port=9000)
    """
    if isinstance(pod, ServePod):
        return pod
    metadata = pod.get("metadata") or {}
    containers = (pod.get("spec") or {}).get("containers") or [{}]
    port = DEFAULT_SERVE_PORT
    for entry in containers[0].get("ports") or ():
        if entry.get("name") == _SERVE_PORT_NAME and entry.get("containerPort"):
            port = int(entry["containerPort"])
            break
    return ServePod(
        namespace=str(metadata.get("namespace") or "default"),
        name=str(metadata.get("name") or ""),
        ip=(pod.get("status") or {}).get("podIP") or None,
        port=port,
    )


@dataclasses.dataclass(frozen=True, slots=True)
class Address:
    """Where one cluster's dashboard answers, in one mode; build it with :func:`address`.

    ``dashboard`` is an absolute URL (``service``, ``pod-ip``) or, in
    ``kubernetes-proxy`` mode, a path on the API server."""

    mode: Mode
    namespace: str
    cluster: str
    dashboard: str

    @property
    def via_api_server(self) -> bool:
        """Whether requests go through the API server's proxy subresources."""
        return self.mode == "kubernetes-proxy"

    @property
    def applications_url(self) -> str:
        """The Serve applications endpoint (a path on the API server in proxy mode)."""
        return self.dashboard + APPLICATIONS_PATH

    @property
    def jobs_url(self) -> str:
        """The Jobs API's collection (``POST`` submits, ``GET`` lists)."""
        return self.dashboard + JOBS_PATH

    def job_url(self, submission_id: str, action: str = "") -> str:
        """The Jobs API's URL of one job (``action``: ``"stop"`` or ``"logs"``); the id is
        percent-encoded as one path segment, and an empty one is a ``ValueError``.

        >>> address("pod-ip", cluster="c", namespace="n", head_pod_ip="198.18.0.9").job_url(
        ...     "a/b c", "stop")
        'http://198.18.0.9:8265/api/jobs/a%2Fb%20c/stop'
        """
        if not submission_id:
            raise ValueError("a job's submission id cannot be empty")
        segment = urllib.parse.quote(submission_id, safe="")
        return f"{self.jobs_url}{segment}" + (f"/{action}" if action else "")

    def healthz_url(self, pod: ServePod) -> str:
        """The Serve proxy health endpoint of ``pod``; ``ValueError`` when a direct mode
        needs an IP the pod does not have yet."""
        if self.via_api_server:
            return (
                f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}:{pod.port}/proxy{HEALTHZ_PATH}"
            )
        if not pod.ip:
            raise ValueError(f"pod {pod.namespace}/{pod.name} has no IP yet")
        return f"http://{_host(pod.ip)}:{pod.port}{HEALTHZ_PATH}"


def address(
    mode: Mode = "service",
    *,
    cluster: str,
    namespace: str,
    head_service: str | None = None,
    head_pod_ip: str | None = None,
    cluster_domain: str = DEFAULT_CLUSTER_DOMAIN,
    dashboard_port: int = DEFAULT_DASHBOARD_PORT,
) -> Address:
    """The dashboard :class:`Address` of a cluster in ``mode`` (see the module docstring).

    ``head_service`` defaults to ``<cluster>-head-svc`` (pass the name from the
    cluster's ``status.head.serviceName`` or its head service template when it has
    one); ``head_pod_ip`` is required in ``pod-ip`` mode (``ValueError`` without);
    ``dashboard_port`` is the head service's port named ``dashboard`` (``service``)
    or the pod's (``pod-ip``); in ``kubernetes-proxy`` mode the port goes by its name.
    """
    service = head_service or f"{cluster}-head-svc"
    if mode == "service":
        base = f"http://{service}.{namespace}.svc.{cluster_domain}:{dashboard_port}"
    elif mode == "pod-ip":
        if not head_pod_ip:
            raise ValueError(f"pod-ip mode needs the head pod's IP (cluster {namespace}/{cluster})")
        base = f"http://{_host(head_pod_ip)}:{dashboard_port}"
    elif mode == "kubernetes-proxy":
        base = f"/api/v1/namespaces/{namespace}/services/{service}:{_DASHBOARD_PORT_NAME}/proxy"
    else:
        raise ValueError(
            f"unknown dashboard address mode {mode!r}; one of {', '.join(ADDRESS_MODES)}"
        )
    return Address(mode=mode, namespace=namespace, cluster=cluster, dashboard=base)


def _host(ip: str) -> str:
    return f"[{ip}]" if ":" in ip and not ip.startswith("[") else ip


# -- the protocols --------------------------------------------------------------------------


class DashboardClient(Protocol):
    """One Ray cluster's dashboard and Serve proxies; see the module docstring."""

    async def get_serve_applications(self) -> ServeDetails:
        """The declaratively deployed Serve applications."""
        ...

    async def put_serve_applications(self, config: Mapping[str, Any]) -> None:
        """Deploy ``config`` (the whole multi-application config)."""
        ...

    async def serve_proxy_healthy(self, pod: PodRef) -> bool:
        """Whether ``pod``'s Serve proxy answers 200 on ``/-/healthz``; never raises."""
        ...

    async def submit_job(self, request: JobSubmitRequest) -> str:
        """Submit a job; its submission id. :class:`DashboardJobExists` if the id is taken."""
        ...

    async def get_job(self, submission_id: str) -> JobInfo | None:
        """One job, or ``None`` when Ray does not know the id."""
        ...

    async def list_jobs(self) -> list[JobInfo]:
        """Every job the head knows (submitted and driver jobs)."""
        ...

    async def stop_job(self, submission_id: str) -> bool:
        """Ask Ray to stop a job; ``False`` when it was already terminal."""
        ...

    async def delete_job(self, submission_id: str) -> bool:
        """Delete a terminal job's record; Ray refuses (HTTP 500) a job still running."""
        ...

    async def get_job_logs(self, submission_id: str) -> str:
        """A job's driver logs so far (bounded like every answer)."""
        ...


class DashboardFactory(Protocol):
    """Hands out a :class:`DashboardClient` per cluster address."""

    def client_for(self, address: Address, *, auth_token: str | None = None) -> DashboardClient:
        """A client for ``address``; cheap (no I/O)."""
        ...

    async def close(self) -> None:
        """Release what the factory holds (idempotent)."""
        ...


# -- the aiohttp implementation -------------------------------------------------------------


@dataclasses.dataclass(frozen=True, kw_only=True)
class Timeouts:
    """Bounds on every dashboard request. Every field states its default."""

    connect: float = 2.0
    """Seconds to get a connection (pool wait and TCP connect). Default 2 s."""

    total: float = 2.0
    """Seconds for the whole request, connect to last byte. Default 2 s."""

    proxy_total: float = 10.0
    """``total`` for a request through the API server's proxy (``kubernetes-proxy``
    addresses). Default 10 s, as KubeRay v1.7.0."""

    def client_timeout(self, *, via_api_server: bool = False) -> aiohttp.ClientTimeout:
        total = self.proxy_total if via_api_server else self.total
        return aiohttp.ClientTimeout(total=total, connect=self.connect, sock_connect=self.connect)


def _default_session() -> aiohttp.ClientSession:
    # trust_env=False: never route through an HTTP(S)_PROXY from the environment.
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=100),
        headers={"User-Agent": "rayservice-operator/dashboard"},
        trust_env=False,
    )


class Dashboards:
    """The :class:`DashboardFactory` over aiohttp; one per manager (see the module docstring).

    ``api``: the manager's API client, needed for ``kubernetes-proxy`` addresses.
    ``session_factory``: makes the one shared session (tests count its calls).
    ``max_body_bytes``: the cap on an answer's body (default :data:`MAX_BODY_BYTES`).
    """

    def __init__(
        self,
        *,
        api: client_.Client | None = None,
        timeouts: Timeouts | None = None,
        session_factory: Callable[[], aiohttp.ClientSession] = _default_session,
        max_body_bytes: int = MAX_BODY_BYTES,
    ) -> None:
        self.api = api
        self.timeouts = timeouts or Timeouts()
        self.max_body_bytes = max_body_bytes
        self._session_factory = session_factory
        self._session: aiohttp.ClientSession | None = None
        self._closed = False

    def client_for(self, address: Address, *, auth_token: str | None = None) -> DashboardClient:
        if self._closed:
            raise RuntimeError("Dashboards is closed")
        if address.via_api_server and self.api is None:
            raise ValueError("kubernetes-proxy addresses need Dashboards(api=<the API client>)")
        return _Client(self, address, auth_token)

    async def close(self) -> None:
        """Close the shared session (once; later calls do nothing)."""
        self._closed = True
        session, self._session = self._session, None
        if session is not None:
            await session.close()

    async def __aenter__(self) -> Dashboards:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def session(self) -> aiohttp.ClientSession:
        """The shared session for direct requests, made on first use."""
        if self._closed:
            raise RuntimeError("Dashboards is closed")
        if self._session is None:
            self._session = self._session_factory()
        return self._session


@dataclasses.dataclass(frozen=True, slots=True)
class _Answer:
    status: int
    body: bytes
    content_type: str
    location: str = ""


class _Client:
    """A :class:`DashboardClient` for one address, borrowing its owner's session."""

    def __init__(self, owner: Dashboards, address: Address, auth_token: str | None) -> None:
        self._owner = owner
        self.address = address
        self._auth = {AUTH_HEADER: f"Bearer {auth_token}"} if auth_token else {}

    def __repr__(self) -> str:
        return f"<dashboard client {self.address.mode} {self.address.dashboard}>"

    async def get_serve_applications(self) -> ServeDetails:
        url = self.address.applications_url
        answer = await self._request("GET", url, query={"api_type": "declarative"})
        try:
            return parse_serve_details(answer.body)
        except DashboardMalformed as exc:
            raise DashboardMalformed(
                exc.detail, text=exc.text, method="GET", url=self._shown(url)
            ) from None

    async def put_serve_applications(self, config: Mapping[str, Any]) -> None:
        body = json.dumps(config).encode()
        await self._request(
            "PUT", self.address.applications_url, body=body,
            headers={"Content-Type": "application/json"},
        )  # fmt: skip

    async def serve_proxy_healthy(self, pod: PodRef) -> bool:
        target = serve_pod(pod)
        if not self.address.via_api_server and not target.ip:
            return False
        try:
            answer = await self._request(
                "GET", self.address.healthz_url(target), auth=False, check=False
            )
        except DashboardError:
            return False
        return answer.status == 200

    # -- the Jobs API ---------------------------------------------------------------------

    async def submit_job(self, request: JobSubmitRequest) -> str:
        url = self.address.jobs_url
        body = json.dumps(request.body()).encode()
        try:
            answer = await self._request(
                "POST", url, body=body, headers={"Content-Type": "application/json"}
            )
        except DashboardHTTPError as exc:
            if exc.status in (400, 500) and JOB_EXISTS_MARKER in exc.text:
                raise DashboardJobExists(
                    exc.status, exc.text, request.submission_id or "",
                    method=exc.method, url=exc.url,
                ) from None  # fmt: skip
            raise
        decoded = self._decoded(answer, "POST", url)
        submission_id = decoded.get("submission_id") if isinstance(decoded, dict) else None
        if not isinstance(submission_id, str) or not submission_id:
            submission_id = decoded.get("job_id") if isinstance(decoded, dict) else None
        if not isinstance(submission_id, str) or not submission_id:
            raise DashboardMalformed(
                "the body is not Ray's submit response (no submission_id)",
                text=_as_text(answer.body), method="POST", url=self._shown(url),
            )  # fmt: skip
        return submission_id

    async def get_job(self, submission_id: str) -> JobInfo | None:
        url = self.address.job_url(submission_id)
        answer = await self._job_request("GET", url, submission_id, missing_ok=True)
        if answer is None:
            return None
        try:
            return parse_job_info(answer.body)
        except DashboardMalformed as exc:
            raise DashboardMalformed(
                exc.detail, text=exc.text, method="GET", url=self._shown(url)
            ) from None

    async def list_jobs(self) -> list[JobInfo]:
        url = self.address.jobs_url
        answer = await self._request("GET", url)
        try:
            return parse_job_list(answer.body)
        except DashboardMalformed as exc:
            raise DashboardMalformed(
                exc.detail, text=exc.text, method="GET", url=self._shown(url)
            ) from None

    async def stop_job(self, submission_id: str) -> bool:
        url = self.address.job_url(submission_id, "stop")
        answer = await self._job_request("POST", url, submission_id)
        assert answer is not None
        return self._flag(answer, "POST", url, "stopped")

    async def delete_job(self, submission_id: str) -> bool:
        url = self.address.job_url(submission_id)
        answer = await self._job_request("DELETE", url, submission_id)
        assert answer is not None
        return self._flag(answer, "DELETE", url, "deleted")

    async def get_job_logs(self, submission_id: str) -> str:
        url = self.address.job_url(submission_id, "logs")
        answer = await self._job_request("GET", url, submission_id)
        assert answer is not None
        decoded = self._decoded(answer, "GET", url)
        logs = decoded.get("logs") if isinstance(decoded, dict) else None
        if not isinstance(logs, str):
            raise DashboardMalformed(
                "the body is not Ray's logs response (no string logs)",
                text=_as_text(answer.body), method="GET", url=self._shown(url),
            )  # fmt: skip
        return logs

    async def _job_request(
        self, method: str, url: str, submission_id: str, *, missing_ok: bool = False
    ) -> _Answer | None:
        """A request about one job: Ray's own 404 is ``None`` (``missing_ok``) or
        :class:`DashboardJobNotFound`; any other non-2xx is raised as usual."""
        answer = await self._request(method, url, check=False)
        if answer.status == 404 and not (
            self.address.via_api_server and _kubernetes_status(answer) is not None
        ):
            if missing_ok:
                return None
            raise DashboardJobNotFound(
                404, _as_text(answer.body), submission_id, method=method, url=self._shown(url)
            )
        if not 200 <= answer.status < 300:
            raise self._http_error(method, url, answer)
        return answer

    def _decoded(self, answer: _Answer, method: str, url: str) -> Any:
        try:
            return json.loads(answer.body)
        except ValueError as exc:
            raise DashboardMalformed(
                f"the body is not JSON ({exc})", text=_as_text(answer.body),
                method=method, url=self._shown(url),
            ) from None  # fmt: skip

    def _flag(self, answer: _Answer, method: str, url: str, key: str) -> bool:
        decoded = self._decoded(answer, method, url)
        value = decoded.get(key) if isinstance(decoded, dict) else None
        if not isinstance(value, bool):
            raise DashboardMalformed(
                f"the body is not Ray's answer (no boolean {key!r})",
                text=_as_text(answer.body), method=method, url=self._shown(url),
            )  # fmt: skip
        return value

    # -- transport ------------------------------------------------------------------------

    def _shown(self, url: str) -> str:
        """The URL as shown in errors (the API server's host added in proxy mode)."""
        api = self._owner.api
        return api.host + url if self.address.via_api_server and api is not None else url

    async def _request(
        self,
        method: str,
        url: str,
        *,
        query: Mapping[str, str] | None = None,
        body: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        auth: bool = True,
        check: bool = True,
    ) -> _Answer:
        all_headers = {**(self._auth if auth else {}), **(headers or {})}
        timeout = self._owner.timeouts.client_timeout(via_api_server=self.address.via_api_server)
        try:
            if self.address.via_api_server:
                api = self._owner.api
                assert api is not None  # client_for checked
                raw = await api.send(
                    method, url, query=query, body=body, headers=all_headers,
                    client_timeout=timeout, throttle=False,  # data plane: not the QPS budget
                    max_bytes=self._owner.max_body_bytes,
                )  # fmt: skip
                answer = _Answer(raw.status, raw.body, raw.content_type, raw.location)
            else:
                async with self._owner.session().request(
                    method, url, params=query, data=body, headers=all_headers, timeout=timeout,
                    allow_redirects=False,
                ) as response:  # fmt: skip
                    answer = _Answer(
                        response.status,
                        await client_.read_capped(
                            response, self._owner.max_body_bytes, method, self._shown(url)
                        ),
                        response.headers.get("Content-Type", ""),
                        response.headers.get("Location", ""),
                    )
        except errors_.ResponseTooLarge as exc:
            raise DashboardMalformed(
                f"the answer is larger than {exc.limit} bytes; refused",
                method=method, url=self._shown(url),
            ) from None  # fmt: skip
        except TimeoutError as exc:  # also aiohttp's connect/read timeouts
            raise DashboardTimeout(
                _describe(exc, "timed out"), method=method, url=self._shown(url)
            ) from exc
        except aiohttp.ClientError as exc:
            raise DashboardUnreachable(
                _describe(exc, "unreachable"), method=method, url=self._shown(url)
            ) from exc
        except OSError as exc:  # pragma: no cover (aiohttp wraps socket errors)
            raise DashboardUnreachable(str(exc), method=method, url=self._shown(url)) from exc
        if 300 <= answer.status < 400:
            raise DashboardRedirected(
                answer.status, answer.location, method=method, url=self._shown(url)
            )
        if check and not 200 <= answer.status < 300:
            raise self._http_error(method, url, answer)
        return answer

    def _http_error(self, method: str, url: str, answer: _Answer) -> DashboardError:
        text = _as_text(answer.body)
        shown = self._shown(url)
        if self.address.via_api_server:
            status = _kubernetes_status(answer)
            if status is not None:
                message = str(status.get("message") or text)
                if answer.status == 503:
                    # The API server could not reach the pod (or the service has no endpoints).
                    return DashboardUnreachable(f"API server: {message}", method=method, url=shown)
                return DashboardHTTPError(answer.status, message, method=method, url=shown)
        return DashboardHTTPError(answer.status, text, method=method, url=shown)


def _kubernetes_status(answer: _Answer) -> Mapping[str, Any] | None:
    """The API server's own ``Status`` object, when that is what the answer carries."""
    if "json" not in answer.content_type:
        return None
    try:
        decoded = json.loads(answer.body)
    except ValueError:
        return None
    if isinstance(decoded, dict) and decoded.get("kind") == "Status":
        return decoded
    return None


def _describe(exc: BaseException, fallback: str) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else f"{fallback} ({type(exc).__name__})"


def _as_text(body: bytes | str) -> str:
    return body if isinstance(body, str) else body.decode("utf-8", errors="replace")
