"""What makes a RayService impossible, in plain words naming the field and the value.

:func:`problems` lists every reason (empty when the RayService is valid): KubeRay
v1.5.0's ``ValidateRayServiceMetadata`` and ``ValidateRayServiceSpec`` (all of
them, not only the first), the RayCluster rules of
:func:`controllers.raycluster.validation.problems` applied to ``spec.rayClusterConfig``,
and checks of the Serve config that would otherwise only fail later, at the PUT
to Ray Serve or on every reconcile:

- ``metadata.name``: at most :data:`MAX_NAME_LENGTH` (47) characters, so that
  ``<name>-<5 characters>`` fits a RayCluster name (53), and a DNS-1035 label;
- annotation :data:`INITIALIZING_TIMEOUT_ANNOTATION`, when set and not empty: a
  positive Go duration (``"30m"``, ``"1h30m"``, ``"90s"``, ``"1.5h"``) or a positive
  number of seconds (``"600"``), at most 64 characters; :func:`initializing_timeout`
  reads it;
- ``spec.rayClusterConfig``: present, a valid RayCluster spec (the API schema
  and the RayCluster controller's rules), no
  ``headGroupSpec.headService.metadata.name`` (a RayService's head service is
  always ``<name>-head-svc``), and a serve port: when the head container lists
  ports, one must be named ``serve`` (or ``spec.serveService`` must have one),
  else KubeRay refuses to build the serve service;
- ``spec.rayClusterConfig.authOptions.enableK8sTokenAuth``: not true (KubeRay v1.7.0
  supports Kubernetes token authentication only for a standalone RayCluster);
- ``spec.upgradeStrategy.type``: ``NewCluster``, ``NewClusterWithIncrementalUpgrade``
  or ``None`` (or unset). With ``NewClusterWithIncrementalUpgrade`` and the
  ``RayServiceIncrementalUpgrade`` gate on (``incremental``, KubeRay v1.7.0's default),
  KubeRay's ``ValidateClusterUpgradeOptions``: ``rayClusterConfig.enableInTreeAutoscaling``
  true (the new cluster starts without workers and scales with Serve's
  ``target_capacity``), ``clusterUpgradeOptions`` present, ``maxSurgePercent`` and
  ``stepSizePercent`` within 1..100 (KubeRay accepts 0, which never moves anything: an
  upgrade that waits forever, refused here), ``stepSizePercent <= maxSurgePercent``,
  ``intervalSeconds > 0``, a ``gatewayClassName``. With the gate off the options are
  not checked (the strategy then behaves as ``None``, KubeRay's rule);
- ``spec.rayClusterDeletionDelaySeconds``: an integer >= 0;
- ``spec.serveService``: a Service template within the allow-list of
  :func:`controllers.raycluster.validation.service_template_problems` (no ``ExternalName``,
  ``externalIPs``, ...), its ``metadata.name``, when set, a DNS-1035 label;
- ``spec.serveConfigV2``, when set (:func:`serve_config` parses it): YAML
  (:func:`controllers.ray.serveconfig.serve_config`), with ``applications`` a
  non-empty list of mappings. Each application: ``name`` a non-empty string,
  unique (absent means ``"default"``, as Ray Serve defaults it); ``import_path``
  a string in Ray's format (``module.attr`` or ``module:attr``: at most one
  colon, not at either end; without a colon at least one dot, not at either end);
  ``route_prefix``, when not null, a string starting with ``/``, not ending with
  ``/`` (except ``/`` itself), without ``{`` or ``}``, unique among the
  applications (absent means ``"/"``, as Ray Serve defaults it; ``null`` means no
  HTTP route). These are Ray Serve's own rules (``ServeDeploySchema``), checked here
  so the message names the field instead of arriving as an HTTP 400.

**The GatewayClass** is not one of :func:`problems`' rules: the spec is valid, whether the
operator may create a Gateway of that class is its policy
(:class:`controllers.rayservice.gateway.GatewayClasses`, ``--gateway-classes``), reported
by the reconciler with its own reason (``GatewayClassNotAllowed``).
:func:`requested_gateway_class` says which class a RayService asks a Gateway of (only an
incremental upgrade with the gate on does), and :func:`gateway_class_problems` the refusal
the validating webhook adds to KubeRay's rules when it knows the allow-list.

**No serveConfigV2** (absent or blank) is valid, as in KubeRay (which then PUTs an
empty config): the cluster is created, nothing is deployed, and
:func:`serve_config` returns ``None``. Such a RayService can never be ``Ready``
(that needs at least one application), which is what its status says.

>>> timeout = {INITIALIZING_TIMEOUT_ANNOTATION: "1h30m"}
>>> service = {"metadata": {"name": "svc", "annotations": timeout},
...            "spec": {"rayClusterConfig": {"headGroupSpec": {"template": {"spec": {
...                "containers": [{"name": "ray-head", "image": "rayproject/ray"}]}}}},
...                     "serveConfigV2": "applications:\\n- name: a\\n  import_path: m.a\\n"}}
>>> problems(service), initializing_timeout(service)
([], 5400.0)
>>> serve_config(service)
{'applications': [{'name': 'a', 'import_path': 'm.a'}]}
>>> service["spec"]["serveConfigV2"] = "applications:\\n- name: a\\n  route_prefix: api\\n"
>>> for problem in problems(service):
...     print(problem)
spec.serveConfigV2: applications[0].import_path is required (such as 'module.application')
spec.serveConfigV2: applications[0].route_prefix 'api' must start with '/'
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

import pydantic

from api import v1
from controllers import goduration
from controllers.ray import serveconfig
from controllers.raycluster import interface as raycluster
from controllers.rayservice import gateway

__all__ = [
    "INITIALIZING_TIMEOUT_ANNOTATION",
    "MAX_NAME_LENGTH",
    "SUPPORTED_UPGRADE_TYPES",
    "Validated",
    "admission_problems",
    "gateway_class_problems",
    "initializing_timeout",
    "problems",
    "requested_gateway_class",
    "serve_config",
    "validate",
]

Obj = dict[str, Any]

MAX_NAME_LENGTH = raycluster.MAX_CLUSTER_NAME_LENGTH - 6
"""47: a RayService's clusters are named ``<name>-<5 characters>`` (at most 53)."""
INITIALIZING_TIMEOUT_ANNOTATION = "ray.io/initializing-timeout"
"""How long a RayService may stay initializing before it is marked failed (KubeRay's key)."""
SUPPORTED_UPGRADE_TYPES = ("NewClusterWithIncrementalUpgrade", "NewCluster", "None")
"""The ``spec.upgradeStrategy.type`` values this operator implements."""
_INCREMENTAL = "NewClusterWithIncrementalUpgrade"
_DEFAULT_APP_NAME = "default"
_DEFAULT_ROUTE_PREFIX = "/"
_PLACEHOLDER_SERVICE = "rayservice"

