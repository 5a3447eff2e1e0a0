"""Who submits a RayJob's job: KubeRay v1.7.0's submitter, byte for byte.

**The script** (:func:`command`, KubeRay's ``BuildJobSubmitCommand``): the container runs
``/bin/bash -ce --`` (``-cel`` with ``login_shell``, the operator's
``ENABLE_LOGIN_SHELL=true``) with one argument, these words joined by single spaces:

1. a wait loop until the dashboard's GCS is healthy:
   ``until python -c "<GET <health URL>, 10 s timeout, success iff the body holds
   'success'>" >/dev/null 2>&1 ; do echo "Waiting for Ray Dashboard GCS to become
   healthy at <address> ..." ; sleep 2 ; done ;`` - the health URL is
   ``<address>/api/gcs_healthz``, or in ``SidecarMode`` ``http://localhost:<port>/api/gcs_healthz``;
2. with ``status_check`` (``K8sJobMode`` always; ``SidecarMode`` with the
   ``SidecarSubmitterRestart`` gate): ``if ! ray job status --address <address> <id>
   >/dev/null 2>&1 ; then`` before the submit, and ``fi ; ray job logs --address
   <address> --follow <id>`` after it, so a retried submitter never submits twice;
3. ``ray job submit --address <address>``, then ``--no-wait`` (with ``status_check``),
   ``--runtime-env-json <runtimeEnvYAML as JSON, quoted>``, ``--metadata-json <metadata as
   JSON, quoted>``, ``--submission-id <status.jobId>`` (when set), ``--entrypoint-num-cpus``
   / ``--entrypoint-num-gpus`` (when above 0; the float32 value as Go's ``%f`` prints it,
   ``2.000000``), ``--entrypoint-resources <quoted>`` (when set), ``-- <entrypoint, trimmed> ;``.

The address is ``http://`` + ``status.dashboardURL`` in ``K8sJobMode`` (the prefix added
when missing) and ``http://127.0.0.1:<port>`` in ``SidecarMode`` (:func:`sidecar_address`;
the port is the head container's port named ``dashboard``, else 8265). Quoting is Go's
``strconv.Quote`` (:func:`go_quote`); the JSON is Go's ``encoding/json`` (:func:`go_json`:
keys sorted, ``<``, ``>``, ``&`` escaped, ``1.0`` written ``1``), from the YAML as
:mod:`controllers.ray.serveconfig` reads it (YAML 1.1, timestamps kept as text,
bounded). :class:`ValueError` when the words cannot be built: a ``runtimeEnvYAML`` that
is not a YAML mapping, or ``metadata`` with a ``rayVersion`` below 2.6.0 (Ray's first
``--metadata-json``) - both refused by :mod:`controllers.rayjob.validation` first.

**The submitter Job** (:func:`job`, ``K8sJobMode``): named as the RayJob, labelled
``ray.io/originated-from-cr-name``, ``ray.io/originated-from-crd: RayJob`` and
``app.kubernetes.io/created-by: kuberay-operator`` (the pod template too, over its own
labels), controlled by the RayJob, ``backoffLimit`` ``submitterConfig.backoffLimit`` or 2.
Its pod template is ``submitterPodTemplate`` (a copy), else one container
:data:`~controllers.rayjob.names.SUBMITTER_CONTAINER` running the RayCluster's head image
with 500m/200Mi requested and 1 CPU/1Gi at most, ``restartPolicy: Never``. Only the first
container is configured: the script when it has no ``command`` of its own (a user's
command and args are kept), then ``PYTHONUNBUFFERED=1``, ``RAY_DASHBOARD_ADDRESS`` (the
``dashboardURL``, no scheme) and ``RAY_JOB_SUBMISSION_ID``, **appended** as KubeRay does
(a variable the template already sets is defined twice; Kubernetes uses the later
definition, the operator's). With the cluster's token auth (``authOptions.mode: token``)
it gets ``RAY_AUTH_MODE=token`` and ``RAY_AUTH_TOKEN`` from the cluster's token Secret, or
with Kubernetes token auth ``RAY_ENABLE_K8S_TOKEN_AUTH=true`` and the ``ray-token`` mount
instead of the token, each only where the container does not set it
(:func:`controllers.raycluster.interface.configure_token`); the pod gets the projected
``ray-token`` volume whenever Kubernetes token auth is on.

**The sidecar** (:func:`sidecar_container`, ``SidecarMode``): the same default container,
always given the script, and with ``restart`` (the ``SidecarSubmitterRestart`` gate)
``restartPolicy: OnFailure`` and the status check.

>>> rayjob = v1.RayJob.model_validate({"metadata": {"name": "pi"}, "spec": {
...     "entrypoint": " python pi.py ", "entrypointNumCpus": 0.5},
...     "status": {"jobId": "pi-x2b4c", "dashboardURL": "pi-abcde-head-svc.ns.svc:8265"}})
>>> cmd, args = command(rayjob, address=rayjob.status.dashboard_url or "", status_check=True,
...                     login_shell=False)
>>> cmd
['/bin/bash', '-ce', '--']
>>> print(args[0].split(" ; ")[-3])  # doctest: +NORMALIZE_WHITESPACE
then ray job submit --address http://pi-abcde-head-svc.ns.svc:8265 --no-wait
  --submission-id pi-x2b4c --entrypoint-num-cpus 0.500000 -- python pi.py
>>> go_quote('{"pip":["numpy"]}'), go_json({"b": 1.0, "a": "<x>"})
('"{\\\\"pip\\\\":[\\\\"numpy\\\\"]}"', '{"a":"\\\\u003cx\\\\u003e","b":1}')
"""

