"""Ray token authentication (``spec.authOptions``), as KubeRay v1.7.0 sets it up.

Ray (2.52.0 and later) refuses requests to its dashboard, GCS and the other Ray APIs
without the cluster's token once its processes run with ``RAY_AUTH_MODE=token``; they
read the token from ``RAY_AUTH_TOKEN``. Everything here is pure (the random token
aside):

- **on** (:func:`token_enabled`) only with ``mode: token``; ``disabled`` or no mode
  leaves the pods as they are;
- **the Secret** (:func:`generated_secret`): ``<cluster>`` (through
  :func:`~controllers.raycluster.names.clip`, KubeRay's ``CheckName``), labelled
  ``ray.io/cluster=<cluster>``, holding a random token (32 random bytes, base64) under
  :data:`TOKEN_KEY`; the reconciler creates it before the pods and never rewrites it.
  None when ``authOptions`` is absent, its mode is ``disabled``, ``secretName`` names
  the user's own Secret, or Kubernetes token auth is on. As in KubeRay, ``authOptions``
  **without a mode** still gets the Secret (its pods get no auth settings: the mode
  decides those);
- **the pods** (:func:`configure_pod`, with token auth on): the Ray container, the
  ``wait-gcs-ready`` init containers and the autoscaler sidecar
  (:func:`configure_container`) get ``RAY_AUTH_MODE=token`` and ``RAY_AUTH_TOKEN`` from
  :func:`secret_name` (``secretName``, else ``<cluster>``), key :data:`TOKEN_KEY`; each
  variable only where the container does not set it already. With
  ``enableK8sTokenAuth`` they get ``RAY_ENABLE_K8S_TOKEN_AUTH=true`` and a read-only
  mount of the projected ServiceAccount token volume :data:`TOKEN_VOLUME` at
  :data:`TOKEN_MOUNT_PATH` instead of ``RAY_AUTH_TOKEN``;
- **the rules** (:func:`problems`): token mode needs ``rayVersion`` set, parseable and
  at least 2.52.0 (:func:`parse_version`: Kubernetes' "generic" version rules, as
  KubeRay parses it); Kubernetes token auth needs 2.55.0, no ``secretName``, and
  ``mode: token``. A RayService refuses Kubernetes token auth altogether
  (:mod:`controllers.rayservice.validation`).

>>> cluster = v1.RayCluster.model_validate({"metadata": {"name": "demo"}, "spec": {
...     "rayVersion": "2.60.0", "authOptions": {"mode": "token"},
...     "headGroupSpec": {"template": {}}}})
>>> secret_name(cluster), problems(cluster.spec)
('demo', [])
>>> container = {"name": "ray-head"}
>>> configure_container(cluster, container)
>>> [e["name"] for e in container["env"]], container["env"][1]["valueFrom"]
(['RAY_AUTH_MODE', 'RAY_AUTH_TOKEN'], {'secretKeyRef': {'name': 'demo', 'key': 'auth_token'}})
>>> generated_secret(cluster)["metadata"]
{'name': 'demo', 'namespace': 'default', 'labels': {'ray.io/cluster': 'demo'}}
>>> problems(v1.RayCluster.model_validate({"spec": {"rayVersion": "2.46.0",
...     "authOptions": {"mode": "token"}, "headGroupSpec": {"template": {}}}}).spec)
["authOptions.mode 'token' needs Ray 2.52.0 or later; rayVersion is '2.46.0'"]
"""

from __future__ import annotations

import base64
import re
import secrets
from typing import Any

from api import v1
from controllers.raycluster import containerenv, names
from runtime.client import resources

__all__ = [
    "AUTH_MODE_ENV",
    "AUTH_TOKEN_ENV",
    "K8S_TOKEN_AUTH_ENV",
    "MIN_RAY_VERSION",
    "MIN_RAY_VERSION_K8S",
    "SECRETS",
    "TOKEN_KEY",
    "TOKEN_MOUNT_PATH",
    "TOKEN_VOLUME",
    "configure_container",
    "configure_pod",
    "generated_secret",
    "k8s_enabled",
    "parse_version",
    "problems",
    "secret_name",
    "token_enabled",
]

