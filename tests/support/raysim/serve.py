"""The Ray Serve state of one simulated head: the REST subset and Ray 2.60's lifecycle, pure.

:class:`Head` is everything one head pod remembers. It never sleeps and never reads a
clock of its own: the time comes from the ``clock`` it is given (seconds; the
simulator passes ``time.time``, unit tests a counter), and statuses are worked out
when they are read, so a head costs a few small dicts and no task.

What it answers (as measured on Ray 2.60, /work/shared/notes/kuberay-facts.md):

- :meth:`Head.get_applications` - ``GET /api/serve/applications/``: before Serve has
  started (no PUT yet, after a DELETE, after a restart) the empty shape
  ``{"controller_info": {}, "proxies": {}, "applications": {}, "target_capacity": null}``;
  afterwards ``controller_info``, ``proxy_location``, ``http_options``, ``grpc_options``,
  ``proxies``, ``deploy_mode``, ``applications`` and ``target_capacity``. ``api_type``
  ``"imperative"`` lists nothing (every application here was deployed declaratively).
- :meth:`Head.put_applications` - ``PUT``: the config is checked first; a bad one
  (no ``applications`` list, an application without a string ``import_path``, two with
  one name or one route prefix) raises :class:`ConfigError`, whose text is the plain-text
  body of Ray's HTTP 400, and changes nothing. A good one starts Serve; each application
  that is new or whose config changed goes ``DEPLOYING`` (deployments ``UPDATING``);
  one that is unchanged keeps its status; applications left out are removed
  (``DELETING`` for ``delete_delay`` seconds, then gone; at once when it is 0).
- After ``deploy_delay`` seconds a ``DEPLOYING`` application becomes ``RUNNING``
  (deployments ``HEALTHY``), unless its import path cannot be imported (see
  :meth:`Behaviour.importable`): then ``DEPLOY_FAILED``, no deployments, and a
  traceback-like ``message`` ending in ``ModuleNotFoundError: No module named '<module>'``.
- ``target_capacity`` (Serve's, for incremental upgrades): the PUT body's value (a
  number from 0 to 100, or absent/null: 100 %), reported back by the GET; a PUT without
  it resets it, as Serve's declarative config does, and a value out of range is a 400.
  The proxy of a head whose target capacity is 0 has no replica to send a request to
  (:attr:`Head.target_capacity`; the simulator answers 503).
- :meth:`Head.delete_applications` - ``DELETE``: Serve shuts down; everything is forgotten.
- :meth:`Head.route` - what the proxy on ``:8000`` serves: the ``RUNNING`` (or
  ``UNHEALTHY``) application with the longest matching ``route_prefix``.

Fault switches, for tests: :meth:`Head.make_unhealthy` (a ``RUNNING`` application and
its deployments turn ``UNHEALTHY``; :meth:`Head.make_healthy` undoes it),
:meth:`Head.restart` (the head forgets its applications, as a restarted Ray head
without GCS fault tolerance does); the
transport-level faults (dashboard down, slow) live in :mod:`tests.support.raysim.inside`.

>>> clock = iter([0.0, 0.0, 5.0]).__next__
>>> head = Head(Behaviour(deploy_delay=3.0), clock=clock, ip="198.18.1.7")
>>> head.put_applications({"applications": [{"name": "a", "import_path": "m.app"}]})
>>> head.get_applications()["applications"]["a"]["status"]
'DEPLOYING'
>>> head.get_applications()["applications"]["a"]["status"]
'RUNNING'
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import re
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["Behaviour", "ConfigError", "Head", "empty_status"]

RAY_VERSION = "2.60.0"

DEFAULT_UNIMPORTABLE_PATTERN = r"(^|[._])(does_not_exist|broken)"
"""A module whose dotted name has a part starting with ``does_not_exist`` or ``broken``
(``does_not_exist.app``, ``my.broken_module``, ``broken``) cannot be imported."""


class ConfigError(ValueError):
    """A Serve config Ray refuses with HTTP 400; ``str()`` is the plain-text body."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Behaviour:
    """How the simulated heads behave. Every field states its default."""

    deploy_delay: float = 3.0
    """Seconds an application stays ``DEPLOYING`` before ``RUNNING`` or ``DEPLOY_FAILED``.
    Default 3 s (Ray 2.60 took ~4-6 s for a trivial app)."""

    delete_delay: float = 0.0
    """Seconds an application left out of a PUT stays ``DELETING``. Default 0 (gone at once)."""

    unimportable: frozenset[str] = frozenset()
    """Modules that cannot be imported, besides those matching ``unimportable_pattern``
    (a module is unimportable if it or any of its parent packages is listed). Default none."""

    unimportable_pattern: str = DEFAULT_UNIMPORTABLE_PATTERN
    """A regular expression searched in the module name; a match cannot be imported.
    Default: a dotted part starting with ``does_not_exist`` or ``broken``."""

    def module_of(self, import_path: str) -> str:
        """The module an import path names: before a ``:``, else before the last ``.``.

        >>> Behaviour().module_of("fruit.deployment_graph"), Behaviour().module_of("a.b:app")
        ('fruit', 'a.b')
        """
        if ":" in import_path:
            return import_path.split(":", 1)[0]
        return import_path.rsplit(".", 1)[0] if "." in import_path else import_path

    def importable(self, import_path: str) -> bool:
        """Whether the module of ``import_path`` can be imported.

        >>> b = Behaviour(unimportable=frozenset({"pkg"}))
        >>> [b.importable(p) for p in ("fruit.app", "does_not_exist.app", "pkg.mod.app")]
        [True, False, False]
        """
        module = self.module_of(import_path)
        parts = module.split(".")
        prefixes = {".".join(parts[: i + 1]) for i in range(len(parts))}
        if prefixes & self.unimportable:
            return False
        return re.search(self.unimportable_pattern, module) is None