_DNS1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_DNS1035_MAX = 63


# --- the annotation -----------------------------------------------------------------------------

_INTEGER = re.compile(r"[+-]?[0-9]+")
_MAX_TIMEOUT_LENGTH = 64
"""Longest annotation value read (a user string: bounded before it is parsed)."""


def _timeout(value: str) -> tuple[float | None, str | None]:
    """(seconds, None) or (None, problem) for an annotation value."""
    where = f"annotation {INITIALIZING_TIMEOUT_ANNOTATION}"
    if len(value) > _MAX_TIMEOUT_LENGTH:
        return None, f"{where} has {len(value)} characters; at most {_MAX_TIMEOUT_LENGTH}"
    duration = goduration.parse(value)
    if duration is not None:
        if duration <= 0:
            return None, f"{where} must be a positive duration, got {value!r}"
        return float(duration), None
    if _INTEGER.fullmatch(value) and abs(int(value)) < 2**63:
        seconds = int(value)
        if seconds <= 0:
            return None, f"{where} must be a positive number of seconds, got {value!r}"
        return float(seconds), None
    return None, (
        f"{where} has an invalid value {value!r}: expected a Go duration such as '30m', "
        "'1h30m' or '90s', or a positive number of seconds such as '600'"
    )


def _annotations(service: Mapping[str, Any]) -> Mapping[str, Any]:
    annotations = (service.get("metadata") or {}).get("annotations")
    return annotations if isinstance(annotations, Mapping) else {}