from __future__ import annotations

import copy
import decimal
import math
import re
import struct
from collections.abc import Mapping
from typing import Any

from api import v1
from api.v1 import rayjob as rayjob_api
from controllers.ray import serveconfig
from controllers.raycluster import interface as raycluster
from controllers.rayjob import names

__all__ = [
    "DEFAULT_DASHBOARD_PORT",
    "DEFAULT_SUBMITTER_BACKOFF_LIMIT",
    "HEALTH_PATH",
    "METADATA_MIN_RAY_VERSION",
    "command",
    "container_command",
    "dashboard_port",
    "default_container",
    "go_json",
    "go_quote",
    "job",
    "k8s_job_address",
    "metadata_problem",
    "runtime_env",
    "runtime_env_json",
    "sidecar_address",
    "sidecar_container",
]

DEFAULT_DASHBOARD_PORT = 8265
"""The dashboard port when the head container names none ``dashboard``."""
DEFAULT_SUBMITTER_BACKOFF_LIMIT = 2
"""The submitter Job's ``backoffLimit`` without ``submitterConfig.backoffLimit``."""
HEALTH_PATH = "api/gcs_healthz"
"""The dashboard's GCS health endpoint the script waits for."""
METADATA_MIN_RAY_VERSION = (2, 6, 0)
"""The first Ray whose ``ray job submit`` takes ``--metadata-json``."""
_HEALTH_TIMEOUT = 10
_HEALTH_COMMAND = (
    "python -c \"import urllib.request; r=urllib.request.urlopen('{url}', timeout={timeout}); "
    "exit(0 if b'success' in r.read() else 1)\""
)
_GO_SPACE = "\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"  # noqa: E501
_SEMVER = re.compile(
    r"v?([0-9]+)(?:\.([0-9]+))?(?:\.([0-9]+))?"
    r"(?:-([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?(?:\+([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?"
)  # Masterminds/semver's NewVersion (its loose form)


# --- Go's formats ---------------------------------------------------------------------------

_GO_ESCAPES = {
    "\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v",
    "\\": "\\\\", '"': '\\"',
}  # fmt: skip


