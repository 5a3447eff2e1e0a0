"""The SecretSync webhooks' rules, on the framework's in-memory API server (no server,
no network): each rule refuses what it is for and lets the rest through."""

from __future__ import annotations

import pathlib
from typing import Any

import pytest
import yaml

import runtime
from examples import secretsync as package
from examples.secretsync import __main__ as main
from examples.secretsync import secretsync, webhooks
from runtime.testing import fake

admission = runtime.webhook.admission


def secret_sync(namespace: str, name: str, targets: list[str]) -> dict[str, Any]:
    return {
        "apiVersion": "sync.example.com/v1alpha1", "kind": "SecretSync",
        "metadata": {"namespace": namespace, "name": name},
        "spec": {"targetNamespaces": targets},
    }  # fmt: skip


def secret(namespace: str, name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
        "metadata": {"namespace": namespace, "name": name, "labels": labels or {}},
        "data": {"password": "aHVudGVyMg=="},
    }  # fmt: skip


def request(operation: admission.Operation, obj: dict[str, Any]) -> admission.Request:
    return admission.Request(
        uid="u1",
        kind=admission.GroupVersionKind("sync.example.com", "v1alpha1", "SecretSync"),
        resource=admission.GroupVersionResource("sync.example.com", "v1alpha1", "secretsyncs"),
        operation=operation,
        namespace=obj["metadata"]["namespace"],
        name=obj["metadata"]["name"],
        object=obj,
    )


@pytest.fixture
async def api() -> fake.FakeClient:
    """``apps`` with the source Secret ``db``; ``team-a``, ``team-b``, ``other`` empty."""
    client = fake.FakeClient(namespaces=["apps", "team-a", "team-b", "other"])
    client.registry.register(secretsync.SECRETSYNCS)
    await client.create(secret("apps", "db"))
    return client


async def create(api: fake.FakeClient, obj: dict[str, Any]) -> list[str]:
    """Validate ``obj``'s creation; the warnings (raises Denied)."""
    validator = webhooks.Validator(api)
    return list(await validator.validate_create(obj, request("CREATE", obj)))


async def test_a_valid_secretsync_is_allowed_without_warnings(api: fake.FakeClient) -> None:
    assert await create(api, secret_sync("apps", "db", ["team-a", "team-b"])) == []


async def test_its_own_namespace_as_a_target_is_refused(api: fake.FakeClient) -> None:
    with pytest.raises(admission.Denied) as denied:
        await create(api, secret_sync("apps", "db", ["team-a", "apps"]))
    assert denied.value.code == 422
    assert denied.value.message == (
        "spec.targetNamespaces: apps is the SecretSync's own namespace, "
        "where the source Secret db is"
    )


async def test_a_target_another_secretsync_of_the_name_syncs_into_is_refused(
    api: fake.FakeClient,
) -> None:
    await api.create(secret_sync("other", "db", ["team-b"]))
    with pytest.raises(admission.Denied) as denied:
        await create(api, secret_sync("apps", "db", ["team-a", "team-b"]))
    assert "SecretSync other/db already copies Secret db into team-b" in denied.value.message
    # Another name, or disjoint targets, do not conflict.
    assert await create(api, secret_sync("apps", "db", ["team-a"])) == []
    await api.create(secret("apps", "cache"))
    assert await create(api, secret_sync("apps", "cache", ["team-b"])) == []


async def test_a_target_with_a_secret_of_its_own_is_refused(api: fake.FakeClient) -> None:
    await api.create(secret("team-b", "db"))  # not a copy: someone's own Secret
    with pytest.raises(admission.Denied) as denied:
        await create(api, secret_sync("apps", "db", ["team-a", "team-b"]))
    assert "Secret team-b/db exists and is not a copy made by this SecretSync" in (
        denied.value.message
    )
    # A copy this SecretSync made (an update adding a target, say) is its own.
    labels = {secretsync.SOURCE_NAMESPACE: "apps", secretsync.SOURCE_NAME: "db"}
    await api.create(secret("team-a", "db", labels))
    assert await create(api, secret_sync("apps", "db", ["team-a"])) == []
    # That copy is not one made by a SecretSync db of another namespace.
    await api.create(secret("other", "db"))
    with pytest.raises(admission.Denied) as denied:
        await create(api, secret_sync("other", "db", ["team-a"]))
    assert "Secret team-a/db exists and is not a copy" in denied.value.message


async def test_a_missing_source_is_allowed_with_a_warning(api: fake.FakeClient) -> None:
    warnings = await create(api, secret_sync("other", "db", ["team-a"]))
    assert warnings == ["Secret other/db does not exist: nothing is copied until it does"]


