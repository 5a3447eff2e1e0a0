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
also take Go's ``--flag=true|false`` form, and every flag Go's single-dash form
(``-watch-namespace=a``). Like KubeRay, the client allows
``--qps 100`` requests per second with bursts of ``--burst 200`` **for each API
resource** (KubeRay's controller-runtime client has a REST client, so a token bucket,
per kind; ``--qps 0``: no client-side limit), leader election is on unless
``--leader-elect=false``, and probes are served on ``:8082``.

Every other flag of KubeRay v1.7.0's ``main.go`` is accepted too, so its Helm chart's
and kustomize manifest's arguments start this binary unchanged:

- ``--feature-gates A=true,B=false`` (:mod:`controllers.features`): KubeRay's gates and
  defaults; an unknown gate or a non-boolean value exits 2, and the gates whose value
  this operator does not follow are listed in one warning at start-up.
- ``--config FILE`` (:mod:`controllers.configuration`): KubeRay's ``Configuration``
  file. As in KubeRay, its values replace the flags' (except ``--feature-gates`` and the
  two log encoders, which KubeRay also takes from the flags); a flag it overrides is
  named in a warning. Its pod defaults (sidecars, env vars, annotations, labels) go
  into every pod, as KubeRay's do.
- ``--enable-metrics``: also serve KubeRay's ``kuberay_*`` metrics on ``/metrics``.
- ``--log-file-path FILE`` / ``--log-file-encoder json|console`` (default json): also
  log to that file (rotated at 500 MB, 10 kept). ``--zap-log-level`` sets the level
  as ``--log-level`` does (a number above 0 is ``debug``); ``--zap-devel``,
  ``--zap-encoder``, ``--zap-stacktrace-level`` and ``--zap-time-encoding`` are
  accepted and change nothing (KubeRay overrides the encoder from its own flags).
- ``--forced-cluster-upgrade`` (a no-op in KubeRay too) is accepted with a warning.
- ``--batch-scheduler NAME`` / ``--enable-batch-scheduler``: no batch scheduler is
  integrated here, so any value exits 2 naming what is supported (nothing) rather than
  create pods a gang scheduler would never see; KubeRay's own errors (both flags,
  an unknown name) come first.
- ``ENABLE_WEBHOOKS=true`` in the environment (KubeRay's switch) serves the validating
  webhooks of :mod:`controllers.webhooks` over HTTPS on ``--webhook-bind-address``
  (``:9443``) with ``tls.crt``/``tls.key`` from ``--webhook-cert-dir``
  (``/tmp/k8s-webhook-server/serving-certs``, where KubeRay's manifests mount the
  Secret), reloaded when the Secret is rotated; ``/readyz`` then includes the server.
  ``config/overlays/webhooks`` and the chart's ``webhooks.enabled`` deploy it.

Secure metrics (KubeRay v1.7.0 has no such flags; these are kubebuilder's scaffold's
names): ``--metrics-secure`` serves ``/metrics`` over HTTPS to callers the API server
authenticates and authorizes (TokenReview, then a SubjectAccessReview for ``get`` on
``/metrics``: :mod:`runtime.delegatedauth`), with the certificate ``--metrics-cert-name``
(``tls.crt``) and key ``--metrics-cert-key`` (``tls.key``) of the directory
``--metrics-cert-path`` (read again when rotated), or without it a self-signed
certificate made at start, as kubebuilder's scaffold. Off by default (kubebuilder's is on):
KubeRay serves plain HTTP, and its manifests and dashboards scrape that. The manifests
shipped here do not keep that default: the Helm chart turns ``--metrics-secure`` on and
``config/default`` binds ``/metrics`` to the pod's loopback (docs/operator/security.md).