def go_quote(text: str) -> str:
    """Go's ``strconv.Quote``: double quotes, with Go's escapes for what is not printable.

    >>> print(go_quote('say "hi"\\n\\x00\\u00a0é'))
    "say \\"hi\\"\\n\\x00\\u00a0é"
    """
    out = ['"']
    for char in text:
        code = ord(char)
        if char in _GO_ESCAPES:
            out.append(_GO_ESCAPES[char])
        elif char.isprintable() and not 0xD800 <= code <= 0xDFFF:
            out.append(char)
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\x{code:02x}")
        elif 0xD800 <= code <= 0xDFFF:  # no rune: Go writes U+FFFD
            out.append("\\ufffd")
        elif code < 0x10000:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    out.append('"')
    return "".join(out)


def _json_string(text: str) -> str:
    out = ['"']
    for char in text:
        code = ord(char)
        if char in '"\\':
            out.append("\\" + char)
        elif char in "\b\f\n\r\t":
            out.append(_GO_ESCAPES[char])
        elif code < 0x20 or char in "<>&\u2028\u2029":
            out.append(f"\\u{code:04x}")
        elif 0xD800 <= code <= 0xDFFF:
            out.append("\ufffd")
        else:
            out.append(char)
    out.append('"')
    return "".join(out)


def _json_float(value: float) -> str:
    if not math.isfinite(value):
        raise ValueError(f"{value} has no JSON form")
    if value != 0 and not 1e-6 <= abs(value) < 1e21:
        return re.sub(r"e-0([0-9])$", r"e-\1", repr(value))  # Go writes e-7, not e-07
    return format(decimal.Decimal(repr(value)).normalize(), "f")


def go_json(value: Any) -> str:
    """Go's ``encoding/json.Marshal`` of a JSON-ready value: compact, map keys sorted,
    HTML characters escaped, floats in Go's shortest form.

    >>> go_json({"z": [1, 2.5, 1e21, True, None], "a": "x&y"})
    '{"a":"x\\\\u0026y","z":[1,2.5,1e+21,true,null]}'
    """
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _json_float(value)
    if isinstance(value, str):
        return _json_string(value)
    if isinstance(value, Mapping):
        items = sorted((str(k), v) for k, v in value.items())
        return "{" + ",".join(f"{_json_string(k)}:{go_json(v)}" for k, v in items) + "}"
    if isinstance(value, list | tuple):
        return "[" + ",".join(go_json(v) for v in value) + "]"
    raise TypeError(f"{type(value).__name__} has no JSON form")


def _go_f(value: float) -> str:
    """Go's ``fmt.Sprintf("%f", float32(value))``."""
    try:
        single = struct.unpack("f", struct.pack("f", value))[0]
    except OverflowError:
        return "+Inf" if value > 0 else "-Inf"
    if math.isinf(single):
        return "+Inf" if single > 0 else "-Inf"
    if math.isnan(single):
        return "NaN"
    return f"{single:f}"


# --- the job's parameters -------------------------------------------------------------------


def runtime_env(text: str | None) -> dict[str, Any] | None:
    """``runtimeEnvYAML`` as the JSON-ready mapping Ray takes; None when it is empty or
    holds no document (``""``, a comment, ``null``); :class:`ValueError` when it is not a
    YAML mapping (or has a value JSON cannot carry).

    >>> runtime_env("pip: [numpy]\\nenv_vars: {A: 'yes', B: yes}")
    {'pip': ['numpy'], 'env_vars': {'A': 'yes', 'B': True}}
    >>> runtime_env("- numpy")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: spec.runtimeEnvYAML must be a YAML mapping (...), but it is a list
    """
    if not text:
        return None
    try:
        return serveconfig.serve_config(text)
    except serveconfig.ServeConfigError as exc:
        message = str(exc)
        if message.endswith("but it is empty"):
            return None
        message = message.replace("(such as 'applications: [...]')", "(such as 'pip: [numpy]')")
        raise ValueError(message.replace("serveConfigV2", "spec.runtimeEnvYAML")) from None


