"""``rayservice-manager``: the operator process.

Flags and environment variables (``RAYSERVICE_<FLAG>``, e.g.
``RAYSERVICE_LEADER_ELECT=true``, ``RAYSERVICE_NAMESPACE=team-a,team-b``) are
read by pydantic-settings; ``--help`` lists them all, each with its variable. A
bad flag or value, or a kubeconfig that cannot be read, exits with status 2 and
one line saying what is wrong - naming the variable when the value came from one.

KubeRay's operator flags are accepted under their KubeRay names where the
meaning is the same, so a deployment can switch operators without editing its
arguments: ``--metrics-addr`` (``--metrics-bind-address``),
``--enable-leader-election[=true|false]`` (``--leader-elect``),
``--watch-namespace a,b`` (``--namespace``), ``--log-stdout-encoder json|console``
(``--log-format``); ``--leader-election-namespace``, ``--reconcile-concurrency``,
``--health-probe-bind-address``, ``--qps`` and ``--burst`` have one name in both.
Giving a flag under both names with different values is an error. Boolean flags
also take Go's ``--flag=true|false`` form. Like KubeRay, the client allows
``--qps 100`` requests per second with bursts of ``--burst 200``
(``--qps 0``: no client-side limit).

The manager registers every reconciler :func:`controllers.setup` knows, then
serves ``/metrics`` and ``/healthz``/``/readyz`` and runs until SIGTERM or SIGINT
(a second signal exits at once). It exits 1 when it fails or loses its
leader Lease (``--leader-elect``), which lives in the pod's own namespace
(``$POD_NAMESPACE``, set by ``config/manager``, else the service account's)
unless ``--leader-election-namespace`` names another. ``--namespace`` (repeatable,
or comma-separated) restricts the operator to those namespaces: it then needs
only Roles there (``config/overlays/namespaced``), not the ClusterRole.

The Ray dashboard of each RayService's cluster is reached as
``--dashboard-address-mode`` says: ``service`` (the head service's cluster DNS
name, as KubeRay does in a cluster), ``pod-ip`` (the head pod's IP: a manager
outside the cluster with a route to pods) or ``kubernetes-proxy`` (through the API
server's proxy subresources; KubeRay's ``--use-kubernetes-proxy`` means the same).
A ready RayService's Serve status is polled at most every 2 s and, while nothing
changes, at doubling intervals up to ``--serve-poll-max`` (10 s).
"""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import sys
from collections.abc import Sequence
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, CliApp, NoDecode, SettingsConfigDict, SettingsError

import controllers
from controllers.rayservice import reconciler as rayservice_reconciler
from runtime import log, manager
from runtime.client import client as client_

__all__ = ["Settings", "main"]


_NAMESPACES = Annotated[list[str], NoDecode]  # "a,b" from the environment, not JSON only

_KUBERAY_NAMES = {
    "metrics_addr": "metrics_bind_address",
    "enable_leader_election": "leader_elect",
    "watch_namespace": "namespace",
    "log_stdout_encoder": "log_format",
}
"""KubeRay's flag -> ours, where the meaning is the same."""


