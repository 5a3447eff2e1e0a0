"""``rayservice-manager``: the operator process.

Flags and environment variables (``RAYSERVICE_<FLAG>``, e.g.
``RAYSERVICE_LEADER_ELECT=true``) are read by pydantic-settings; ``--help``
lists them all. A bad flag or value, or a kubeconfig that cannot be read,
exits with status 2 and one line saying what is wrong.

The manager registers every reconciler :func:`controllers.setup` knows
(the RayCluster and RayService reconcilers, as they land), then serves
``/metrics`` and ``/healthz``/``/readyz`` and runs until SIGTERM or SIGINT
(a second signal exits at once). It exits 1 when it fails or loses its
leader Lease (``--leader-elect``), which lives in the pod's own namespace
(``$POD_NAMESPACE``, set by ``config/manager``, else the service account's)
unless ``--leader-election-namespace`` names another.
"""

from __future__ import annotations

import asyncio
import os
import pathlib
import sys
from collections.abc import Sequence
from typing import Literal

from pydantic import Field, ValidationError
from pydantic_settings import BaseSettings, CliApp, SettingsConfigDict, SettingsError

import controllers
from runtime import log, manager
from runtime.client import client as client_

__all__ = ["Settings", "main"]


class Settings(BaseSettings):
    """The manager's configuration."""

    model_config = SettingsConfigDict(
        cli_prog_name="rayservice-manager",
        cli_kebab_case=True,
        cli_implicit_flags=True,
        env_prefix="RAYSERVICE_",
        extra="forbid",
        cli_exit_on_error=False,  # a SettingsError, reported in one line (no usage text)
    )

    kubeconfig: pathlib.Path | None = Field(
        None, description="kubeconfig to use; default $KUBECONFIG, in-cluster, ~/.kube/config"
    )
    namespace: list[str] = Field(
        default_factory=list,
        description="watch only this namespace (repeatable; at most one for now); default all",
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
    qps: float | None = Field(None, gt=0, description="client-side request rate; default off")
    burst: int = Field(10, ge=1, description="client-side burst when --qps is set")
    log_format: Literal["auto", "json", "console"] = Field(
        "auto", description="json in clusters, console on a terminal (auto)"
    )
    log_level: Literal["debug", "info", "warning", "error"] = Field("info")


def _fail(message: str) -> int:
    message = " ".join(message.split())  # one line, also for multi-line library errors
    print(f"rayservice-manager: error: {message}", file=sys.stderr)
    return 2


async def _client(settings: Settings) -> client_.Client:
    options = client_.Options(qps=settings.qps, burst=settings.burst)
    path = settings.kubeconfig or (
        pathlib.Path(os.environ["KUBECONFIG"]) if os.environ.get("KUBECONFIG") else None
    )
    if path is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
        return client_.Client.in_cluster(options=options)
    path = path or pathlib.Path.home() / ".kube" / "config"
    if not path.is_file():
        raise FileNotFoundError(f"kubeconfig {path} does not exist")
    return await client_.Client.from_kubeconfig(path, options=options)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        settings = CliApp.run(Settings, cli_args=list(sys.argv[1:] if argv is None else argv))
    except ValidationError as exc:
        first = exc.errors()[0]
        field = "--" + "-".join(str(p) for p in first["loc"]).replace("_", "-")
        return _fail(f"{field}: {first['msg']}")
    except SettingsError as exc:
        return _fail(str(exc))
    if len(settings.namespace) > 1:
        return _fail("--namespace: watching several namespaces is not supported yet; give one")
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
            namespace=settings.namespace[0] if settings.namespace else None,
            metrics_bind_address=settings.metrics_bind_address,
            health_probe_bind_address=settings.health_probe_bind_address,
            leader_election=settings.leader_elect,
            leader_election_id=settings.leader_election_id,
            leader_election_namespace=settings.leader_election_namespace,
        ),
    )
    controllers.setup(mgr, max_concurrent_reconciles=settings.reconcile_concurrency)
    return await manager.serve(mgr)


if __name__ == "__main__":
    raise SystemExit(main())