def runtime_env_json(rayjob: v1.RayJob) -> str:
    """``--runtime-env-json``'s value (unquoted): ``runtimeEnvYAML`` as Go's JSON, ``""``
    without one, ``null`` for YAML that holds no document (as KubeRay passes it)."""
    text = rayjob.spec.runtime_env_yaml
    if not text:
        return ""
    return go_json(runtime_env(text))


def metadata_problem(rayjob: v1.RayJob) -> str | None:
    """Why ``metadata`` cannot go to ``ray job submit``: a ``rayClusterSpec.rayVersion``
    below 2.6.0, or not a version; None when it can (no metadata, no ``rayClusterSpec``,
    no ``rayVersion``: the cluster is taken to be recent, as KubeRay does).

    >>> metadata_problem(v1.RayJob.model_validate({"spec": {"metadata": {"a": "b"},
    ...     "rayClusterSpec": {"rayVersion": "2.5.1", "headGroupSpec": {"template": {}}}}}))
    "spec.metadata needs Ray 2.6.0 or later (ray job submit --metadata-json); rayVersion is '2.5.1'"
    """
    spec = rayjob.spec
    if not spec.metadata or spec.ray_cluster_spec is None or not spec.ray_cluster_spec.ray_version:
        return None
    version = spec.ray_cluster_spec.ray_version
    match = _SEMVER.fullmatch(version)
    if match is None:
        return f"spec.metadata: rayClusterSpec.rayVersion {version!r} is not a version"
    numbers = tuple(int(part or 0) for part in match.groups()[:3])
    if numbers < METADATA_MIN_RAY_VERSION or (
        numbers == METADATA_MIN_RAY_VERSION and match.group(4)  # 2.6.0-rc1 < 2.6.0
    ):
        return (
            "spec.metadata needs Ray 2.6.0 or later (ray job submit --metadata-json); "
            f"rayVersion is {version!r}"
        )
    return None


def _head_containers(spec: v1.RayClusterSpec) -> list[Any]:
    pod = spec.head_group_spec.template.get("spec") or {}
    containers = pod.get("containers") if isinstance(pod, Mapping) else None
    return containers if isinstance(containers, list) else []


def dashboard_port(spec: v1.RayClusterSpec) -> int:
    """The head container's port named ``dashboard``, else :data:`DEFAULT_DASHBOARD_PORT`."""
    containers = _head_containers(spec)
    head = containers[0] if containers and isinstance(containers[0], Mapping) else {}
    for port in head.get("ports") or ():
        if isinstance(port, Mapping) and port.get("name") == "dashboard":
            return int(port.get("containerPort") or 0)
    return DEFAULT_DASHBOARD_PORT


def sidecar_address(spec: v1.RayClusterSpec) -> str:
    """``http://127.0.0.1:<dashboard port>``: where the sidecar reaches its own head."""
    return f"http://127.0.0.1:{dashboard_port(spec)}"


def k8s_job_address(rayjob: v1.RayJob) -> str:
    """``http://<status.dashboardURL>``: where the submitter Job reaches the head."""
    return _with_scheme(rayjob.status.dashboard_url or "")


def _with_scheme(address: str) -> str:
    return address if address.startswith("http://") else "http://" + address


def container_command(*, login_shell: bool) -> list[str]:
    """``/bin/bash -ce --``, or ``-cel`` with a login shell (KubeRay's ``GetContainerCommand``)."""
    return ["/bin/bash", "-cel" if login_shell else "-ce", "--"]


