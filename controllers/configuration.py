"""KubeRay v1.7.0's ``Configuration`` file (``--config``), read as KubeRay reads it.

The file is YAML (or JSON) with ``apiVersion: config.ray.io/v1alpha1`` and
``kind: Configuration``, the shape KubeRay's Helm chart writes into its ConfigMap
when ``configuration.enabled`` is set. Unlike KubeRay, a field it does not define
is an error naming the field (KubeRay ignores it silently, so a misspelt setting
would do nothing); so is a value of the wrong type, a missing or other
``apiVersion``/``kind``, and a file that cannot be read.

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

__all__ = ["API_VERSION", "KIND", "Configuration", "load", "parse"]

API_VERSION = "config.ray.io/v1alpha1"
KIND = "Configuration"


class Configuration(pydantic.BaseModel):
    """The fields of KubeRay v1.7.0's ``Configuration`` (camelCase in the file)."""

    model_config = pydantic.ConfigDict(
        alias_generator=alias_generators.to_camel,
        populate_by_name=True,
        extra="forbid",
        frozen=True,
    )

    api_version: Literal["config.ray.io/v1alpha1"]
    kind: Literal["Configuration"]
    metrics_addr: str = ":8080"
    probe_addr: str = ":8082"
    enable_leader_election: bool = True
    leader_election_namespace: str = ""
    reconcile_concurrency: int = pydantic.Field(1, ge=1, le=256)
    watch_namespace: str = ""
    """Comma-separated, as the flag."""
    log_file: str = ""
    log_file_encoder: Literal["json", "console", ""] = ""
    log_stdout_encoder: Literal["json", "console", ""] = ""
    batch_scheduler: str = ""
    enable_batch_scheduler: bool = False
    use_kubernetes_proxy: bool = False
    delete_ray_job_after_job_finishes: bool = False
    enable_metrics: bool = False
    qps: float = pydantic.Field(100.0, ge=0)
    burst: int = pydantic.Field(200, ge=1)
    head_sidecar_containers: list[dict[str, Any]] = pydantic.Field(default_factory=list)
    worker_sidecar_containers: list[dict[str, Any]] = pydantic.Field(default_factory=list)
    default_container_envs: list[dict[str, Any]] = pydantic.Field(default_factory=list)
    default_pod_annotations: dict[str, str] = pydantic.Field(default_factory=dict)
    default_pod_labels: dict[str, str] = pydantic.Field(default_factory=dict)

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
        raise ValueError(f"{where}: {first['msg']}") from None


def load(path: pathlib.Path) -> Configuration:
    """The Configuration in the file at ``path`` (see :func:`parse`)."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc.strerror or exc}") from None
    return parse(text)
