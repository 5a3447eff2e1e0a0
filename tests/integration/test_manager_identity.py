"""Two operators on the framework in one namespace, each with only its name set: each
leads its own Lease, and the API server knows them apart (``managedFields``, Events)."""

from __future__ import annotations

import asyncio

import runtime
from runtime.client import client as client_
from runtime.client import resources
from runtime.testing import controlplane
from tests.integration import helpers

LEASES = resources.Resource("coordination.k8s.io", "v1", "Lease", "leases")
EVENTS = resources.default_registry.for_kind("v1", "Event")


async def test_two_operators_in_one_namespace_each_lead_their_own_lease(
    control_plane: controlplane.ControlPlane, client: client_.Client, namespace: str
) -> None:
    assert control_plane.kubeconfig is not None
    subject = await client.create(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "subject"}},
        namespace=namespace,
    )
    names = ("alpha-operator", "beta-operator")
    clients, managers, leading, tasks = [], [], [], []
    stop = asyncio.Event()
    try:
        for name in names:
            # Clients made without a name: each manager names its own.
            own = await client_.Client.from_kubeconfig(control_plane.kubeconfig)
            clients.append(own)
            mgr = runtime.Manager(own, runtime.ManagerOptions(
                name=name, namespace=namespace, leader_election=True,
                leader_election_namespace=namespace, metrics_bind_address="0",
                health_probe_bind_address="0", lease_duration=2, renew_deadline=1.5,
                retry_period=0.2,
            ))  # fmt: skip
            managers.append(mgr)
            leading.append(helpers.Leading())
            mgr.add(leading[-1])
            tasks.append(asyncio.create_task(mgr.start(stop)))
        await asyncio.wait_for(asyncio.gather(*(r.running.wait() for r in leading)), 30)
        for name, mgr in zip(names, managers, strict=True):
            mgr.events.event(subject, "Normal", "Hello", f"from {name}")

        for name, mgr in zip(names, managers, strict=True):
            lease = await client.get(LEASES, namespace, f"{name}-leader")
            assert mgr.elector is not None
            assert lease["spec"]["holderIdentity"] == mgr.elector.options.identity
            writers = {entry["manager"] for entry in lease["metadata"]["managedFields"]}
            assert writers == {name}, f"the Lease of {name} was written as {writers}"

        async def sources() -> dict[str, str]:
            found = (await client.list(EVENTS, namespace)).items
            return {e["message"]: e["source"]["component"] for e in found if e["reason"] == "Hello"}

        deadline = asyncio.get_running_loop().time() + 20
        while len(seen := await sources()) < 2:
            assert asyncio.get_running_loop().time() < deadline, f"Events seen: {seen}"
            await asyncio.sleep(0.2)
        assert seen == {f"from {name}": name for name in names}
    finally:
        stop.set()
        await asyncio.wait(tasks, timeout=30)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for own in clients:
            await own.close()
    assert [t.exception() for t in tasks if not t.cancelled()] == [None, None]