def command(
    rayjob: v1.RayJob, *, address: str, status_check: bool, login_shell: bool
) -> tuple[list[str], list[str]]:
    """The submitter container's ``command`` and ``args`` (see the module docstring).
    ``address``: the dashboard (``http://`` is added when missing); in ``SidecarMode``
    the health check asks ``localhost`` on the head's dashboard port."""
    spec = rayjob.spec
    address = _with_scheme(address)
    job_id = rayjob.status.job_id or ""
    if (
        spec.submission_mode == rayjob_api.SubmissionMode.SIDECAR
        and spec.ray_cluster_spec is not None
    ):
        health = f"http://localhost:{dashboard_port(spec.ray_cluster_spec)}/{HEALTH_PATH}"
    else:
        health = f"{address}/{HEALTH_PATH}"
    waiting = go_quote(f"Waiting for Ray Dashboard GCS to become healthy at {address} ...")
    words = ["until", _HEALTH_COMMAND.format(url=health, timeout=_HEALTH_TIMEOUT)]
    words += [">/dev/null", "2>&1", ";", "do", "echo", waiting, ";", "sleep", "2", ";"]
    words += ["done", ";"]
    if status_check:
        words += ["if", "!", "ray", "job", "status", "--address", address, job_id]
        words += [">/dev/null", "2>&1", ";", "then"]
    words += ["ray", "job", "submit", "--address", address]
    if status_check:
        words.append("--no-wait")
    env_json = runtime_env_json(rayjob)
    if env_json:
        words += ["--runtime-env-json", go_quote(env_json)]
    if spec.metadata:
        problem = metadata_problem(rayjob)
        if problem is not None:
            raise ValueError(problem)
        words += ["--metadata-json", go_quote(go_json(spec.metadata))]
    if job_id:
        words += ["--submission-id", job_id]
    if spec.entrypoint_num_cpus is not None and spec.entrypoint_num_cpus > 0:
        words += ["--entrypoint-num-cpus", _go_f(spec.entrypoint_num_cpus)]
    if spec.entrypoint_num_gpus is not None and spec.entrypoint_num_gpus > 0:
        words += ["--entrypoint-num-gpus", _go_f(spec.entrypoint_num_gpus)]
    if spec.entrypoint_resources:
        words += ["--entrypoint-resources", go_quote(spec.entrypoint_resources)]
    words += ["--", (spec.entrypoint or "").strip(_GO_SPACE), ";"]
    if status_check:
        words += ["fi", ";", "ray", "job", "logs", "--address", address, "--follow", job_id]
    return container_command(login_shell=login_shell), [" ".join(words)]


# --- the containers and the Job ----------------------------------------------------------------


def default_container(cluster: v1.RayCluster) -> dict[str, Any]:
    """KubeRay's default submitter container: the head's image, 500m/200Mi requested,
    1 CPU/1Gi at most (:class:`ValueError`: the head template has no container)."""
    containers = _head_containers(cluster.spec)
    if not containers or not isinstance(containers[0], Mapping):
        raise ValueError("headGroupSpec.template should have at least one container")
    container: dict[str, Any] = {"name": names.SUBMITTER_CONTAINER}
    if containers[0].get("image"):
        container["image"] = containers[0]["image"]
    container["resources"] = {
        "limits": {"cpu": "1", "memory": "1Gi"},
        "requests": {"cpu": "500m", "memory": "200Mi"},
    }
    return container


def _configure(
    container: dict[str, Any],
    rayjob: v1.RayJob,
    cluster: v1.RayCluster,
    *,
    address: str,
    status_check: bool,
    login_shell: bool,
    always: bool,
) -> None:
    """KubeRay's ``configureSubmitterContainer``, in place."""
    cmd, args = command(rayjob, address=address, status_check=status_check, login_shell=login_shell)
    if always or not container.get("command"):
        container["command"] = cmd
        container["args"] = args
    env = raycluster.env_of(container)
    env.append(raycluster.env_value("PYTHONUNBUFFERED", "1"))
    env.append(raycluster.env_value("RAY_DASHBOARD_ADDRESS", rayjob.status.dashboard_url or ""))
    env.append(raycluster.env_value("RAY_JOB_SUBMISSION_ID", rayjob.status.job_id or ""))
    if raycluster.token_enabled(cluster.spec):
        raycluster.configure_token(cluster, container)