def empty_status() -> dict[str, Any]:
    """What ``GET /api/serve/applications/`` answers while Serve is not running."""
    return {"controller_info": {}, "proxies": {}, "applications": {}, "target_capacity": None}


@dataclasses.dataclass(slots=True)
class _App:
    config: dict[str, Any]
    deployed_at: float
    unhealthy: bool = False
    deleting_since: float | None = None


def _fake_id(*parts: str, length: int = 56) -> str:
    """A stable hex id (Ray's node and actor ids are hex strings)."""
    return hashlib.sha256("/".join(parts).encode()).hexdigest()[:length]


def _normalise(app: Mapping[str, Any]) -> dict[str, Any]:
    """An application config with Ray's defaults filled in (name, route prefix)."""
    config = copy.deepcopy(dict(app))
    config.setdefault("name", "default")
    config.setdefault("route_prefix", "/")
    config.setdefault("args", {})
    return config


def _validate(body: Any) -> list[dict[str, Any]]:
    if not isinstance(body, Mapping):
        raise ConfigError(
            "1 validation error for ServeDeploySchema\n__root__\n"
            "  value is not a valid dict (type=type_error.dict)"
        )
    apps = body.get("applications")
    if not isinstance(apps, list):
        raise ConfigError(
            "1 validation error for ServeDeploySchema\napplications\n"
            "  field required (type=value_error.missing)"
        )
    errors: list[str] = []
    for index, app in enumerate(apps):
        if not isinstance(app, Mapping):
            errors.append(
                f"applications -> {index}\n  value is not a valid dict (type=type_error.dict)"
            )
        elif "import_path" not in app:
            errors.append(
                f"applications -> {index} -> import_path\n"
                "  field required (type=value_error.missing)"
            )
        elif not isinstance(app["import_path"], str):
            errors.append(
                f"applications -> {index} -> import_path\n  str type expected (type=type_error.str)"
            )
    if errors:
        count = len(errors)
        noun = "error" if count == 1 else "errors"
        raise ConfigError(f"{count} validation {noun} for ServeDeploySchema\n" + "\n".join(errors))
    capacity = body.get("target_capacity")
    if capacity is not None and (
        isinstance(capacity, bool)
        or not isinstance(capacity, int | float)
        or not 0 <= capacity <= 100
    ):
        raise ConfigError(
            "1 validation error for ServeDeploySchema\ntarget_capacity\n"
            f"  value {capacity!r} is not a number from 0 to 100 (type=value_error)"
        )
    normalised = [_normalise(app) for app in apps]
    for key, what in (("name", "name"), ("route_prefix", "route_prefix")):
        seen: set[str] = set()
        for app in normalised:
            value = app[key]
            if value is not None and value in seen:
                raise ConfigError(
                    "1 validation error for ServeDeploySchema\n__root__\n"
                    f"  Found multiple configs for applications with {what} {value!r}. "
                    f"Please ensure all applications have unique {what}s. "
                    "(type=value_error)"
                )
            seen.add(value)
    return normalised


