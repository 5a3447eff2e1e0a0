"""KubeRay v1.7.0's ``Configuration`` file (``--config``), read as KubeRay reads it.

The file is YAML (or JSON) with ``apiVersion: config.ray.io/v1alpha1`` and
``kind: Configuration``, the shape KubeRay's Helm chart writes into its ConfigMap
when ``configuration.enabled`` is set. Unlike KubeRay, a field it does not define
is an error naming the field (KubeRay ignores it silently, so a misspelt setting
would do nothing); so is a value of the wrong type, a missing or other
``apiVersion``/``kind``, and a file that cannot be read.

One field is ours, not KubeRay's: ``gatewayClasses``, the GatewayClasses an incremental
upgrade's Gateway may have (``--gateway-classes``,
:class:`controllers.rayservice.gateway.GatewayClasses`; each name checked as the flag's).
A KubeRay file does not set it, and then the flag stands: only when the file sets it does
it replace the flag (KubeRay's own fields replace theirs whether set or not).

Defaults are KubeRay's (``apis/config/v1alpha1/defaults.go``) and applied once,
here: metrics on ``:8080``, probes on ``:8082``, leader election on, one
reconcile worker, 100 requests per second with bursts of 200.

>>> c = parse("apiVersion: config.ray.io/v1alpha1\\nkind: Configuration\\nqps: 50\\n")
>>> c.qps, c.burst, c.enable_leader_election, c.probe_addr
(50.0, 200, True, ':8082')
>>> parse("apiVersion: config.ray.io/v1alpha1\\nkind: Configuration\\nqsp: 50\\n")
Traceback (most recent call last):
...
ValueError: qsp: not a field of KubeRay's Configuration
"""

from __future__ import annotations

import pathlib
from typing import Any, Literal

import pydantic
import yaml
from pydantic import alias_generators

from api.v1 import meta
from controllers.rayservice import gateway

__all__ = ["API_VERSION", "KIND", "Configuration", "load", "parse"]

API_VERSION = "config.ray.io/v1alpha1"
KIND = "Configuration"


class Configuration(pydantic.BaseModel):
    """The fields of KubeRay v1.7.0's ``Configuration`` (camelCase in the file), each
    with its description, and ours, ``gatewayClasses``."""

    model_config = pydantic.ConfigDict(
        alias_generator=alias_generators.to_camel,
        populate_by_name=True,
        extra="forbid",
        frozen=True,
        use_attribute_docstrings=True,  # the descriptions of the docs' reference table
    )

    api_version: Literal["config.ray.io/v1alpha1"]
    """The only version there is."""
    kind: Literal["Configuration"]
    """The only kind there is."""
    metrics_addr: str = ":8080"
    """host:port for ``/metrics``, ``0`` disables (replaces ``--metrics-bind-address``)."""
    probe_addr: str = ":8082"
    """host:port for ``/healthz`` and ``/readyz``, ``0`` disables (replaces
    ``--health-probe-bind-address``)."""
    enable_leader_election: bool = True
    """Run only while holding the leader Lease (replaces ``--leader-elect``)."""
    leader_election_namespace: str = ""
    """The Lease's namespace; empty: the pod's (replaces ``--leader-election-namespace``)."""
    reconcile_concurrency: int = pydantic.Field(1, ge=1, le=256)
    """Workers per controller, 1 to 256 (replaces ``--reconcile-concurrency``)."""
    watch_namespace: str = ""
    """The namespaces to watch, comma-separated as the flag; empty: all (replaces
    ``--namespace``)."""
    log_file: str = ""
    """Also log to this file; empty: no file (replaces ``--log-file-path``)."""
    log_file_encoder: Literal["json", "console", ""] = ""
    """Accepted and not used: as in KubeRay, the file's format is ``--log-file-encoder``'s."""
    log_stdout_encoder: Literal["json", "console", ""] = ""
    """Accepted and not used: as in KubeRay, the format is ``--log-format``'s."""
    batch_scheduler: str = ""
    """Not supported: any value is an error, as ``--batch-scheduler``'s."""
    enable_batch_scheduler: bool = False
    """Not supported: ``true`` is an error, as ``--enable-batch-scheduler``."""
    use_kubernetes_proxy: bool = False
    """``true``: reach Ray dashboards through the API server's proxy subresources (as
    ``--use-kubernetes-proxy``); ``false`` leaves ``--dashboard-address-mode`` alone."""
    delete_ray_job_after_job_finishes: bool = False
    """Accepted, no effect: this operator has no RayJob controller."""
    enable_metrics: bool = False
    """Also serve KubeRay's ``kuberay_*`` metrics (replaces ``--enable-metrics``)."""
    qps: float = pydantic.Field(100.0, ge=0)
    """Client-side requests per second to the API server, 0: no limit (replaces ``--qps``)."""
    burst: int = pydantic.Field(200, ge=1)
    """Client-side burst above ``qps`` (replaces ``--burst``)."""
    head_sidecar_containers: list[dict[str, Any]] = pydantic.Field(default_factory=list)
    """Containers appended to every Ray head pod."""
    worker_sidecar_containers: list[dict[str, Any]] = pydantic.Field(default_factory=list)
    """Containers appended to every Ray worker pod."""
    default_container_envs: list[dict[str, Any]] = pydantic.Field(default_factory=list)
    """Env vars added to the Ray container of every Ray pod, where it has none of that name."""
    default_pod_annotations: dict[str, str] = pydantic.Field(default_factory=dict)
    """Annotations added to every Ray pod, where its template has none of that key."""
    default_pod_labels: dict[str, str] = pydantic.Field(default_factory=dict)
    """Labels added to every Ray pod, where its template has none of that key."""
    gateway_classes: list[str] = pydantic.Field(default_factory=list)
    """(ours) The GatewayClasses a RayService's incremental upgrade may have its Gateway of
    (``["*"]``: every class, KubeRay's behaviour); when set, replaces ``--gateway-classes``.
    Not set, and no flag: no class."""

    @pydantic.field_validator("gateway_classes")
    @classmethod
    def _gateway_classes(cls, value: list[str]) -> list[str]:
        gateway.GatewayClasses.parse(value)  # a bad name is an error naming it
        return value

    def namespaces(self) -> list[str]:
        """``watchNamespace`` as a list (empty: all namespaces)."""
        return [n.strip() for n in self.watch_namespace.split(",") if n.strip()]


def parse(text: str) -> Configuration:
    """The Configuration in ``text``; ``ValueError`` naming the first problem."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ValueError(f"not YAML: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError(f"expected a Configuration object, got {type(data).__name__}")
    for key, want in (("apiVersion", API_VERSION), ("kind", KIND)):
        if data.get(key) != want:
            raise ValueError(f"{key} must be {want!r}, not {data.get(key)!r}")
    try:
        return Configuration.model_validate(data)
    except pydantic.ValidationError as exc:
        first = exc.errors()[0]
        where = meta.field_path(first["loc"])
        if first["type"] == "extra_forbidden":
            raise ValueError(f"{where}: not a field of KubeRay's Configuration") from None
        message = str(first["msg"]).removeprefix("Value error, ")
        raise ValueError(f"{where}: {message}") from None


def load(path: pathlib.Path) -> Configuration:
    """The Configuration in the file at ``path`` (see :func:`parse`)."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc.strerror or exc}") from None
    return parse(text)