SECRETS = resources.default_registry.for_kind("v1", "Secret")
"""Secrets, as the client and the cache name them."""

AUTH_MODE_ENV = "RAY_AUTH_MODE"
AUTH_TOKEN_ENV = "RAY_AUTH_TOKEN"
K8S_TOKEN_AUTH_ENV = "RAY_ENABLE_K8S_TOKEN_AUTH"
TOKEN_KEY = "auth_token"
"""The key of the token in its Secret."""
TOKEN_VOLUME = "ray-token"
"""The projected ServiceAccount token volume of Kubernetes token auth."""
TOKEN_MOUNT_PATH = "/var/run/secrets/ray.io/serviceaccount"
"""Where the containers mount :data:`TOKEN_VOLUME`."""
MIN_RAY_VERSION = (2, 52, 0)
"""The first Ray with token authentication."""
MIN_RAY_VERSION_K8S = (2, 55, 0)
"""The first Ray with Kubernetes token authentication."""

WAIT_GCS_READY = "wait-gcs-ready"
_TOKEN_BYTES = 32
_VERSION = re.compile(r"\s*v?([0-9]+(?:\.[0-9]+)*)(.*)")


def token_enabled(spec: v1.RayClusterSpec) -> bool:
    """Whether the cluster's pods run with token authentication (``mode: token``)."""
    return spec.auth_options is not None and spec.auth_options.mode == "token"


def k8s_enabled(spec: v1.RayClusterSpec) -> bool:
    """Whether ``authOptions.enableK8sTokenAuth`` is true."""
    return spec.auth_options is not None and bool(spec.auth_options.enable_k8s_token_auth)


def secret_name(cluster: v1.RayCluster) -> str:
    """The Secret the token is read from: ``secretName``, else the generated ``<cluster>``."""
    options = cluster.spec.auth_options
    if options is not None and options.secret_name:
        return options.secret_name
    return names.clip(names.name_of(cluster))


def generated_secret(cluster: v1.RayCluster) -> dict[str, Any] | None:
    """The token Secret the operator creates for ``cluster`` (a new random token on every
    call), or None when it makes none (see the module docstring)."""
    options = cluster.spec.auth_options
    if options is None or options.mode == "disabled" or options.secret_name:
        return None
    if options.enable_k8s_token_auth:
        return None
    token = base64.b64encode(secrets.token_bytes(_TOKEN_BYTES)).decode()
    name = names.name_of(cluster)
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": names.clip(name),
            "namespace": names.namespace_of(cluster),
            "labels": {names.CLUSTER_LABEL: name},
        },
        "data": {TOKEN_KEY: base64.b64encode(token.encode()).decode()},
    }


def configure_container(cluster: v1.RayCluster, container: dict[str, Any]) -> None:
    """Give ``container`` (in place) the auth env vars, and with Kubernetes token auth the
    token volume's mount; nothing it sets itself is replaced."""
    env = containerenv.of(container)
    if not containerenv.has(env, AUTH_MODE_ENV):
        env.append({"name": AUTH_MODE_ENV, "value": "token"})
    if k8s_enabled(cluster.spec):
        if not containerenv.has(env, K8S_TOKEN_AUTH_ENV):
            env.append({"name": K8S_TOKEN_AUTH_ENV, "value": "true"})
        mounts = container.get("volumeMounts")
        if not isinstance(mounts, list):
            mounts = container["volumeMounts"] = []
        if not containerenv.has(mounts, TOKEN_VOLUME):
            mounts.append({"name": TOKEN_VOLUME, "mountPath": TOKEN_MOUNT_PATH, "readOnly": True})
    elif not containerenv.has(env, AUTH_TOKEN_ENV):
        ref = {"name": secret_name(cluster), "key": TOKEN_KEY}
        env.append({"name": AUTH_TOKEN_ENV, "valueFrom": {"secretKeyRef": ref}})


