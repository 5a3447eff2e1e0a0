"""SecretSync against a real API server, with the framework's test kit: the operator
runs in the background (``kube_manager``) while each test acts as a user would."""

from __future__ import annotations

import asyncio
import base64
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

import runtime
from examples.secretsync import secretsync
from runtime.testing import pytest_plugin

# The first test of a session may build and start the control plane: more than the
# default per-test bound (pyproject's pytest-timeout setting) on a cold cache.
pytestmark = [pytest.mark.usefixtures("secretsync_crd"), pytest.mark.timeout(300)]

SECRETS = secretsync.SECRETS
SYNCS = secretsync.SECRETSYNCS


async def eventually(probe: Callable[[], Awaitable[Any]], within: float = 20.0) -> Any:
    """``probe()``'s first truthy answer; fails the test after ``within`` seconds."""
    deadline = asyncio.get_running_loop().time() + within
    while not (answer := await probe()):
        if asyncio.get_running_loop().time() > deadline:
            pytest.fail(f"not within {within} s: {probe.__doc__ or probe}")
        await asyncio.sleep(0.1)
    return answer


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def secret(namespace: str, name: str, password: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
        "metadata": {"namespace": namespace, "name": name},
        "data": {"password": b64(password)},
    }  # fmt: skip


def secret_sync(namespace: str, name: str, targets: list[str]) -> dict[str, Any]:
    return {
        "apiVersion": "sync.example.com/v1alpha1", "kind": "SecretSync",
        "metadata": {"namespace": namespace, "name": name},
        "spec": {"targetNamespaces": targets},
    }  # fmt: skip


@pytest.fixture
async def targets(kube_client: runtime.client.Client) -> AsyncIterator[list[str]]:
    """Two more namespaces for the copies."""
    names = [f"target-{secrets.token_hex(4)}" for _ in range(2)]
    for name in names:
        ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
        await kube_client.create(ns)
    yield names
    namespaces = kube_client.registry.for_kind("v1", "Namespace")
    for name in names:
        await kube_client.delete(namespaces, None, name)


@pytest.fixture
def client(kube_client: runtime.client.Client) -> runtime.client.Client:
    kube_client.registry.register(SYNCS)
    return kube_client


def status_writes(outcome: str) -> float:
    """The status writer's count of SecretSync writes with ``outcome`` (this process)."""
    labels = {"kind": "SecretSync", "outcome": outcome}
    value = runtime.metrics.registry.get_sample_value("status_writes_total", labels)
    return value or 0.0


async def copy_of(client: runtime.client.Client, namespace: str, name: str) -> Any:
    try:
        return await client.get(SECRETS, namespace, name)
    except runtime.client.NotFound:
        return None


def condition(sync: dict[str, Any]) -> Any:
    """The Ready condition, which the test expects to be there."""
    found = secretsync.ready_condition(sync)
    assert found is not None, sync.get("status")
    return found


async def ready(client: runtime.client.Client, namespace: str, name: str, reason: str) -> Any:
    """The SecretSync once its Ready condition has ``reason`` for its generation."""
    sync = await client.get(SYNCS, namespace, name)
    condition = secretsync.ready_condition(sync)
    if condition is None or condition["reason"] != reason:
        return None
    if condition["observedGeneration"] != sync["metadata"]["generation"]:
        return None
    return sync


async def test_copies_into_every_target_and_reports_ready(
    kube_manager: pytest_plugin.ManagerFactory,
    client: runtime.client.Client,
    kube_namespace: str,
    targets: list[str],
) -> None:
    await client.create(secret(kube_namespace, "db", "hunter2"))
    async with kube_manager(secretsync.build, namespace=None):
        await client.create(secret_sync(kube_namespace, "db", targets))
        sync = await eventually(lambda: ready(client, kube_namespace, "db", "Synced"))
        for target in targets:
            copied = await client.get(SECRETS, target, "db")
            assert copied["data"] == {"password": b64("hunter2")}
            labels = copied["metadata"]["labels"]
            assert labels[secretsync.SOURCE_NAMESPACE] == kube_namespace
        assert sync["status"]["syncedNamespaces"] == sorted(targets)
        assert condition(sync)["status"] == "True"
        assert secretsync.FINALIZER in sync["metadata"]["finalizers"]


async def test_a_changed_source_is_copied_again(
    kube_manager: pytest_plugin.ManagerFactory,
    client: runtime.client.Client,
    kube_namespace: str,
    targets: list[str],
) -> None:
    await client.create(secret(kube_namespace, "db", "hunter2"))
    await client.create(secret_sync(kube_namespace, "db", targets))
    async with kube_manager(secretsync.build, namespace=None):
        await eventually(lambda: ready(client, kube_namespace, "db", "Synced"))
        source = await client.get(SECRETS, kube_namespace, "db")
        source["data"] = {"password": b64("correct horse")}
        await client.update(source)

        async def all_changed() -> bool:
            copies = [await copy_of(client, t, "db") for t in targets]
            return all(c["data"]["password"] == b64("correct horse") for c in copies)

        await eventually(all_changed)