def initializing_timeout(service: Mapping[str, Any]) -> float | None:
    """Seconds of the :data:`INITIALIZING_TIMEOUT_ANNOTATION`; None when it is absent or empty.

    Both of KubeRay's forms: a Go duration or integer seconds. :class:`ValueError`
    (with :func:`problems`' message) when it is set but not a positive value.

    >>> initializing_timeout({"metadata": {"annotations": {INITIALIZING_TIMEOUT_ANNOTATION: "90"}}})
    90.0
    >>> initializing_timeout({"metadata": {}}) is None
    True
    """
    value = _annotations(service).get(INITIALIZING_TIMEOUT_ANNOTATION)
    if value is None or value == "":
        return None
    seconds, problem = _timeout(str(value))
    if problem is not None:
        raise ValueError(problem)
    return seconds


# --- the Serve config ---------------------------------------------------------------------------

_SERVE = "spec.serveConfigV2"


def _import_path_problem(where: str, path: str) -> str | None:
    """Ray Serve's import path format, in our words."""
    if ":" in path:
        if path.count(":") > 1:
            return f"{where} {path!r} may have at most one ':'"
        if path.startswith(":") or path.endswith(":"):
            return f"{where} {path!r} may not start or end with ':'"
        return None
    if "." not in path:
        return (
            f"{where} {path!r} must name a module and an attribute, separated by a '.' or a "
            "':' (such as 'module.application')"
        )
    if path.startswith(".") or path.endswith("."):
        return f"{where} {path!r} may not start or end with '.'"
    return None


def _route_problem(where: str, route: str) -> str | None:
    if not route.startswith("/"):
        return f"{where} {route!r} must start with '/'"
    if len(route) > 1 and route.endswith("/"):
        return f"{where} {route!r} must not end with '/' (only the root route '/' may)"
    if "{" in route or "}" in route:
        return f"{where} {route!r} must not contain '{{' or '}}' (no wildcards)"
    return None


def _application_problems(applications: list[Any]) -> list[str]:
    found: list[str] = []
    names_at: dict[str, list[int]] = {}
    routes_at: dict[str, list[int]] = {}
    for index, app in enumerate(applications):
        at = f"applications[{index}]"
        if not isinstance(app, Mapping):
            found.append(f"{at} must be a mapping (name, import_path, ...), got {app!r:.60}")
            continue
        name = app.get("name", _DEFAULT_APP_NAME)
        if not isinstance(name, str) or not name:
            found.append(f"{at}.name must be a non-empty string, got {name!r:.60}")
        else:
            names_at.setdefault(name, []).append(index)
        if "import_path" not in app or app["import_path"] is None:
            found.append(f"{at}.import_path is required (such as 'module.application')")
        elif not isinstance(app["import_path"], str):
            found.append(f"{at}.import_path must be a string, got {app['import_path']!r:.60}")
        else:
            problem = _import_path_problem(f"{at}.import_path", app["import_path"])
            if problem:
                found.append(problem)
        route = app.get("route_prefix", _DEFAULT_ROUTE_PREFIX)
        if route is None:
            continue
        if not isinstance(route, str):
            found.append(f"{at}.route_prefix must be a string or null, got {route!r:.60}")
            continue
        problem = _route_problem(f"{at}.route_prefix", route)
        if problem:
            found.append(problem)
        routes_at.setdefault(route, []).append(index)
    for name, where in names_at.items():
        if len(where) > 1:
            listed = ", ".join(f"applications[{i}]" for i in where)
            found.append(f"application name {name!r} is used more than once ({listed})")
    for route, where in routes_at.items():
        if len(where) > 1:
            listed = ", ".join(f"applications[{i}]" for i in where)
            found.append(
                f"route_prefix {route!r} is used by more than one application ({listed}); "
                "an absent route_prefix means '/'"
            )
    return found


def _serve(service: Mapping[str, Any]) -> tuple[dict[str, Any] | None, list[str]]:
    """The parsed Serve config (None when absent) and its problems."""
    text = (service.get("spec") or {}).get("serveConfigV2")
    if text is None:
        return None, []
    if not isinstance(text, str):
        return None, [f"{_SERVE} must be a string holding YAML, got {type(text).__name__}"]
    if not text.strip():
        return None, []
    try:
        config = serveconfig.serve_config(text)
    except serveconfig.ServeConfigError as exc:
        return None, [f"spec.{exc}"]
    applications = config.get("applications")
    if "applications" not in config:
        return config, [f"{_SERVE}: 'applications' is required (a list of Serve applications)"]
    if not isinstance(applications, list) or not applications:
        return config, [
            f"{_SERVE}: 'applications' must be a non-empty list of Serve applications, "
            f"got {applications!r:.60}"
        ]
    return config, [f"{_SERVE}: {p}" for p in _application_problems(applications)]


