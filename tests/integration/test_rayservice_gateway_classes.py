"""No tenant gets a Gateway they could not create themselves: on the real control plane
(the Gateway API's CRDs installed, the manager in this process), a RayService upgraded
with ``NewClusterWithIncrementalUpgrade`` through a GatewayClass the operator does not
allow (``--gateway-classes``, none by default) gets ``Ready=False`` with reason
``GatewayClassNotAllowed`` naming the flag and one Warning Event; no Gateway and no
RayCluster is created, and nothing is retried in a loop. The same RayService, untouched,
gets its Gateway of that class once the operator restarts with the class allowed.
"""

from __future__ import annotations

import asyncio
import pathlib
from typing import Any

import pytest

import api.v1 as v1
from controllers.rayservice import gateway as gateway_objects
from runtime.client import client as client_
from runtime.client import errors
from runtime.testing import controlplane
from tests.integration import helpers
from tests.integration import rayservice_harness as h
from tests.support import gateway

ROOT = pathlib.Path(__file__).parents[2]
CLASS = "public-lb"
OPTIONS = {"maxSurgePercent": 50, "stepSizePercent": 25, "intervalSeconds": 10,
           "gatewayClassName": CLASS}  # fmt: skip


@pytest.fixture(scope="module", autouse=True)
def crds(control_plane: controlplane.ControlPlane) -> list[str]:
    return control_plane.install_crds(ROOT / "config/crd/bases") + control_plane.install_crds(
        gateway.crd_dir()
    )


@pytest.fixture(autouse=True)
def ray_kinds(client: client_.Client) -> None:
    v1.add_to_registry(client.registry)


def incremental() -> h.Obj:
    obj = h.rayservice_obj(
        upgradeStrategy={"type": "NewClusterWithIncrementalUpgrade",
                         "clusterUpgradeOptions": OPTIONS},
    )  # fmt: skip
    obj["spec"]["rayClusterConfig"]["enableInTreeAutoscaling"] = True
    return obj


def not_allowed(obj: h.Obj) -> bool:
    cond = h.condition(obj, "Ready")
    return bool(cond and (cond["status"], cond["reason"]) == ("False", "GatewayClassNotAllowed"))


async def the_gateway(client: client_.Client, namespace: str) -> dict[str, Any] | None:
    try:
        found: dict[str, Any] = await client.get(
            gateway_objects.GATEWAYS, namespace, gateway_objects.gateway_name("demo")
        )
    except errors.NotFound:
        return None
    return found


async def warnings(client: client_.Client, namespace: str) -> list[h.Obj]:
    return [e for e in (await client.list(h.EVENTS, namespace)).items
            if e["involvedObject"]["name"] == "demo" and e["type"] == "Warning"]  # fmt: skip


async def test_a_class_not_allowed_gets_no_gateway_until_the_operator_allows_it(
    control_plane: controlplane.ControlPlane, client: client_.Client, namespace: str
) -> None:
    async with h.manager_running(
        control_plane, namespace, rayservice={"gateway_api": True}
    ):  # the default: no class allowed
        await client.create(incremental(), namespace=namespace)
        obj = await h.wait_for(client, namespace, not_allowed, 30, "GatewayClassNotAllowed")
        message = h.condition(obj, "Ready")["message"]  # type: ignore[index]
        assert f"gatewayClassName {CLASS!r} is not allowed by the operator" in message, message
        assert f"--gateway-classes={CLASS}" in message, message

        async def warned() -> list[h.Obj]:
            return await warnings(client, namespace)

        (warning,) = await helpers.eventually(warned, 10, "the Warning Event")
        assert warning["reason"] == "GatewayClassNotAllowed"
        version = obj["metadata"]["resourceVersion"]
        await asyncio.sleep(4)  # a retrying reconciler would write or create meanwhile
        assert (await h.get_service(client, namespace))["metadata"]["resourceVersion"] == version
        assert await the_gateway(client, namespace) is None
        assert await h.all_clusters(client, namespace) == []
        again = await warnings(client, namespace)
        assert [e.get("count", 1) for e in again] == [warning.get("count", 1)]

    allowed = gateway_objects.GatewayClasses.parse([CLASS])
    async with h.manager_running(
        control_plane, namespace, rayservice={"gateway_api": True, "gateway_classes": allowed}
    ):

        async def made() -> dict[str, Any] | None:
            return await the_gateway(client, namespace)

        gw = await helpers.eventually(made, 30, "the Gateway once its class is allowed")
        assert gw["spec"]["gatewayClassName"] == CLASS
        service = await h.get_service(client, namespace)
        (owner,) = gw["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["uid"], owner["controller"]) == (
            "RayService", service["metadata"]["uid"], True
        )  # fmt: skip
        await h.wait_for(client, namespace, lambda o: not not_allowed(o), 30, "the refusal gone")
        assert len(await h.all_clusters(client, namespace)) == 1
