"""What another controller may know of a RayCluster: its kinds, names, labels, builders
and readiness, and nothing of how the RayCluster reconciler works.

The RayService and RayJob controllers reach the RayCluster side only through this module
(an import-linter contract in ``pyproject.toml`` forbids them every other module of
:mod:`controllers.raycluster`), so the RayCluster reconciler can change its insides
without a RayService or RayJob test noticing. Everything here is pure. The functions
whose names end in ``_of_model`` (and :func:`configure_token`, :func:`token_enabled`,
:func:`k8s_token_enabled`) take the typed :class:`api.v1.RayCluster` a builder of a
RayJob's cluster already holds; the others take the raw object.

>>> head_service_name("demo"), pod_selector("demo")
('demo-head-svc', 'ray.io/cluster=demo')
>>> svc = head_service({"metadata": {"name": "demo", "namespace": "ns"}, "spec": {
...     "headGroupSpec": {"template": {"spec": {"containers": [{"name": "ray-head"}]}}}}})
>>> svc["metadata"]["name"], svc["spec"]["selector"]["ray.io/node-type"]
('demo-head-svc', 'head')
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from api import v1
from controllers.raycluster import (
    auth,
    containerenv,
    names,
    pods,
    redis_cleanup,
    report,
    services,
    validation,
)

__all__ = [
    "AUTH_TOKEN_KEY",
    "CACHE_SELECTOR",
    "CLUSTER_LABEL",
    "CREATED_BY",
    "CREATED_BY_LABEL",
    "DEFAULT_NAMESPACE",
    "IDENTIFIER_LABEL",
    "JOBS",
    "JOB_CACHE_SELECTOR",
    "KUBERAY_VERSION",
    "MANAGED_BY",
    "MAX_CLUSTER_NAME_LENGTH",
    "NODE_TYPE_LABEL",
    "ORIGINATED_FROM_CRD_LABEL",
    "ORIGINATED_FROM_NAME_LABEL",
    "PODS",
    "SECRETS",
    "SERVE_LABEL",
    "SERVE_PORT_NAME",
    "SERVICES",
    "TOKEN_VOLUME",
    "auth_secret_name",
    "configure_token",
    "env_of",
    "env_value",
    "has_named",
    "has_serve_port",
    "head_service",
    "head_service_name",
    "head_service_name_of_model",
    "head_service_of_model",
    "identifier",
    "is_head",
    "is_running_and_ready",
    "k8s_token_enabled",
    "namespace_of_model",
    "pod_selector",
    "problems",
    "serve_ports",
    "service_template_problems",
    "token_enabled",
]

PODS = pods.PODS
CACHE_SELECTOR = pods.CACHE_SELECTOR
JOBS = redis_cleanup.JOBS
JOB_CACHE_SELECTOR = redis_cleanup.CACHE_SELECTOR
SERVICES = services.SERVICES
SECRETS = auth.SECRETS
AUTH_TOKEN_KEY = auth.TOKEN_KEY

CLUSTER_LABEL = names.CLUSTER_LABEL
NODE_TYPE_LABEL = names.NODE_TYPE_LABEL
IDENTIFIER_LABEL = names.IDENTIFIER_LABEL
SERVE_LABEL = names.SERVE_LABEL
SERVE_PORT_NAME = names.SERVE_PORT_NAME
ORIGINATED_FROM_NAME_LABEL = names.ORIGINATED_FROM_NAME_LABEL
ORIGINATED_FROM_CRD_LABEL = names.ORIGINATED_FROM_CRD_LABEL
CREATED_BY = names.CREATED_BY
CREATED_BY_LABEL = names.CREATED_BY_LABEL
DEFAULT_NAMESPACE = names.DEFAULT_NAMESPACE
TOKEN_VOLUME = auth.TOKEN_VOLUME
MANAGED_BY = names.MANAGED_BY
MAX_CLUSTER_NAME_LENGTH = names.MAX_CLUSTER_NAME_LENGTH
KUBERAY_VERSION = pods.KUBERAY_VERSION

head_service_name = names.head_service_name
head_service_name_of_model = names.head_service_name_for
namespace_of_model = names.namespace_of
head_service_of_model = services.head_service
token_enabled = auth.token_enabled
k8s_token_enabled = auth.k8s_enabled
configure_token = auth.configure_container
env_of = containerenv.of
env_value = containerenv.value
has_named = containerenv.has
has_serve_port = names.has_serve_port
identifier = names.identifier
problems = validation.problems
service_template_problems = validation.service_template_problems
is_head = pods.is_head
is_running_and_ready = report.is_running_and_ready


def pod_selector(cluster_name: str) -> str:
    """The label selector of every pod of the cluster ``cluster_name``."""
    return pods.selector(cluster_name)


def _model(cluster: Mapping[str, Any]) -> v1.RayCluster:
    """A raw RayCluster as the builders take it (``headServiceAnnotations`` dropped: a
    RayService's head service carries none)."""
    spec = dict(cluster.get("spec") or {})
    spec.pop("headServiceAnnotations", None)
    meta = cluster.get("metadata")
    return v1.RayCluster.model_validate(
        {"metadata": dict(meta) if isinstance(meta, Mapping) else {}, "spec": spec}
    )


def auth_secret_name(cluster: Mapping[str, Any]) -> str | None:
    """The Secret holding the raw ``cluster``'s Ray auth token (key :data:`AUTH_TOKEN_KEY`),
    or None when its dashboard takes no token (``authOptions.mode`` is not ``token``).

    >>> auth_secret_name({"metadata": {"name": "demo"}, "spec": {"authOptions": {
    ...     "mode": "token"}, "headGroupSpec": {"template": {}}}})
    'demo'
    """
    options = (cluster.get("spec") or {}).get("authOptions")
    if not isinstance(options, Mapping) or options.get("mode") != "token":
        return None  # the common case, without building the model on every poll
    model = _model(cluster)
    return auth.secret_name(model) if auth.token_enabled(model.spec) else None


def head_service(cluster: Mapping[str, Any], *, created_by: str = CREATED_BY) -> dict[str, Any]:
    """The head Service the RayCluster controller builds for the raw ``cluster``
    (``created_by``: the ``app.kubernetes.io/created-by`` value its pods carry)."""
    return services.head_service(_model(cluster), created_by=created_by)


def serve_ports(cluster: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The serve Service ports of the raw ``cluster`` (``[{name: serve, port}]``; 8000
    when the head container lists no ports), or ``[]`` when it has no ``serve`` port."""
    try:
        ports: list[dict[str, Any]] = services.serve_service(_model(cluster))["spec"]["ports"]
    except ValueError:
        return []
    return ports
