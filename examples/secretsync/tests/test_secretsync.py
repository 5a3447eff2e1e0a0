"""SecretSync against a real API server, with the framework's test kit: the operator
runs in the background (``kube_manager``) while each test acts as a user would.

The last tests run it with its webhooks: the manager serves them on loopback with a
self-signed CA, which it injects into ``config/webhook.yaml``'s configurations
(installed per test, named after and matching only the test's namespace)."""

from __future__ import annotations

import base64
import contextlib
import functools
import pathlib
import secrets
from collections.abc import AsyncIterator
from typing import Any

import pytest
import yaml

import runtime
from examples.secretsync import secretsync
from runtime import testing
from runtime.testing import controlplane, pytest_plugin, runner

# The first test of a session may build and start the control plane: more than the
# default per-test bound (pyproject's pytest-timeout setting) on a cold cache.
pytestmark = [pytest.mark.usefixtures("secretsync_crd"), pytest.mark.timeout(300)]

SECRETS = secretsync.SECRETS
SYNCS = secretsync.SECRETSYNCS

eventually = testing.eventually
"""The kit's :func:`runtime.testing.eventually`."""


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
    namespaces = runtime.client.builtin("Namespace")
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
    found = runtime.conditions.of(sync, "Ready")
    assert found is not None, sync.get("status")
    return found


async def ready(client: runtime.client.Client, namespace: str, name: str, reason: str) -> Any:
    """The SecretSync once its Ready condition has ``reason`` for its generation."""
    sync = await client.get(SYNCS, namespace, name)
    condition = runtime.conditions.of(sync, "Ready")
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
            try:
                await client.get(SYNCS, kube_namespace, "db")
            except runtime.client.NotFound:
                return all([await copy_of(client, t, "db") is None for t in targets])
            return False

        await eventually(gone)
        assert await copy_of(client, kube_namespace, "db") is not None  # the source stays


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


WEBHOOK_CONFIG = pathlib.Path(secretsync.__file__).parent / "config" / "webhook.yaml"
ADMISSION = runtime.webhook.cainject
WEBHOOK_UP = 30.0
"""Seconds the API server may take to call a newly installed webhook successfully (it
finds the configuration through a watch, and the CA must be injected): more than
:func:`runtime.testing.eventually`'s default 10 s."""


