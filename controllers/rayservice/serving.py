"""Serving rules: when a Serve config is (re)submitted to a cluster, and when a head's
Serve proxy must be asked for its health - pure functions of what the dashboard said,
shared by :mod:`controllers.rayservice.observe` (which asks a proxy only when needed)
and :mod:`controllers.rayservice.plan` (which decides the PUT and the label).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from controllers.ray import serve
from controllers.raycluster import interface as raycluster
from controllers.rayservice import clusters

__all__ = ["asks_proxy", "proxy_status", "runs", "submits"]


def submits(
    cluster: Mapping[str, Any],
    details: serve.ServeDetails,
    serve_config: Mapping[str, Any],
    want: str,
) -> bool:
    """Whether ``serve_config`` (its hash ``want``) is to be PUT to ``cluster``: its
    ``serve-config-hash`` is another config's (or absent), or Serve runs no application
    (a restarted head) - unless Serve already runs exactly this config (a PUT made before
    a crash)."""
    have = (cluster["metadata"].get("annotations") or {}).get(clusters.SERVE_CONFIG_ANNOTATION)
    if have == want and details.applications:
        return False
    return not runs(details, serve_config)


def asks_proxy(
    service: Mapping[str, Any], head: Mapping[str, Any], details: serve.ServeDetails
) -> bool:
    """Whether the head's Serve proxy must be asked for its health (``/-/healthz``): not
    when the head is excluded from the serve service (its label is ``false`` anyway),
    nor when Serve reports it ``HEALTHY`` and the label already says so."""
    if (service.get("spec") or {}).get("excludeHeadPodFromServeSvc"):
        return False
    current = (head["metadata"].get("labels") or {}).get(raycluster.SERVE_LABEL)
    reported = proxy_status(details, (head.get("status") or {}).get("podIP"))
    return not (reported == "HEALTHY" and current == "true")


def runs(details: serve.ServeDetails, config: Mapping[str, Any]) -> bool:
    """Whether Serve already runs exactly ``config``'s applications (a PUT made before a
    crash, whose annotation was never written): the same application names, and every
    field the config sets equal in what Serve reports as deployed (Serve may add its
    defaults, such as ``route_prefix: /``)."""
    wanted = {str(a.get("name") or "default"): a for a in config.get("applications") or ()}
    deployed: dict[str, Mapping[str, Any]] = {}
    for name, app in details.applications.items():
        reported = (app.model_extra or {}).get("deployed_app_config")
        deployed[name] = reported if isinstance(reported, Mapping) else {}
    if not wanted or set(wanted) != set(deployed):
        return False
    return all(
        all(deployed[name].get(key) == value for key, value in app.items())
        for name, app in wanted.items()
    )


def proxy_status(details: serve.ServeDetails, ip: str | None) -> str | None:
    """What Serve reports of the proxy on the node at ``ip`` (``HEALTHY``...), if anything."""
    proxies = (details.model_extra or {}).get("proxies") or {}
    for proxy in proxies.values():
        if isinstance(proxy, Mapping) and ip and proxy.get("node_ip") == ip:
            value = proxy.get("status")
            return str(value) if value is not None else None
    return None