The manager registers every reconciler :func:`controllers.setup.setup` knows, then
serves ``/metrics`` and ``/healthz``/``/readyz`` and runs until SIGTERM or SIGINT
(a second signal exits at once). It exits 1 when it fails or loses its
leader Lease (``--leader-elect``), which lives in the pod's own namespace
(``$POD_NAMESPACE``, set by ``config/manager``, else the service account's)
unless ``--leader-election-namespace`` names another. The Lease is KubeRay's,
``ray-operator-leader`` (``--leader-election-id``): swapping the image of KubeRay's
Deployment for ours rolls over without the two ever acting at once. ``--namespace`` (repeatable,
or comma-separated) restricts the operator to those namespaces: it then needs
only Roles there (``config/overlays/namespaced``), not the ClusterRole.

Incremental upgrades (``NewClusterWithIncrementalUpgrade``) create a Gateway, a load
balancer, with the operator's rights: ``--gateway-classes a,b`` (repeatable; the
Configuration's ``gatewayClasses``; not a KubeRay flag) lists the GatewayClasses it may
create one of (:class:`controllers.rayservice.gateway.GatewayClasses`). The default,
none, refuses every class: such a RayService reports ``GatewayClassNotAllowed``, naming
this flag, and the validating webhook refuses it. ``--gateway-classes='*'`` allows every
class, as KubeRay does, with a warning at start-up. A value that is not a GatewayClass
name exits 2.

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
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal

import structlog
from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, CliApp, NoDecode, SettingsConfigDict, SettingsError

import controllers.setup
from controllers import configuration, environment, features, webhooks
from controllers.raycluster import pods as raycluster_pods
from controllers.raycluster import reconciler as raycluster_reconciler
from controllers.rayjob import plan as rayjob_plan
from controllers.rayjob import reconciler as rayjob_reconciler
from controllers.rayservice import gateway
from controllers.rayservice import reconciler as rayservice_reconciler
from controllers.rayservice import setup as rayservice_setup
from runtime import log, manager
from runtime.client import client as client_
from runtime.webhook import server as webhook_server

__all__ = ["NAME", "USER_AGENT", "Settings", "main"]


NAME = "rayservice-operator"
"""The operator's name (:attr:`runtime.manager.Options.name`): its field manager, its
Events' source component, and the product token of its User-Agent."""

USER_AGENT = f"{NAME}/runtime"
"""The User-Agent of its API calls, as before the framework derived one (the benchmarks
and audit queries match it)."""

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
    leader_elect: bool = Field(True, description="run only while holding the leader Lease")
    leader_election_id: str = Field(
        "ray-operator-leader",
        description="Lease name (KubeRay's: one of the two operators acts at a time)",
    )
    leader_election_namespace: str | None = Field(
        None,
        description="Lease namespace; default the pod's ($POD_NAMESPACE, else the service "
        "account's), 'default' out of a cluster",
    )
    metrics_bind_address: str = Field(":8080", description="host:port for /metrics; 0 disables")
    health_probe_bind_address: str = Field(
        ":8082", description="host:port for /healthz and /readyz; 0 disables"
    )
    metrics_secure: bool = Field(
        False,
        description="serve /metrics over HTTPS to callers allowed 'get' on /metrics "
        "(TokenReview + SubjectAccessReview); self-signed without --metrics-cert-path",
    )
    metrics_cert_path: pathlib.Path | None = Field(
        None, description="directory of the metrics server's certificate and key"
    )
    metrics_cert_name: str = Field("tls.crt", description="the certificate's file name there")
    metrics_cert_key: str = Field("tls.key", description="the key's file name there")
    reconcile_concurrency: int = Field(1, ge=1, le=256, description="workers per controller")
    qps: float = Field(
        100, ge=0, description="client-side requests per second per API resource; 0: no limit"
    )
    burst: int = Field(200, ge=1, description="client-side burst above --qps (per resource)")
    log_format: Literal["auto", "json", "console"] = Field(
        "auto", description="json in clusters, console on a terminal (auto)"
    )
    log_level: Literal["debug", "info", "warning", "error"] = Field(
        "info", description="the least severe level logged"
    )
    dashboard_address_mode: Literal["service", "pod-ip", "kubernetes-proxy"] = Field(
        "service",
        description="how the Ray dashboard is reached: the head service's cluster DNS name "
        "(in a cluster), the head pod's IP, or the API server's proxy subresources",
    )
    serve_poll_max: float = Field(
        10.0, ge=2.0, description="longest seconds between Serve polls of a ready RayService"
    )
    gateway_classes: _NAMESPACES = Field(
        default_factory=list,
        description="GatewayClasses an incremental upgrade may create its Gateway of "
        "(repeatable, or comma-separated; '*': any, as KubeRay); default none",
    )
    webhook_bind_address: str = Field(
        ":9443", description="host:port of the webhook server (with ENABLE_WEBHOOKS=true)"
    )
    webhook_cert_dir: pathlib.Path = Field(
        # KubeRay's manifests mount the Secret here (controller-runtime's default on Linux).
        pathlib.Path("/tmp/k8s-webhook-server/serving-certs"),
        description="where the webhook server's tls.crt and tls.key are (reloaded on change)",
    )

    feature_gates: str = Field(
        "", description="KubeRay's feature gates, Name=true|false,... (default: its defaults)"
    )
    config: pathlib.Path | None = Field(
        None, description="KubeRay's Configuration file; its values replace the flags'"
    )
    enable_metrics: bool = Field(False, description="also serve KubeRay's kuberay_* metrics")
    log_file_path: pathlib.Path | None = Field(None, description="also log to this file")
    log_file_encoder: Literal["json", "console"] = Field("json", description="its format")
    forced_cluster_upgrade: bool = Field(False, description="no effect (as in KubeRay)")
    batch_scheduler: str = Field("", description="not supported: any value is an error")
    enable_batch_scheduler: bool = Field(False, description="not supported (KubeRay: volcano)")
    zap_log_level: str | None = Field(None, description="as --log-level (a number > 0: debug)")
    zap_devel: bool = Field(False, description="accepted, no effect")
    zap_encoder: Literal["json", "console"] | None = Field(None, description="accepted, no effect")
    zap_stacktrace_level: str | None = Field(None, description="accepted, no effect")
    zap_time_encoding: str | None = Field(None, description="accepted, no effect")

    # KubeRay's names for the flags above (see the module docstring).
    metrics_addr: str | None = Field(None, description="KubeRay's name for --metrics-bind-address")
    enable_leader_election: bool = Field(True, description="KubeRay's name for --leader-elect")
    watch_namespace: _NAMESPACES = Field(
        default_factory=list, description="KubeRay's name for --namespace (comma-separated)"
    )
    log_stdout_encoder: Literal["json", "console"] | None = Field(
        None, description="KubeRay's name for --log-format"
    )
    use_kubernetes_proxy: bool = Field(
        False, description="KubeRay's name for --dashboard-address-mode kubernetes-proxy"
    )

    @field_validator("namespace", "watch_namespace", "gateway_classes", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        """``a,b`` (a flag or a variable), a JSON list, or repeated flags: a list of names."""
        if isinstance(value, str):
            value = json.loads(value) if value.lstrip().startswith("[") else [value]
        if isinstance(value, list):
            return [n.strip() for item in value for n in str(item).split(",") if n.strip()]
        return value

    @field_validator("gateway_classes")
    @classmethod
    def _gateway_classes(cls, value: list[str]) -> list[str]:
        gateway.GatewayClasses.parse(value)  # a bad name, or '*' with names, is a bad flag
        return value

    @field_validator("log_file_path", "config", "metrics_cert_path", mode="before")
    @classmethod
    def _empty_is_none(cls, value: Any) -> Any:
        """``--log-file-path ""`` (KubeRay's default) means no file."""
        return None if value == "" else value

    @field_validator("zap_log_level")
    @classmethod
    def _zap_level(cls, value: str | None) -> str | None:
        if value is None or value in ("debug", "info", "error", "panic", "dpanic", "fatal"):
            return value
        if value.isdigit():
            return value
        raise ValueError("must be debug, info, error, panic, dpanic, fatal or a positive integer")

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
        if "zap_log_level" in given and "log_level" not in given and self.zap_log_level:
            level = self.zap_log_level
            self.log_level = (
                "debug" if level == "debug" or (level.isdigit() and int(level) > 0)
                else "info" if level in ("info", "0") else "error"
            )  # fmt: skip
        _check_batch_scheduler(self.enable_batch_scheduler, self.batch_scheduler)
        if self.metrics_cert_path is not None and not self.metrics_secure:
            raise ValueError("--metrics-cert-path is only used with --metrics-secure")
        return self

    @field_validator("feature_gates")
    @classmethod
    def _gates(cls, value: str) -> str:
        features.parse(value)  # an unknown gate or a non-boolean is a bad flag
        return value

    def gates(self) -> features.Gates:
        """``--feature-gates`` parsed."""
        return features.parse(self.feature_gates)

    def classes(self) -> gateway.GatewayClasses:
        """``--gateway-classes`` parsed."""
        return gateway.GatewayClasses.parse(self.gateway_classes)


_KUBERAY_SCHEDULERS = ("volcano", "yunikorn", "kai-scheduler", "scheduler-plugins")


def _check_batch_scheduler(enabled: bool, name: str) -> None:
    """KubeRay's checks first (its messages), then ours: none is integrated."""
    if enabled and name:
        raise ValueError(
            "--batch-scheduler: both feature flags enable-batch-scheduler (deprecated) and "
            "batch-scheduler are set. Please use batch-scheduler only"
        )
    if name and name not in _KUBERAY_SCHEDULERS:
        raise ValueError(f"--batch-scheduler: scheduler is not supported, name={name}")
    if enabled or name:
        flag = "--batch-scheduler" if name else "--enable-batch-scheduler"
        raise ValueError(
            f"{flag}: batch scheduler {name or 'volcano'!r} is not integrated in "
            "rayservice-operator (supported: none; pods are scheduled by the default "
            "scheduler without this flag)"
        )


def _flag(field: str) -> str:
    return field.replace("_", "-")


_BOOLEANS = frozenset(
    _flag(name) for name, info in Settings.model_fields.items() if info.annotation is bool
)
_TRUE = frozenset({"1", "t", "true", "yes"})
_FALSE = frozenset({"0", "f", "false", "no"})


def _go_booleans(argv: Sequence[str]) -> list[str]:
    """Go's flag forms, as KubeRay's deployments write them: ``-flag`` as ``--flag``,
    ``--flag=true|false`` as ``--flag`` / ``--no-flag``."""
    out = []
    for arg in argv:
        if arg[:1] == "-" and arg[1:2].isalpha():
            arg = "-" + arg  # Go's -flag
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
    overridden: list[str] = []
    config: configuration.Configuration | None = None
    if settings.config is not None:
        try:
            config = configuration.load(settings.config)
            overridden = _apply(config, settings, args)
        except ValueError as exc:
            return _fail(f"--config {settings.config}: {exc}")
    try:
        log.configure(
            settings.log_format,
            settings.log_level,
            file=settings.log_file_path,
            file_format=settings.log_file_encoder,
        )
    except OSError as exc:
        return _fail(f"--log-file-path {settings.log_file_path}: {exc.strerror or exc}")
    return asyncio.run(_run(settings, config, overridden))


def _apply(
    config: configuration.Configuration, settings: Settings, argv: Sequence[str]
) -> list[str]:
    """Put ``config``'s values in ``settings`` as KubeRay does (they replace the flags',
    except the gates and encoders); the flags given that it replaced."""
    if config.enable_batch_scheduler or config.batch_scheduler:
        _check_batch_scheduler(config.enable_batch_scheduler, config.batch_scheduler)
    replaced = {
        "metrics_bind_address": config.metrics_addr,
        "health_probe_bind_address": config.probe_addr,
        "leader_elect": config.enable_leader_election,
        "leader_election_namespace": config.leader_election_namespace or None,
        "reconcile_concurrency": config.reconcile_concurrency,
        "namespace": config.namespaces(),
        "log_file_path": pathlib.Path(config.log_file) if config.log_file else None,
        "enable_metrics": config.enable_metrics,
        "qps": config.qps,
        "burst": config.burst,
    }
    if "gateway_classes" in config.model_fields_set:  # ours: a KubeRay file has none
        replaced["gateway_classes"] = list(config.gateway_classes)
    given = settings.model_fields_set
    ignored = sorted(
        {f"--{_flag(f)}" for f in replaced if f in given}
        | {f"--{_flag(k)}" for k, ours in _KUBERAY_NAMES.items() if k in given and ours in replaced}
    )
    for field, value in replaced.items():
        setattr(settings, field, value)
    if config.use_kubernetes_proxy:
        settings.dashboard_address_mode = "kubernetes-proxy"
    return ignored


def _report(settings: Settings, overridden: Sequence[str]) -> None:
    """The feature gates (as KubeRay logs them), and one warning per accepted setting that
    does less here than in KubeRay."""
    logger = structlog.get_logger("controllers.main")
    gates = settings.gates()
    logger.info(
        "loaded feature gates", gates=dict(gates.values), not_followed=gates.without_effect()
    )
    if overridden:
        logger.warning("flags ignored: --config replaces them, as in KubeRay", flags=overridden)
    if settings.forced_cluster_upgrade:
        logger.warning("--forced-cluster-upgrade has no effect (deprecated in KubeRay too)")
    classes = settings.classes()
    if gates.enabled("RayServiceIncrementalUpgrade"):
        if classes.every:
            logger.warning(
                "--gateway-classes=*: every RayService author gets a Gateway of any "
                "GatewayClass, created with the operator's rights (KubeRay's behaviour); "
                "list the classes tenants may use instead"
            )
        elif not classes.names:
            logger.info(
                "no GatewayClass is allowed (--gateway-classes): NewClusterWithIncrementalUpgrade "
                "RayServices report GatewayClassNotAllowed until it names their class"
            )
        else:
            logger.info("GatewayClasses allowed", gateway_classes=list(classes.names))


async def _client(settings: Settings) -> client_.Client:
    options = client_.Options(
        name=NAME, user_agent=USER_AGENT, qps=settings.qps or None, burst=settings.burst
    )
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


async def _run(
    settings: Settings,
    config: configuration.Configuration | None = None,
    overridden: Sequence[str] = (),
) -> int:
    try:
        client = await _client(settings)
    except Exception as exc:  # kubeconfig missing, unreadable, or invalid
        return _fail(f"cannot load the kubeconfig: {exc}")
    _report(settings, overridden)
    gateway_api = False
    if settings.gates().enabled("RayServiceIncrementalUpgrade"):
        try:
            gateway_api = await rayservice_setup.gateway_api_served(client)
        except Exception as exc:  # the API server cannot be asked: nothing would run
            return _fail(f"cannot ask the API server for the Gateway API: {exc}")
        if not gateway_api:
            structlog.get_logger("controllers.main").warning(
                "the Gateway API (gateway.networking.k8s.io/v1) is not served: "
                "NewClusterWithIncrementalUpgrade RayServices report GatewayAPIUnavailable"
            )
    mgr = manager.Manager(
        client,
        manager.Options(
            name=NAME,
            namespaces=tuple(dict.fromkeys(settings.namespace)),
            metrics_bind_address=settings.metrics_bind_address,
            health_probe_bind_address=settings.health_probe_bind_address,
            **_metrics_tls(settings),
            leader_election=settings.leader_elect,
            leader_election_id=settings.leader_election_id,
            leader_election_namespace=settings.leader_election_namespace,
            events=controllers.setup.EVENT_OPTIONS,
            cache_by_resource=controllers.setup.cache_by_resource(),
            webhook=webhook_server.Options(
                bind_address=settings.webhook_bind_address, cert_dir=settings.webhook_cert_dir
            ),
        ),
    )
    controllers.setup.setup(
        mgr,
        max_concurrent_reconciles=settings.reconcile_concurrency,
        rayservice_options=_rayservice_options(settings, gateway_api=gateway_api),
        raycluster_options=_raycluster_options(config),
        rayjob_options=_rayjob_options(settings),
        raycronjob=settings.gates().enabled("RayCronJob"),
        enable_metrics=settings.enable_metrics,
    )
    if os.environ.get("ENABLE_WEBHOOKS") == "true":
        paths = webhooks.setup(
            mgr,
            gateway_classes=settings.classes(),
            incremental=settings.gates().enabled("RayServiceIncrementalUpgrade"),
        )
        structlog.get_logger("controllers.main").info(
            "serving validating webhooks", paths=paths, address=settings.webhook_bind_address
        )
    return await manager.serve(mgr)


def _metrics_tls(settings: Settings) -> dict[str, Any]:
    """The manager's secure-metrics options, when ``--metrics-secure``."""
    if not settings.metrics_secure:
        return {}
    path = settings.metrics_cert_path
    return {
        "metrics_secure": True,
        "metrics_cert_dir": None if path is None else str(path),
        "metrics_cert_name": settings.metrics_cert_name,
        "metrics_key_name": settings.metrics_cert_key,
    }


def _rayservice_options(
    settings: Settings, *, gateway_api: bool = False, environ: Mapping[str, str] = os.environ
) -> rayservice_reconciler.Options:
    env = environment.Environment.read(environ)
    return rayservice_reconciler.Options(
        address_mode=settings.dashboard_address_mode,
        cluster_domain=env.cluster_domain,
        serve_poll_max=settings.serve_poll_max,
        zero_downtime=env.zero_downtime,
        gateway_api=gateway_api,
        incremental_upgrade=settings.gates().enabled("RayServiceIncrementalUpgrade"),
        gateway_classes=settings.classes(),
    )


def _rayjob_options(
    settings: Settings, *, environ: Mapping[str, str] = os.environ
) -> rayjob_reconciler.Options:
    """KubeRay's RayJob environment variables and feature gates."""
    env = environment.Environment.read(environ)
    gates = settings.gates()
    return rayjob_reconciler.Options(
        address_mode=settings.dashboard_address_mode,
        plan=rayjob_plan.Options(
            cluster_domain=env.cluster_domain,
            delete_rayjob_after_finish=env.delete_rayjob_after_finish,
            login_shell=env.login_shell,
            transition_grace_period=env.rayjob_grace_period,
            status_check_timeout=env.rayjob_status_check_timeout,
            deletion_policy=gates.enabled("RayJobDeletionPolicy"),
            sidecar_restart=gates.enabled("SidecarSubmitterRestart"),
        ),
    )


def _raycluster_options(
    config: configuration.Configuration | None, *, environ: Mapping[str, str] = os.environ
) -> raycluster_reconciler.Options:
    """KubeRay's environment variables, and the pod defaults of its Configuration file if one
    was given."""
    env = environment.Environment.read(environ)
    defaults = raycluster_pods.PodDefaults()
    if config is not None:
        defaults = raycluster_pods.PodDefaults(
            head_sidecars=tuple(config.head_sidecar_containers),
            worker_sidecars=tuple(config.worker_sidecar_containers),
            env=tuple(config.default_container_envs),
            annotations=config.default_pod_annotations,
            labels=config.default_pod_labels,
        )
    return raycluster_reconciler.Options(
        cluster_domain=env.cluster_domain,
        random_pod_delete=env.random_pod_delete,
        pod_defaults=defaults,
        redis_cleanup=env.redis_cleanup,
    )


if __name__ == "__main__":
    raise SystemExit(main())