def webhook_configurations(namespace: str, port: int) -> list[dict[str, Any]]:
    """``config/webhook.yaml`` as a test installs it: named after ``namespace``, called
    only for it (a configuration left behind cannot refuse another test's objects),
    its URLs on ``port``."""
    docs = [doc for doc in yaml.safe_load_all(WEBHOOK_CONFIG.read_text()) if doc]
    for doc in docs:
        doc["metadata"]["name"] = f"secretsync-{namespace}"
        for hook in doc["webhooks"]:
            url = hook["clientConfig"]["url"]
            assert url.startswith("https://127.0.0.1:9443/"), url
            hook["clientConfig"]["url"] = url.replace(":9443/", f":{port}/")
            hook["namespaceSelector"] = {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
    assert [doc["kind"] for doc in docs] == [
        "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"
    ]  # fmt: skip
    return docs


@contextlib.asynccontextmanager
async def with_webhooks(
    kube_manager: pytest_plugin.ManagerFactory,
    client: runtime.client.Client,
    namespace: str,
    cert_dir: pathlib.Path,
) -> AsyncIterator[runner.Running]:
    """The configurations installed, then the operator with its webhooks, serving on a
    free loopback port; both removed afterwards."""
    [port] = controlplane.free_ports(1)
    configurations = webhook_configurations(namespace, port)
    name = configurations[0]["metadata"]["name"]
    for resource in (ADMISSION.MUTATING, ADMISSION.VALIDATING):
        client.registry.register(resource)
    for configuration in configurations:
        await client.create(configuration)
    options = runtime.webhook.server.Options(
        bind_address=f"127.0.0.1:{port}",
        cert_dir=cert_dir,
        self_signed=runtime.webhook.server.SelfSigned(
            ip_addresses=["127.0.0.1"],
            validating_configurations=[name],
            mutating_configurations=[name],
        ),
    )
    try:
        setup = functools.partial(secretsync.build, webhooks=True)
        async with kube_manager(setup, namespace=None, webhook=options) as run:
            yield run
    finally:
        for resource in (ADMISSION.MUTATING, ADMISSION.VALIDATING):
            await client.delete(resource, None, name)


async def dry_run_create(client: runtime.client.Client, obj: dict[str, Any]) -> Any:
    """Create ``obj`` with ``dryRun=All``: admitted (and defaulted), never stored."""
    path = SYNCS.path(obj["metadata"]["namespace"])
    return await client.request("POST", path, query={"dryRun": "All"}, body=obj)


async def refusal(client: runtime.client.Client, obj: dict[str, Any]) -> str | None:
    """The message refusing ``obj`` once our webhook is the one refusing it; ``None``
    before (the API server picks new webhook configurations up from a watch, and calls
    fail until the CA is injected)."""
    try:
        await dry_run_create(client, obj)
    except runtime.client.ApiError as exc:
        if "admission webhook" in exc.message and "denied the request" in exc.message:
            return exc.message
    return None


async def test_the_webhook_refuses_an_invalid_secretsync_with_its_message(
    kube_manager: pytest_plugin.ManagerFactory,
    client: runtime.client.Client,
    kube_namespace: str,
    targets: list[str],
    tmp_path: pathlib.Path,
) -> None:
    async with with_webhooks(kube_manager, client, kube_namespace, tmp_path):
        own = secret_sync(kube_namespace, "db", [targets[0], kube_namespace])
        message = await eventually(lambda: refusal(client, own), within=WEBHOOK_UP)
        assert message == (
            'admission webhook "validate.secretsync.sync.example.com" denied the request: '
            f"spec.targetNamespaces: {kube_namespace} is the SecretSync's own namespace, "
            "where the source Secret db is"
        )
        with pytest.raises(runtime.client.Invalid) as refused:  # HTTP 422, as we answered
            await client.create(own)
        assert refused.value.message == message
        # What the schema can say, it says itself: no name that is not a DNS label.
        with pytest.raises(runtime.client.Invalid) as refused:
            await client.create(secret_sync(kube_namespace, "db", ["Not_A_Label"]))
        assert "spec.targetNamespaces[0]" in refused.value.message
        assert "admission webhook" not in refused.value.message
        # A namespace that a SecretSync db elsewhere copies into already is refused
        # (that one is not checked: the webhooks match the test's namespace only).
        await client.create(secret_sync(targets[1], "db", [targets[0]]))
        with pytest.raises(runtime.client.Invalid) as refused:
            await client.create(secret_sync(kube_namespace, "db", targets[:1]))
        assert refused.value.message.endswith(
            f"spec.targetNamespaces: SecretSync {targets[1]}/db already copies Secret db "
            f"into {targets[0]}"
        )


async def test_a_valid_secretsync_is_defaulted_admitted_and_reconciled(
    kube_manager: pytest_plugin.ManagerFactory,
    client: runtime.client.Client,
    kube_namespace: str,
    targets: list[str],
    tmp_path: pathlib.Path,
) -> None:
    await client.create(secret(kube_namespace, "db", "hunter2"))
    unsorted = sorted(targets, reverse=True)
    obj = secret_sync(kube_namespace, "db", unsorted)

    async def defaulted() -> bool:
        """a dry-run create comes back defaulted: the mutating webhook is called"""
        try:
            answer = await dry_run_create(client, obj)
        except runtime.client.ApiError:
            return False  # not called successfully yet (the CA, the watch)
        return bool(answer["spec"]["targetNamespaces"] == sorted(targets))

    async with with_webhooks(kube_manager, client, kube_namespace, tmp_path) as run:
        await eventually(defaulted, within=WEBHOOK_UP)
        created = await client.create(obj)
        assert created["spec"]["targetNamespaces"] == sorted(targets)
        sync = await eventually(lambda: ready(client, kube_namespace, "db", "Synced"))
        assert sync["status"]["syncedNamespaces"] == sorted(targets)
        # The same set in another order is the same spec: no new generation.
        sync["spec"]["targetNamespaces"] = unsorted
        updated = await client.update(sync)
        assert updated["metadata"]["generation"] == created["metadata"]["generation"]
        calls = runtime.metrics.registry.get_sample_value(
            "controller_runtime_webhook_requests_total",
            {"webhook": "/validate-sync-example-com-v1alpha1-secretsync", "code": "200"},
        )
        assert calls is not None
        assert calls >= 2  # the dry runs and the create, at least
        assert run.manager.webhook_server.ca_bundle == (tmp_path / "ca.crt").read_bytes()
        # A SecretSync db elsewhere takes a target since (the webhooks do not see it):
        # the finalizer's removal, an update, still goes through, and the delete ends.
        await client.create(secret_sync(targets[1], "db", [targets[0]]))
        await client.delete(SYNCS, kube_namespace, "db")

        async def deleted() -> bool:
            """the SecretSync is gone"""
            try:
                await client.get(SYNCS, kube_namespace, "db")
            except runtime.client.NotFound:
                return True
            return False

        await eventually(deleted)