def serve_config(service: Mapping[str, Any]) -> dict[str, Any] | None:
    """The parsed ``spec.serveConfigV2`` (the JSON body to PUT); None when absent or blank.

    :class:`ValueError` when it is invalid, its message the :func:`problems` entries
    for it (joined by ``"; "`` when there are several).
    """
    config, found = _serve(service)
    if found:
        raise ValueError("; ".join(found))
    return config


# --- the RayService -----------------------------------------------------------------------------


def _name_problems(name: Any) -> list[str]:
    if not isinstance(name, str):
        return [f"metadata.name must be a string, got {name!r}"]
    found = []
    if len(name) > MAX_NAME_LENGTH:
        found.append(
            f"metadata.name {name!r} has {len(name)} characters; a RayService name must have "
            f"at most {MAX_NAME_LENGTH} (its RayClusters are named <name>-<5 characters>, "
            f"at most {raycluster.MAX_CLUSTER_NAME_LENGTH})"
        )
    if not _DNS1035.fullmatch(name):
        found.append(
            f"metadata.name {name!r} is not a valid DNS-1035 label (lower-case letters, digits "
            "and '-', starting with a letter and ending with a letter or digit)"
        )
    return found


def _head_container(config: Mapping[str, Any]) -> Mapping[str, Any] | None:
    template = (config.get("headGroupSpec") or {}).get("template") or {}
    spec = template.get("spec") if isinstance(template, Mapping) else None
    containers = spec.get("containers") if isinstance(spec, Mapping) else None
    if isinstance(containers, list) and containers and isinstance(containers[0], Mapping):
        return containers[0]
    return None


def _serve_port_problems(spec: Mapping[str, Any], config: Mapping[str, Any]) -> list[str]:
    head = _head_container(config)
    ports = head.get("ports") if head is not None else None
    if not ports or raycluster.has_serve_port(ports):
        return []  # no ports: KubeRay's defaults, which include serve 8000
    template = spec.get("serveService")
    if isinstance(template, Mapping):
        if raycluster.has_serve_port((template.get("spec") or {}).get("ports")):
            return []
        return [
            "spec.rayClusterConfig.headGroupSpec.template: the head container lists ports but "
            "none named 'serve', and spec.serveService has no port named 'serve' either: the "
            "serve service would have no port"
        ]
    return [
        "spec.rayClusterConfig.headGroupSpec.template: the head container lists ports but none "
        "named 'serve'; name the Serve port 'serve' (usually containerPort 8000), or the serve "
        "service cannot be built"
    ]


def _cluster_problems(service: Mapping[str, Any], name_ok: bool) -> list[str]:
    spec = service.get("spec") or {}
    config = spec.get("rayClusterConfig")
    if config is None:
        return ["spec.rayClusterConfig is required"]
    if not isinstance(config, Mapping):
        return [f"spec.rayClusterConfig must be a RayCluster spec, got {type(config).__name__}"]
    service_name = (service.get("metadata") or {}).get("name") if name_ok else None
    cluster_obj = {
        "metadata": {
            "name": f"{service_name or _PLACEHOLDER_SERVICE}-xxxxx",
            "annotations": dict(_annotations(service)),
        },
        "spec": config,
    }
    try:
        cluster = v1.RayCluster.model_validate(cluster_obj)
    except pydantic.ValidationError as exc:
        return v1.meta.error_messages(exc, root="spec.rayClusterConfig", under="spec")
    found = []
    if cluster.spec.auth_options is not None and cluster.spec.auth_options.enable_k8s_token_auth:
        found.append(
            "spec.rayClusterConfig.authOptions.enableK8sTokenAuth is not supported for a "
            "RayService (as in KubeRay): use mode 'token' with the generated or a named Secret"
        )
    found += [f"spec.rayClusterConfig: {p}" for p in raycluster.problems(cluster)]
    head_service = cluster.spec.head_group_spec.head_service or {}
    custom = (head_service.get("metadata") or {}).get("name")
    if custom:
        found.append(
            "spec.rayClusterConfig.headGroupSpec.headService.metadata.name must not be set "
            f"(it is {custom!r}): a RayService's head service is always <name>-head-svc"
        )
    return found + _serve_port_problems(spec, config)