def sidecar_container(
    rayjob: v1.RayJob, cluster: v1.RayCluster, *, restart: bool, login_shell: bool = False
) -> dict[str, Any]:
    """The ``SidecarMode`` submitter, appended to the head pod of ``cluster`` (the RayCluster
    being built: its image, its token Secret). ``restart``: the ``SidecarSubmitterRestart``
    gate (``restartPolicy: OnFailure`` and the status check)."""
    if rayjob.spec.ray_cluster_spec is None:
        raise ValueError("SidecarMode needs spec.rayClusterSpec")
    container = default_container(cluster)
    _configure(
        container,
        rayjob,
        cluster,
        address=sidecar_address(rayjob.spec.ray_cluster_spec),
        status_check=restart,
        login_shell=login_shell,
        always=True,
    )
    if restart:
        container["restartPolicy"] = "OnFailure"
    return container


def _labels(rayjob: v1.RayJob) -> dict[str, str]:
    return {
        names.ORIGINATED_FROM_NAME_LABEL: names.name_of(rayjob),
        names.ORIGINATED_FROM_CRD_LABEL: names.CRD,
        names.CREATED_BY_LABEL: names.CREATED_BY,
    }


def job(
    rayjob: v1.RayJob,
    cluster: v1.RayCluster,
    *,
    login_shell: bool,
    owner: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The ``K8sJobMode`` submitter Job (``batch/v1``) for the attempt in ``rayjob.status``
    (``jobId``, ``dashboardURL``) on ``cluster`` (the one in use: with ``clusterSelector``
    the existing one, whose image and token the submitter takes). ``owner``: its controller
    reference (default: to ``rayjob``). :class:`ValueError` when the pod template has no
    container or the script cannot be built."""
    if rayjob.spec.submitter_pod_template is not None:
        template = copy.deepcopy(dict(rayjob.spec.submitter_pod_template))
    else:
        template = {"spec": {"containers": [default_container(cluster)], "restartPolicy": "Never"}}
    pod = template.get("spec")
    containers = pod.get("containers") if isinstance(pod, dict) else None
    if not isinstance(pod, dict) or not isinstance(containers, list) or not containers:
        raise ValueError("spec.submitterPodTemplate.spec should have at least one container")
    if not isinstance(containers[0], dict):
        raise ValueError("spec.submitterPodTemplate.spec.containers[0] must be an object")
    _configure(
        containers[0],
        rayjob,
        cluster,
        address=k8s_job_address(rayjob),
        status_check=True,
        login_shell=login_shell,
        always=False,
    )
    if raycluster.k8s_token_enabled(cluster.spec):
        volumes = pod.get("volumes")
        if not isinstance(volumes, list):
            volumes = pod["volumes"] = []
        if not raycluster.has_named(volumes, raycluster.TOKEN_VOLUME):
            projected = {"sources": [{"serviceAccountToken": {"path": "token"}}]}
            volumes.append({"name": raycluster.TOKEN_VOLUME, "projected": projected})
    metadata = template.get("metadata")
    if not isinstance(metadata, dict):
        metadata = template["metadata"] = {}
    metadata["labels"] = {**(metadata.get("labels") or {}), **_labels(rayjob)}
    config = rayjob.spec.submitter_config
    backoff = DEFAULT_SUBMITTER_BACKOFF_LIMIT
    if config is not None and config.backoff_limit is not None:
        backoff = config.backoff_limit
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": names.submitter_job_name(rayjob),
            "namespace": names.namespace_of(rayjob),
            "labels": _labels(rayjob),
            "ownerReferences": [dict(owner or names.owner_reference(rayjob))],
        },
        "spec": {"backoffLimit": backoff, "template": template},
    }