def configure_pod(cluster: v1.RayCluster, pod_spec: dict[str, Any]) -> None:
    """With token auth on, set up a pod template's ``spec`` (in place): the Ray container
    (the first), the token volume with Kubernetes token auth, and every
    ``wait-gcs-ready`` init container. The autoscaler sidecar is configured where it is
    built, before ``autoscalerOptions`` are merged into it."""
    if not token_enabled(cluster.spec):
        return
    configure_container(cluster, pod_spec["containers"][0])
    if k8s_enabled(cluster.spec):
        volumes = pod_spec.get("volumes")
        if not isinstance(volumes, list):
            volumes = pod_spec["volumes"] = []
        if not containerenv.has(volumes, TOKEN_VOLUME):
            projected = {"sources": [{"serviceAccountToken": {"path": "token"}}]}
            volumes.append({"name": TOKEN_VOLUME, "projected": projected})
    for init in pod_spec.get("initContainers") or ():
        if isinstance(init, dict) and init.get("name") == WAIT_GCS_READY:
            configure_container(cluster, init)


def parse_version(text: str) -> tuple[int, ...] | None:
    """``rayVersion`` as numbers by Kubernetes' generic version rules (what KubeRay uses):
    an optional ``v``, at least two dot-separated numbers, the first without a leading
    zero; anything after the numbers is ignored. None when it does not parse.

    >>> parse_version("2.52.0"), parse_version("v2.60.0rc1"), parse_version("2.6")
    ((2, 52, 0), (2, 60, 0), (2, 6))
    >>> parse_version("2"), parse_version("latest"), parse_version("02.52.0")
    (None, None, None)
    """
    match = _VERSION.fullmatch(text)
    if match is None:
        return None
    parts = match.group(1).split(".")
    if len(parts) < 2 or (parts[0].startswith("0") and parts[0] != "0"):
        return None
    if any(len(p) > 20 for p in parts):  # past uint64: ParseUint refuses it
        return None
    return tuple(int(p) for p in parts)


def _at_least(version: tuple[int, ...], minimum: tuple[int, ...]) -> bool:
    width = max(len(version), len(minimum))
    return version + (0,) * (width - len(version)) >= minimum + (0,) * (width - len(minimum))


def _dotted(version: tuple[int, ...]) -> str:
    return ".".join(str(n) for n in version)


def problems(spec: v1.RayClusterSpec) -> list[str]:
    """Why ``authOptions`` cannot be set up as asked (see the module docstring)."""
    options = spec.auth_options
    if options is None:
        return []
    if not token_enabled(spec):
        if options.enable_k8s_token_auth:
            return ["authOptions.enableK8sTokenAuth needs authOptions.mode 'token'"]
        return []
    need = f"Ray {_dotted(MIN_RAY_VERSION)} or later"
    if not spec.ray_version:
        return [f"authOptions.mode 'token' needs rayVersion set ({need})"]
    version = parse_version(spec.ray_version)
    if version is None:
        return [f"authOptions.mode 'token': rayVersion {spec.ray_version!r} is not a version"]
    if not _at_least(version, MIN_RAY_VERSION):
        return [f"authOptions.mode 'token' needs {need}; rayVersion is {spec.ray_version!r}"]
    found = []
    if options.enable_k8s_token_auth:
        if not _at_least(version, MIN_RAY_VERSION_K8S):
            found.append(
                f"authOptions.enableK8sTokenAuth needs Ray {_dotted(MIN_RAY_VERSION_K8S)} or "
                f"later; rayVersion is {spec.ray_version!r}"
            )
        if options.secret_name:
            found.append(
                "authOptions.enableK8sTokenAuth and authOptions.secretName cannot both be set "
                "(Kubernetes token auth uses no shared token)"
            )
    return found