def _spec_problems(spec: Mapping[str, Any], incremental: bool) -> list[str]:
    found = []
    strategy = spec.get("upgradeStrategy")
    kind = strategy.get("type") if isinstance(strategy, Mapping) else None
    if kind is not None and kind not in SUPPORTED_UPGRADE_TYPES:
        found.append(
            f"spec.upgradeStrategy.type {kind!r} is invalid; valid values are "
            f"{', '.join(repr(t) for t in SUPPORTED_UPGRADE_TYPES)}"
        )
    if kind == _INCREMENTAL and incremental and isinstance(strategy, Mapping):
        found += _incremental_problems(spec, strategy.get("clusterUpgradeOptions"))
    delay = spec.get("rayClusterDeletionDelaySeconds")
    if delay is not None and (isinstance(delay, bool) or not isinstance(delay, int) or delay < 0):
        found.append(
            f"spec.rayClusterDeletionDelaySeconds must be a non-negative integer, got {delay!r}"
        )
    template = spec.get("serveService")
    if template is not None:
        custom = (
            (template.get("metadata") or {}).get("name") if isinstance(template, Mapping) else None
        )
        found += raycluster.service_template_problems("spec.serveService", template)
        if (
            isinstance(template, Mapping)
            and custom is not None
            and (
                not isinstance(custom, str)
                or len(custom) > _DNS1035_MAX
                or not _DNS1035.fullmatch(custom)
            )
        ):
            found.append(
                f"spec.serveService.metadata.name {custom!r} is not a valid Service name "
                "(a DNS-1035 label: at most 63 lower-case letters, digits and '-', starting "
                "with a letter)"
            )
    return found


_OPTIONS = "spec.upgradeStrategy.clusterUpgradeOptions"


def _percent(
    options: Mapping[str, Any], key: str, default: int | None
) -> tuple[int | None, str | None]:
    value = options.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 100:
        return None, f"{_OPTIONS}.{key} must be between 1 and 100, got {value!r}"
    return value, None


def _incremental_problems(spec: Mapping[str, Any], options: Any) -> list[str]:
    """KubeRay v1.7.0's ``ValidateClusterUpgradeOptions``, naming the fields (and 0 refused)."""
    found = []
    config = spec.get("rayClusterConfig")
    if isinstance(config, Mapping) and config.get("enableInTreeAutoscaling") is not True:
        found.append(
            f"spec.upgradeStrategy.type {_INCREMENTAL!r} needs the Ray autoscaler: set "
            "spec.rayClusterConfig.enableInTreeAutoscaling to true (the new cluster starts "
            "without workers and grows with Serve's target_capacity)"
        )
    if not isinstance(options, Mapping):
        found.append(f"{_OPTIONS} is required for {_INCREMENTAL!r}")
        return found
    surge, problem = _percent(options, "maxSurgePercent", 100)
    found += [problem] if problem else []
    step, problem = _percent(options, "stepSizePercent", None)
    found += [problem] if problem else []
    if surge is not None and step is not None and step > surge:
        found.append(
            f"{_OPTIONS}.stepSizePercent ({step}) must be less than or equal to "
            f"maxSurgePercent ({surge})"
        )
    interval = options.get("intervalSeconds")
    if isinstance(interval, bool) or not isinstance(interval, int) or interval <= 0:
        found.append(f"{_OPTIONS}.intervalSeconds must be greater than 0, got {interval!r}")
    gateway_class = options.get("gatewayClassName")
    if not isinstance(gateway_class, str) or not gateway_class:
        found.append(f"{_OPTIONS}.gatewayClassName is required for {_INCREMENTAL!r}")
    return found


@dataclasses.dataclass(frozen=True, kw_only=True)
class Validated:
    """A RayService read once: why it cannot run, or its typed spec and what it asks for."""

    problems: tuple[str, ...] = ()
    """Every reason it cannot be run (see the module docstring); empty when it can."""
    spec: v1.RayServiceSpec | None = None
    """The typed spec (unknown fields kept, as the API keeps them); None with problems."""
    serve_config: dict[str, Any] | None = None
    """The parsed ``serveConfigV2`` (the body to PUT); None when absent, blank or invalid."""
    initializing_timeout: float | None = None
    """Seconds of :data:`INITIALIZING_TIMEOUT_ANNOTATION`; None when absent or invalid."""