async def test_a_missing_source_is_reported_until_it_appears(
    kube_manager: pytest_plugin.ManagerFactory,
    client: runtime.client.Client,
    kube_namespace: str,
    targets: list[str],
) -> None:
    async with kube_manager(secretsync.build, namespace=None):
        await client.create(secret_sync(kube_namespace, "db", targets))
        sync = await eventually(lambda: ready(client, kube_namespace, "db", "SourceNotFound"))
        assert condition(sync)["status"] == "False"
        assert await copy_of(client, targets[0], "db") is None
        await client.create(secret(kube_namespace, "db", "hunter2"))
        sync = await eventually(lambda: ready(client, kube_namespace, "db", "Synced"))
        # The condition moved from False to True: its transition time moved with it.
        assert sync["status"]["syncedNamespaces"] == sorted(targets)


async def test_a_missing_target_namespace_is_reported(
    kube_manager: pytest_plugin.ManagerFactory,
    client: runtime.client.Client,
    kube_namespace: str,
    targets: list[str],
) -> None:
    await client.create(secret(kube_namespace, "db", "hunter2"))
    absent = f"absent-{secrets.token_hex(4)}"
    async with kube_manager(secretsync.build, namespace=None):
        await client.create(secret_sync(kube_namespace, "db", [targets[0], absent]))
        sync = await eventually(
            lambda: ready(client, kube_namespace, "db", "TargetNamespaceNotFound")
        )
        assert absent in condition(sync)["message"]
        assert sync["status"]["syncedNamespaces"] == [targets[0]]


async def test_a_target_dropped_from_the_spec_loses_its_copy(
    kube_manager: pytest_plugin.ManagerFactory,
    client: runtime.client.Client,
    kube_namespace: str,
    targets: list[str],
) -> None:
    await client.create(secret(kube_namespace, "db", "hunter2"))
    await client.create(secret_sync(kube_namespace, "db", targets))
    async with kube_manager(secretsync.build, namespace=None):
        await eventually(lambda: ready(client, kube_namespace, "db", "Synced"))
        sync = await client.get(SYNCS, kube_namespace, "db")
        sync["spec"]["targetNamespaces"] = targets[:1]
        await client.update(sync)

        async def dropped() -> bool:
            return await copy_of(client, targets[1], "db") is None

        await eventually(dropped)
        assert await copy_of(client, targets[0], "db") is not None


async def test_deleting_it_removes_the_copies_first(
    kube_manager: pytest_plugin.ManagerFactory,
    client: runtime.client.Client,
    kube_namespace: str,
    targets: list[str],
) -> None:
    await client.create(secret(kube_namespace, "db", "hunter2"))
    await client.create(secret_sync(kube_namespace, "db", targets))
    async with kube_manager(secretsync.build, namespace=None):
        await eventually(lambda: ready(client, kube_namespace, "db", "Synced"))
        await client.delete(SYNCS, kube_namespace, "db")

        async def gone() -> bool:
            """the SecretSync and its copies are gone"""
            sync = await copy_of(client, kube_namespace, "db")  # the source stays
            assert sync is not None
            try:
                await client.get(SYNCS, kube_namespace, "db")
            except runtime.client.NotFound:
                return all([await copy_of(client, t, "db") is None for t in targets])
            return False

        await eventually(gone)


async def test_a_pass_that_changes_nothing_writes_no_status(
    kube_manager: pytest_plugin.ManagerFactory,
    client: runtime.client.Client,
    kube_namespace: str,
    targets: list[str],
) -> None:
    await client.create(secret(kube_namespace, "db", "hunter2"))
    await client.create(secret_sync(kube_namespace, "db", targets))
    async with kube_manager(secretsync.build, namespace=None):
        synced = await eventually(lambda: ready(client, kube_namespace, "db", "Synced"))
        skipped = status_writes("skipped")
        # Wake it a few times with changes that do not matter to it (a label on the source).
        for i in range(3):
            source = await client.get(SECRETS, kube_namespace, "db")
            source["metadata"].setdefault("labels", {})["touched"] = str(i)
            await client.update(source)

        async def woken() -> bool:
            """three more passes, each with a status write skipped"""
            return status_writes("skipped") >= skipped + 3

        await eventually(woken)
        now = await client.get(SYNCS, kube_namespace, "db")
        assert now["metadata"]["resourceVersion"] == synced["metadata"]["resourceVersion"]