async def test_an_update_is_checked_like_a_creation_but_not_against_itself(
    api: fake.FakeClient,
) -> None:
    stored = await api.create(secret_sync("apps", "db", ["team-a"]))
    validator = webhooks.Validator(api)
    changed = {**stored, "spec": {"targetNamespaces": ["team-a", "team-b"]}}
    assert await validator.validate_update(stored, changed, request("UPDATE", changed)) == []
    bad = {**stored, "spec": {"targetNamespaces": ["apps"]}}
    with pytest.raises(admission.Denied):
        await validator.validate_update(stored, bad, request("UPDATE", bad))
    assert await validator.validate_delete(stored, request("DELETE", stored)) == []


async def test_an_update_checks_the_cluster_for_the_targets_it_adds_only(
    api: fake.FakeClient,
) -> None:
    stored = await api.create(secret_sync("apps", "db", ["team-a"]))
    # Since it was admitted, a SecretSync db elsewhere has taken team-a and team-b.
    await api.create(secret_sync("other", "db", ["team-a", "team-b"]))
    validator = webhooks.Validator(api)
    finalized = {**stored, "metadata": {**stored["metadata"], "finalizers": ["x/y"]}}
    assert await validator.validate_update(stored, finalized, request("UPDATE", finalized)) == []
    adding = {**stored, "spec": {"targetNamespaces": ["team-a", "team-b"]}}
    with pytest.raises(admission.Denied) as denied:
        await validator.validate_update(stored, adding, request("UPDATE", adding))
    assert "SecretSync other/db already copies Secret db into team-b" in denied.value.message
    # Being deleted, anything goes: refusing would keep its finalizer forever.
    deleting = {
        **adding,
        "metadata": {**stored["metadata"], "deletionTimestamp": "2026-01-01T00:00:00Z"},
    }
    assert await validator.validate_update(stored, deleting, request("UPDATE", deleting)) == []


async def test_the_handler_answers_the_api_server_with_the_refusal(api: fake.FakeClient) -> None:
    obj = secret_sync("apps", "db", ["apps"])
    answer = await admission.validating(webhooks.Validator(api)).handle(request("CREATE", obj))
    review = answer.review("u1")["response"]
    assert review["allowed"] is False
    assert review["status"]["code"] == 422
    assert review["status"]["reason"] == "Invalid"
    assert review["status"]["message"].startswith("spec.targetNamespaces: apps is")


async def test_the_defaulter_sorts_the_targets_and_keeps_duplicates() -> None:
    obj = secret_sync("apps", "db", ["team-b", "team-a", "team-b"])
    answer = await admission.defaulting(webhooks.Defaulter()).handle(request("CREATE", obj))
    assert answer.allowed
    assert [dict(op) for op in answer.patch] == [
        {"op": "replace", "path": "/spec/targetNamespaces/0", "value": "team-a"},
        {"op": "replace", "path": "/spec/targetNamespaces/1", "value": "team-b"},
    ]
    # Already sorted: no patch at all.
    obj = secret_sync("apps", "db", ["team-a", "team-b"])
    answer = await admission.defaulting(webhooks.Defaulter()).handle(request("CREATE", obj))
    assert answer.patch == ()


def test_the_command_line_serves_what_the_shipped_configuration_calls() -> None:
    """``--webhooks`` without a cert dir: self-signed for the address and the
    configuration names of ``config/webhook.yaml``, on the port its URLs name."""
    config = pathlib.Path(package.__file__).parent / "config" / "webhook.yaml"
    docs = [doc for doc in yaml.safe_load_all(config.read_text()) if doc]
    options = main.webhook_options("127.0.0.1:9443", None)
    signed = options.self_signed
    assert signed is not None
    assert list(signed.mutating_configurations) == [docs[0]["metadata"]["name"]]
    assert list(signed.validating_configurations) == [docs[1]["metadata"]["name"]]
    assert list(signed.ip_addresses) == ["127.0.0.1"]
    paths = {
        "MutatingWebhookConfiguration": "/mutate-sync-example-com-v1alpha1-secretsync",
        "ValidatingWebhookConfiguration": "/validate-sync-example-com-v1alpha1-secretsync",
    }
    for doc in docs:
        (hook,) = doc["webhooks"]
        assert hook["clientConfig"]["url"] == f"https://{options.bind_address}{paths[doc['kind']]}"
        assert hook["sideEffects"] == "None"  # dry-run requests are sent to it too
    assert paths["ValidatingWebhookConfiguration"] == runtime.webhook.server.validate_path(
        secretsync.SECRETSYNCS
    )
    # Given a cert dir: those files, nothing generated or injected.
    given = main.webhook_options(":9443", pathlib.Path("/certs"))
    assert given.self_signed is None
    assert given.cert_dir == pathlib.Path("/certs")
