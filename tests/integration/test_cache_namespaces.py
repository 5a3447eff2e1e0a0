"""A cache over several namespaces against the real API server, and the namespaced RBAC
overlay (config/overlays/namespaced) as the only permissions of the manager's account."""

from __future__ import annotations

import asyncio
import json
import pathlib
import secrets
from collections.abc import Iterator
from typing import Any

import pytest

from controllers import rbac
from runtime import metrics
from runtime.cache import cache as cache_
from runtime.cache import store as store_
from runtime.client import client as client_
from runtime.client import errors, resources
from runtime.testing import controlplane
from tests.integration import helpers
from tests.unit import helpers as unit_helpers

ROOT = pathlib.Path(__file__).parents[2]
PODS = resources.default_registry.for_kind("v1", "Pod")
SERVICES = resources.default_registry.for_kind("v1", "Service")
ROLES = resources.default_registry.for_kind("rbac.authorization.k8s.io/v1", "Role")


gen = unit_helpers.load_script("hack/gen_rbac_overlay.py")


@pytest.fixture
def namespaces(control_plane: controlplane.ControlPlane) -> Iterator[list[str]]:
    """Three fresh namespaces: the cache watches the first two, never the third."""
    suffix = secrets.token_hex(3)
    names = [f"ns-{suffix}-{x}" for x in ("a", "b", "c")]
    for name in names:
        control_plane.request("POST", "/api/v1/namespaces", {
            "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})  # fmt: skip
    yield names
    for name in names:
        control_plane.request("DELETE", f"/api/v1/namespaces/{name}")


def widget(name: str, namespace: str) -> dict[str, Any]:
    return {"apiVersion": "test.rayservice.dev/v1", "kind": "Widget",
            "metadata": {"name": name, "namespace": namespace}, "spec": {"size": 1}}  # fmt: skip


def cluster_wide_widget_lists(control_plane: controlplane.ControlPlane) -> float:
    """Cluster-wide LISTs of widgets the apiserver served (its own ``/metrics``)."""
    total = 0.0
    for line in control_plane.metrics().splitlines():
        if (
            line.startswith("apiserver_request_total{")
            and 'resource="widgets"' in line
            and 'scope="cluster"' in line
            and 'verb="LIST"' in line
        ):
            total += float(line.rpartition(" ")[2])
    return total


async def test_the_cache_serves_exactly_its_namespaces(
    control_plane: controlplane.ControlPlane, client: client_.Client, namespaces: list[str]
) -> None:
    a, b, c = namespaces
    other = await client_.Client.from_kubeconfig(control_plane.kubeconfig)  # not written through
    other.registry.register(helpers.WIDGETS)
    for ns in namespaces:
        await other.create(widget("early", ns))
    asked: list[tuple[str, str, str | None]] = []
    real_list, real_watch = client.list, client.watch

    async def list_(resource: resources.Resource, namespace: str | None = None,
                    **kwargs: Any) -> Any:  # fmt: skip
        asked.append(("list", str(resource), namespace))
        return await real_list(resource, namespace, **kwargs)

    def watch(resource: resources.Resource, namespace: str | None = None, **kwargs: Any) -> Any:
        asked.append(("watch", str(resource), namespace))
        return real_watch(resource, namespace, **kwargs)

    client.list = list_  # type: ignore[method-assign]
    client.watch = watch  # type: ignore[method-assign]
    cluster_lists_before = cluster_wide_widget_lists(control_plane)
    cache = cache_.Cache(client, namespaces=[a, b], debug=True)
    informer = cache.informer(helpers.WIDGETS)
    seen: list[tuple[str, str]] = []
    informer.add_handler(lambda e: seen.append((e.type, store_.key_for(e.obj))))
    try:
        await cache.start()
        await asyncio.wait_for(cache.wait_for_sync(), 30)
        assert sorted(store_.key_for(o) for o in await cache.list(helpers.WIDGETS)) == [
            f"{a}/early", f"{b}/early"]  # fmt: skip
        await other.create(widget("late", c))
        await other.create(widget("late", b))
        await other.create(widget("marker", a))  # created after c's late one
        await helpers.eventually(lambda: f"{a}/marker" in informer.store, 30, "the marker")
        await helpers.eventually(lambda: f"{b}/late" in informer.store, 30, "b's late widget")
        assert not [o for o in informer.store.list() if o["metadata"]["namespace"] == c]
        assert not [k for _, k in seen if k.startswith(f"{c}/")], "no event from c"
        assert sorted(seen) == sorted(
            ("add", f"{ns}/{name}")
            for ns, name in [(a, "early"), (b, "early"), (b, "late"), (a, "marker")]
        ), "each namespace's events once"
        with pytest.raises(cache_.NamespaceNotWatched):
            await cache.get(helpers.WIDGETS, c, "early")
        ours = await client.create(widget("ours", b))  # write-through into b's part
        assert (await cache.get(helpers.WIDGETS, b, "ours"))["metadata"]["uid"] == ours["metadata"][
            "uid"
        ]
        await client.delete(helpers.WIDGETS, a, "early")  # delete write-through: gone at once
        with pytest.raises(errors.NotFound):
            await cache.get(helpers.WIDGETS, a, "early")
        widget_requests = sorted({r for r in asked if r[1] == str(helpers.WIDGETS)})
        assert widget_requests == sorted(
            (verb, str(helpers.WIDGETS), ns) for verb in ("list", "watch") for ns in (a, b)
        ), "one list and watches per watched namespace, never cluster-wide"
        assert cluster_wide_widget_lists(control_plane) == cluster_lists_before, (
            "the apiserver served no cluster-wide list of widgets"
        )
    finally:
        await cache.stop()
        await other.close()


def _reflector_errors(resource: resources.Resource) -> float:
    value = metrics.registry.get_sample_value("reflector_errors_total", {"resource": str(resource)})
    return value or 0.0


async def _account_client(
    control_plane: controlplane.ControlPlane, namespace: str, account: str, tmp: pathlib.Path
) -> client_.Client:
    """A client authenticated as the ServiceAccount (a bound token from the TokenRequest API)."""
    token = control_plane.request(
        "POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
         "spec": {"expirationSeconds": 3600}},
    )["status"]["token"]  # fmt: skip
    assert control_plane.kubeconfig is not None
    config = json.loads(control_plane.kubeconfig.read_text())
    config["users"] = [{"name": "admin", "user": {"token": token}}]
    path = tmp / "account.kubeconfig"
    path.write_text(json.dumps(config))
    path.chmod(0o600)
    return await client_.Client.from_kubeconfig(path)


async def test_the_overlays_roles_are_all_a_namespaced_manager_needs(
    control_plane: controlplane.ControlPlane, client: client_.Client, namespaces: list[str],
    namespace: str, tmp_path: pathlib.Path,
) -> None:  # fmt: skip
    a, b, c = namespaces
    account = "rayservice-operator-manager"
    await client.create({"apiVersion": "v1", "kind": "ServiceAccount",
                         "metadata": {"name": account, "namespace": namespace}})  # fmt: skip
    for obj in gen.manifests([a, b], (account, namespace)):  # exactly the overlay's objects
        await client.create(obj)
    for ns in namespaces:
        await client.create({"apiVersion": "v1", "kind": "Service",
                             "metadata": {"name": "svc", "namespace": ns},
                             "spec": {"ports": [{"port": 80}]}})  # fmt: skip
    restricted = await _account_client(control_plane, namespace, account, tmp_path)
    cache = cache_.Cache(restricted, namespaces=[a, b])
    everywhere = cache_.Cache(restricted)
    try:
        # Every request of a namespaced cache is allowed by the Roles, so it syncs ...
        services = await asyncio.wait_for(cache.list(SERVICES), 30)
        assert sorted(s["metadata"]["namespace"] for s in services) == [a, b]
        assert await asyncio.wait_for(cache.list(PODS), 30) == []
        # ... while a cluster-wide list+watch is refused: the account has no ClusterRole.
        errors_before = _reflector_errors(PODS)
        pods_everywhere = everywhere.informer(PODS)
        pods_everywhere.start()
        await helpers.eventually(
            lambda: _reflector_errors(PODS) > errors_before, 30, "the cluster-wide list refused"
        )
        assert not pods_everywhere.has_synced()
        with pytest.raises(errors.Forbidden):
            await restricted.list(SERVICES, c)
        # The RayCluster reconciler creates the autoscaler's Role: RBAC lets the account
        # grant only what it holds, and it holds it in a and b, not in c.
        autoscaler = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                      "metadata": {"name": "autoscaler"},
                      "rules": [{"apiGroups": [""], "resources": ["pods"],
                                 "verbs": ["get", "list", "watch", "patch"]},
                                {"apiGroups": [""], "resources": ["pods/resize"],
                                 "verbs": ["patch"]},
                                {"apiGroups": ["ray.io"], "resources": ["rayclusters"],
                                 "verbs": ["get", "patch"]}]}  # fmt: skip
        created = await restricted.create(autoscaler, namespace=a)
        assert created["metadata"]["namespace"] == a
        with pytest.raises(errors.Forbidden):
            await restricted.create(autoscaler, namespace=c)
        role = await client.get(ROLES, b, rbac.ROLE_NAME)
        assert role["rules"] == rbac.merge(
            rule for rules in rbac.DECLARATIONS.values() for rule in rules
        )
    finally:
        await cache.stop()
        await everywhere.stop()
        await restricted.close()