class Settings(BaseSettings):
    """The Ray operator's manager. Each flag may also come from the environment variable
    shown with it (a flag wins over its variable); KubeRay's flag names are accepted
    where the meaning is the same (the last four flags)."""

    model_config = SettingsConfigDict(
        cli_prog_name="rayservice-manager",
        cli_kebab_case=True,
        cli_implicit_flags=True,
        cli_show_env_vars=True,
        env_prefix="RAYSERVICE_",
        extra="forbid",
        cli_exit_on_error=False,  # a SettingsError, reported in one line (no usage text)
    )

    kubeconfig: pathlib.Path | None = Field(
        None, description="kubeconfig to use; default $KUBECONFIG, in-cluster, ~/.kube/config"
    )
    namespace: _NAMESPACES = Field(
        default_factory=list,
        description="watch only these namespaces (repeatable, or comma-separated); default all",
    )
    leader_elect: bool = Field(False, description="run only while holding the leader Lease")
    leader_election_id: str = Field("rayservice-operator-leader", description="Lease name")
    leader_election_namespace: str | None = Field(
        None,
        description="Lease namespace; default the pod's ($POD_NAMESPACE, else the service "
        "account's), 'default' out of a cluster",
    )
    metrics_bind_address: str = Field(":8080", description="host:port for /metrics; 0 disables")
    health_probe_bind_address: str = Field(
        ":8081", description="host:port for /healthz and /readyz; 0 disables"
    )
    reconcile_concurrency: int = Field(1, ge=1, le=256, description="workers per controller")
    qps: float = Field(100, ge=0, description="client-side requests per second; 0: no limit")
    burst: int = Field(200, ge=1, description="client-side burst above --qps")
    log_format: Literal["auto", "json", "console"] = Field(
        "auto", description="json in clusters, console on a terminal (auto)"
    )
    log_level: Literal["debug", "info", "warning", "error"] = Field("info")
    dashboard_address_mode: Literal["service", "pod-ip", "kubernetes-proxy"] = Field(
        "service",
        description="how the Ray dashboard is reached: the head service's cluster DNS name "
        "(in a cluster), the head pod's IP, or the API server's proxy subresources",
    )
    serve_poll_max: float = Field(
        10.0, ge=2.0, description="longest seconds between Serve polls of a ready RayService"
    )

    # KubeRay's names for the flags above (see the module docstring).
    metrics_addr: str | None = Field(None, description="KubeRay's name for --metrics-bind-address")
    enable_leader_election: bool = Field(False, description="KubeRay's name for --leader-elect")
    watch_namespace: _NAMESPACES = Field(
        default_factory=list, description="KubeRay's name for --namespace (comma-separated)"
    )
    log_stdout_encoder: Literal["json", "console"] | None = Field(
        None, description="KubeRay's name for --log-format"
    )
    use_kubernetes_proxy: bool = Field(
        False, description="KubeRay's name for --dashboard-address-mode kubernetes-proxy"
    )

    @field_validator("namespace", "watch_namespace", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        """``a,b`` (a flag or a variable), a JSON list, or repeated flags: a list of names."""
        if isinstance(value, str):
            value = json.loads(value) if value.lstrip().startswith("[") else [value]
        if isinstance(value, list):
            return [n.strip() for item in value for n in str(item).split(",") if n.strip()]
        return value

    @model_validator(mode="after")
    def _kuberay_names(self) -> Settings:
        given = self.model_fields_set
        for theirs, ours in _KUBERAY_NAMES.items():
            if theirs not in given:
                continue
            value = getattr(self, theirs)
            if ours in given and getattr(self, ours) != value:
                raise ValueError(
                    f"--{_flag(theirs)} and --{_flag(ours)} are the same setting; give one"
                )
            setattr(self, ours, value)
        if self.use_kubernetes_proxy:
            if "dashboard_address_mode" in given and self.dashboard_address_mode != (
                "kubernetes-proxy"
            ):
                raise ValueError(
                    "--use-kubernetes-proxy and --dashboard-address-mode "
                    f"{self.dashboard_address_mode} contradict each other; give one"
                )
            self.dashboard_address_mode = "kubernetes-proxy"
        return self


def _flag(field: str) -> str:
    return field.replace("_", "-")


_BOOLEANS = frozenset(
    _flag(name) for name, info in Settings.model_fields.items() if info.annotation is bool
)
_TRUE = frozenset({"1", "t", "true", "yes"})
_FALSE = frozenset({"0", "f", "false", "no"})


def _go_booleans(argv: Sequence[str]) -> list[str]:
    """``--flag=true|false`` (Go's form, as KubeRay's deployments write it) as
    ``--flag`` / ``--no-flag``."""
    out = []
    for arg in argv:
        name, eq, value = arg.partition("=")
        if eq and name.startswith("--") and name[2:] in _BOOLEANS:
            if value.lower() in _TRUE:
                arg = name
            elif value.lower() in _FALSE:
                arg = f"--no-{name[2:]}"
        out.append(arg)
    return out


def _source(field: str, argv: Sequence[str]) -> str:
    """How the user spelt ``field``: its flag, or its variable when only that was set."""
    flag = f"--{_flag(field)}"
    on_command_line = any(
        a == flag or a.startswith(flag + "=") or a == f"--no-{_flag(field)}" for a in argv
    )
    variable = f"RAYSERVICE_{field.upper()}"
    if not on_command_line and variable in os.environ:
        return variable
    return flag


def _fail(message: str) -> int:
    message = " ".join(message.split())  # one line, also for multi-line library errors
    print(f"rayservice-manager: error: {message}", file=sys.stderr)
    return 2


async def _client(settings: Settings) -> client_.Client:
    options = client_.Options(qps=settings.qps or None, burst=settings.burst)
    path = settings.kubeconfig or (
        pathlib.Path(os.environ["KUBECONFIG"]) if os.environ.get("KUBECONFIG") else None
    )
    if path is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
        return client_.Client.in_cluster(options=options)
    path = path or pathlib.Path.home() / ".kube" / "config"
    if not path.is_file():
        raise FileNotFoundError(f"kubeconfig {path} does not exist")
    if not path.read_text().strip():
        raise ValueError(f"kubeconfig {path} is empty")
    return await client_.Client.from_kubeconfig(path, options=options)


def main(argv: Sequence[str] | None = None) -> int:
    args = _go_booleans(sys.argv[1:] if argv is None else argv)
    try:
        settings = CliApp.run(Settings, cli_args=args)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = str(first["loc"][0]) if first["loc"] else ""
        where = f"{_source(field, args)}: " if field in Settings.model_fields else ""
        message = str(first["msg"]).removeprefix("Value error, ")
        return _fail(f"{where}{message}")
    except SettingsError as exc:
        return _fail(str(exc))
    log.configure(settings.log_format, settings.log_level)
    return asyncio.run(_run(settings))


async def _run(settings: Settings) -> int:
    try:
        client = await _client(settings)
    except Exception as exc:  # kubeconfig missing, unreadable, or invalid
        return _fail(f"cannot load the kubeconfig: {exc}")
    mgr = manager.Manager(
        client,
        manager.Options(
            namespaces=tuple(dict.fromkeys(settings.namespace)),
            metrics_bind_address=settings.metrics_bind_address,
            health_probe_bind_address=settings.health_probe_bind_address,
            leader_election=settings.leader_elect,
            leader_election_id=settings.leader_election_id,
            leader_election_namespace=settings.leader_election_namespace,
            cache_by_resource=controllers.cache_by_resource(),
        ),
    )
    controllers.setup(
        mgr,
        max_concurrent_reconciles=settings.reconcile_concurrency,
        rayservice_options=_rayservice_options(settings),
    )
    return await manager.serve(mgr)


def _rayservice_options(settings: Settings) -> rayservice_reconciler.Options:
    return rayservice_reconciler.Options(
        address_mode=settings.dashboard_address_mode, serve_poll_max=settings.serve_poll_max
    )


if __name__ == "__main__":
    raise SystemExit(main())