class Head:
    """The Serve state of one head pod (see the module docstring)."""

    __slots__ = ("_apps", "_behaviour", "_clock", "_serve_started", "ip", "target_capacity")

    def __init__(
        self, behaviour: Behaviour, *, clock: Callable[[], float], ip: str = "0.0.0.0"
    ) -> None:
        self._behaviour = behaviour
        self._clock = clock
        self.ip = ip
        self._apps: dict[str, _App] = {}
        self._serve_started = False
        self.target_capacity: float | None = None
        """Serve's ``target_capacity`` (None: 100 %), from the last good PUT."""

    # -- the REST subset -----------------------------------------------------------------------

    @property
    def serve_running(self) -> bool:
        """Whether Serve (controller and proxy) runs: after a PUT, until DELETE or restart."""
        return self._serve_started

    def put_applications(self, body: Any) -> None:
        """``PUT /api/serve/applications/``; raises :class:`ConfigError` for a 400."""
        configs = _validate(body)
        now = self._clock()
        self._serve_started = True
        self.target_capacity = body.get("target_capacity")
        wanted = {config["name"]: config for config in configs}
        for name, config in wanted.items():
            current = self._apps.get(name)
            if current is None or current.config != config or current.deleting_since is not None:
                self._apps[name] = _App(config=config, deployed_at=now)
        for name, app in list(self._apps.items()):
            if name not in wanted and app.deleting_since is None:
                app.deleting_since = now
        self._expire(now)

    def delete_applications(self) -> None:
        """``DELETE /api/serve/applications/``: shut Serve down, forget everything."""
        self._apps.clear()
        self._serve_started = False
        self.target_capacity = None

    def get_applications(self, api_type: str | None = None) -> dict[str, Any]:
        """``GET /api/serve/applications/[?api_type=...]`` as Ray 2.60 shapes it."""
        if not self._serve_started:
            return empty_status()
        now = self._clock()
        self._expire(now)
        node_id = _fake_id("node", self.ip)
        controller = {
            "node_id": node_id,
            "node_ip": self.ip,
            "node_instance_id": "",
            "actor_id": _fake_id("controller", self.ip, length=32),
            "actor_name": "SERVE_CONTROLLER_ACTOR",
            "worker_id": _fake_id("controller-worker", self.ip),
            "log_file_path": "/serve/controller.log",
        }
        proxy = {
            **controller,
            "actor_id": _fake_id("proxy", self.ip, length=32),
            "actor_name": f"SERVE_CONTROLLER_ACTOR:SERVE_PROXY_ACTOR-{node_id}",
            "worker_id": _fake_id("proxy-worker", self.ip),
            "log_file_path": "/serve/proxy.log",
            "status": "HEALTHY",
        }
        apps = {} if api_type == "imperative" else {
            name: self._app_status(name, app, now) for name, app in self._apps.items()
        }  # fmt: skip
        return {
            "controller_info": controller,
            "proxy_location": "EveryNode",
            "http_options": {
                "host": "0.0.0.0",
                "port": 8000,
                "root_path": "",
                "request_timeout_s": None,
                "keep_alive_timeout_s": 5,
            },
            "grpc_options": {"port": 9000, "grpc_servicer_functions": []},
            "proxies": {node_id: proxy},
            "deploy_mode": "MULTI_APP",
            "applications": apps,
            "target_capacity": self.target_capacity,
        }

    def route(self, path: str) -> str | None:
        """The application serving ``path`` on ``:8000`` (longest route prefix), or ``None``."""
        if not self._serve_started:
            return None
        now = self._clock()
        self._expire(now)
        best: tuple[int, str] | None = None
        for name, app in self._apps.items():
            if self._status(app, now) not in ("RUNNING", "UNHEALTHY"):
                continue
            prefix = app.config.get("route_prefix")
            if not isinstance(prefix, str):
                continue
            stem = prefix.rstrip("/")
            matches = path in (prefix, stem) or path.startswith(stem + "/") or prefix == "/"
            if matches and (best is None or len(stem) > best[0]):
                best = (len(stem), name)
        return best[1] if best else None

    def routes(self) -> dict[str, str]:
        """``/-/routes``: route prefix -> application name, for applications that serve."""
        now = self._clock()
        return {
            str(app.config.get("route_prefix")): name
            for name, app in self._apps.items()
            if self._serve_started and self._status(app, now) in ("RUNNING", "UNHEALTHY")
        }

    # -- fault switches ------------------------------------------------------------------------

    def make_unhealthy(self, name: str) -> bool:
        """Turn a ``RUNNING`` application ``UNHEALTHY``; ``False`` if it is not running."""
        app = self._apps.get(name)
        if app is None or self._status(app, self._clock()) != "RUNNING":
            return False
        app.unhealthy = True
        return True

    def make_healthy(self, name: str) -> bool:
        """Undo :meth:`make_unhealthy`: ``RUNNING`` again; ``False`` if it is not ``UNHEALTHY``."""
        app = self._apps.get(name)
        if app is None or self._status(app, self._clock()) != "UNHEALTHY":
            return False
        app.unhealthy = False
        return True

    def restart(self) -> None:
        """The head process restarted: Serve is down and the applications are forgotten."""
        self.delete_applications()

    # -- internals -----------------------------------------------------------------------------

    def _expire(self, now: float) -> None:
        delay = self._behaviour.delete_delay
        for name, app in list(self._apps.items()):
            if app.deleting_since is not None and now - app.deleting_since >= delay:
                del self._apps[name]

    def _status(self, app: _App, now: float) -> str:
        if app.deleting_since is not None:
            return "DELETING"
        if now - app.deployed_at < self._behaviour.deploy_delay:
            return "DEPLOYING"
        if not self._behaviour.importable(app.config["import_path"]):
            return "DEPLOY_FAILED"
        return "UNHEALTHY" if app.unhealthy else "RUNNING"

    def _failure_message(self, name: str, import_path: str) -> str:
        module = self._behaviour.module_of(import_path)
        top = module.split(".")[0]
        return (
            f"Deploying app '{name}' failed with exception:\n"
            "Traceback (most recent call last):\n"
            '  File "/ray/python/ray/serve/_private/application_state.py", line 1198, '
            "in build_serve_application\n"
            "    app = call_user_app_builder_with_args_if_necessary(\n"
            "        import_attr(import_path), args)\n"
            '  File "/ray/python/ray/_private/utils.py", line 1203, in import_attr\n'
            "    module = importlib.import_module(module_name)\n"
            '  File "/usr/lib/python3.11/importlib/__init__.py", line 126, in import_module\n'
            "    return _bootstrap._gcd_import(name[level:], package, level)\n"
            f"ModuleNotFoundError: No module named '{top}'\n"
        )

    def _app_status(self, name: str, app: _App, now: float) -> dict[str, Any]:
        status = self._status(app, now)
        config = app.config
        message = ""
        deployments: dict[str, Any] = {}
        if status == "DEPLOY_FAILED":
            message = self._failure_message(name, config["import_path"])
        else:
            deployment_status = {
                "DEPLOYING": "UPDATING",
                "RUNNING": "HEALTHY",
                "UNHEALTHY": "UNHEALTHY",
                "DELETING": "UPDATING",
            }[status]
            trigger = {
                "UPDATING": "CONFIG_UPDATE_STARTED",
                "HEALTHY": "CONFIG_UPDATE_COMPLETED",
                "UNHEALTHY": "HEALTH_CHECK_FAILED",
            }[deployment_status]
            if status == "UNHEALTHY":
                message = "The application is unhealthy: a deployment failed its health check."
            for deployment_name, deployment_config in _deployments(config).items():
                replicas = int(deployment_config.get("num_replicas") or 1)
                deployments[deployment_name] = {
                    "name": deployment_name,
                    "status": deployment_status,
                    "status_trigger": trigger,
                    "message": "" if deployment_status != "UNHEALTHY" else (
                        "A replica's health check failed."
                    ),
                    "deployment_config": {"name": deployment_name, **deployment_config},
                    "target_num_replicas": replicas,
                    "required_resources": {"CPU": 1},
                    "replicas": [
                        {
                            "node_id": _fake_id("node", self.ip),
                            "node_ip": self.ip,
                            "replica_id": _fake_id(name, deployment_name, str(i), length=8),
                            "state": "RUNNING" if deployment_status == "HEALTHY" else "STARTING",
                            "pid": 1000 + i,
                            "start_time_s": app.deployed_at,
                        }
                        for i in range(replicas)
                    ] if deployment_status in ("HEALTHY", "UNHEALTHY") else [],
                }  # fmt: skip
        return {
            "name": name,
            "route_prefix": config.get("route_prefix"),
            "docs_path": None,
            "status": status,
            "message": message,
            "last_deployed_time_s": app.deployed_at,
            "deployed_app_config": copy.deepcopy(config),
            "source": "declarative",
            "deployments": deployments,
        }


def _deployments(config: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The deployments an application reports: those its config lists, else one named
    after the import path's attribute."""
    listed = config.get("deployments")
    result: dict[str, dict[str, Any]] = {}
    if isinstance(listed, list):
        for item in listed:
            if isinstance(item, Mapping) and isinstance(item.get("name"), str):
                result[item["name"]] = {k: v for k, v in item.items() if k != "name"}
    if not result:
        path = str(config["import_path"])
        attribute = path.split(":", 1)[1] if ":" in path else path.rsplit(".", 1)[-1]
        result[attribute] = {}
    return result