def validate(service: Mapping[str, Any], *, incremental: bool = True) -> Validated:
    """``service`` checked once (see the module docstring): its problems, or its typed
    spec, its Serve config and its initializing timeout. ``incremental``: the
    ``RayServiceIncrementalUpgrade`` gate (default on, as KubeRay v1.7.0's).

    >>> validate({"metadata": {"name": "Bad"}, "spec": {}}).problems[0]
    "metadata.name 'Bad' is not a valid DNS-1035 label (lower-case letters, digits and '-', \
starting with a letter and ending with a letter or digit)"
    """
    meta = service.get("metadata") or {}
    found = _name_problems(meta.get("name"))
    name_ok = not found
    value = _annotations(service).get(INITIALIZING_TIMEOUT_ANNOTATION)
    timeout = None
    if value is not None and value != "":
        timeout, problem = _timeout(str(value))
        if problem is not None:
            found.append(problem)
    spec = service.get("spec") or {}
    found += _cluster_problems(service, name_ok)
    found += _spec_problems(spec, incremental)
    config, serve_problems = _serve(service)
    found += serve_problems
    if found:
        return Validated(problems=tuple(found))
    try:
        typed = v1.RayServiceSpec.model_validate(spec)
    except pydantic.ValidationError as exc:
        return Validated(problems=tuple(v1.meta.error_messages(exc, root="spec")))
    return Validated(spec=typed, serve_config=config, initializing_timeout=timeout)


def admission_problems(service: Mapping[str, Any]) -> list[str]:
    """What KubeRay v1.7.0's RayService admission webhook refuses: the name and the
    :data:`INITIALIZING_TIMEOUT_ANNOTATION` (the rules of :func:`problems` for these two).
    The webhook checks only these; the rest is :func:`problems`' at reconcile.

    >>> admission_problems({"metadata": {"name": "s", "annotations": {
    ...     INITIALIZING_TIMEOUT_ANNOTATION: "-1"}}})
    ["annotation ray.io/initializing-timeout must be a positive number of seconds, got '-1'"]
    """
    found = _name_problems((service.get("metadata") or {}).get("name"))
    value = _annotations(service).get(INITIALIZING_TIMEOUT_ANNOTATION)
    if value is not None and value != "":
        _, problem = _timeout(str(value))
        if problem is not None:
            found.append(problem)
    return found


def requested_gateway_class(service: Mapping[str, Any], *, incremental: bool = True) -> str | None:
    """The GatewayClass ``service`` asks a Gateway of: its
    ``clusterUpgradeOptions.gatewayClassName`` when ``upgradeStrategy.type`` is
    ``NewClusterWithIncrementalUpgrade`` and the gate (``incremental``) is on; None
    otherwise, and when the class is not a non-empty string (:func:`problems` says so).

    >>> requested_gateway_class({"spec": {"upgradeStrategy": {
    ...     "type": "NewClusterWithIncrementalUpgrade",
    ...     "clusterUpgradeOptions": {"gatewayClassName": "istio"}}}})
    'istio'
    """
    strategy = (service.get("spec") or {}).get("upgradeStrategy")
    if not incremental or not isinstance(strategy, Mapping) or strategy.get("type") != _INCREMENTAL:
        return None
    options = strategy.get("clusterUpgradeOptions")
    name = options.get("gatewayClassName") if isinstance(options, Mapping) else None
    return name if isinstance(name, str) and name else None


def gateway_class_problems(
    service: Mapping[str, Any], allowed: gateway.GatewayClasses, *, incremental: bool = True
) -> list[str]:
    """The refusal of a Gateway of the class ``service`` asks for when ``allowed`` does not
    list it (:meth:`~controllers.rayservice.gateway.GatewayClasses.refusal`); empty when it
    asks for none or for an allowed one."""
    name = requested_gateway_class(service, incremental=incremental)
    refusal = allowed.refusal(name) if name is not None else None
    return [refusal] if refusal is not None else []


def problems(service: Mapping[str, Any], *, incremental: bool = True) -> list[str]:
    """Every reason ``service`` cannot be run (see the module docstring); empty when it can."""
    return list(validate(service, incremental=incremental).problems)
