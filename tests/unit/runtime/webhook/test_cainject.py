"""``runtime/webhook/cainject.py``: the CA bundle written into the webhook
configurations and conversion CRDs named, once, with conflicts retried (on the fake
client)."""

from __future__ import annotations

from typing import Any

import pytest

from runtime.client import errors
from runtime.testing import fake
from runtime.webhook import cainject


def _configuration(kind: str, name: str, hooks: int) -> dict[str, Any]:
    return {"apiVersion": "admissionregistration.k8s.io/v1", "kind": kind,
            "metadata": {"name": name},
            "webhooks": [{"name": f"h{i}.test.dev", "clientConfig": {"url": "https://x"}}
                         for i in range(hooks)]}  # fmt: skip


async def test_ca_injection_writes_every_webhook_once_and_retries_conflicts() -> None:
    client = fake.FakeClient()
    for resource in (cainject.VALIDATING, cainject.MUTATING, cainject.CRDS):
        client.registry.register(resource)
    await client.create(_configuration("ValidatingWebhookConfiguration", "v", 2))
    await client.create(_configuration("MutatingWebhookConfiguration", "m", 1))
    await client.create({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.test.dev"},
        "spec": {"conversion": {"strategy": "Webhook", "webhook": {
            "clientConfig": {"url": "https://x/convert"}}}},
    })  # fmt: skip
    await client.create({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "plain.test.dev"}, "spec": {"conversion": {"strategy": "None"}},
    })  # fmt: skip
    update = client.update
    conflicts = [errors.Conflict(409, "Conflict", "the object has been modified")]

    async def conflicting(obj: dict[str, Any], **kwargs: Any) -> Any:
        if conflicts:
            raise conflicts.pop()
        return await update(obj, **kwargs)

    client.update = conflicting  # type: ignore[method-assign]
    await cainject.inject(client, b"PEM", validating=["v"], mutating=["m"],  # type: ignore[arg-type]
                          crds=["widgets.test.dev"])  # fmt: skip
    bundle = "UEVN"  # base64 of b"PEM"
    validating = await client.get(cainject.VALIDATING, None, "v")
    assert [h["clientConfig"]["caBundle"] for h in validating["webhooks"]] == [bundle, bundle]
    mutating = await client.get(cainject.MUTATING, None, "m")
    assert mutating["webhooks"][0]["clientConfig"] == {"url": "https://x", "caBundle": bundle}
    crd = await client.get(cainject.CRDS, None, "widgets.test.dev")
    assert crd["spec"]["conversion"]["webhook"]["clientConfig"]["caBundle"] == bundle
    # The same bundle again: nothing is written.
    writes = client.writes()
    await cainject.inject(client, b"PEM", validating=["v"], mutating=["m"],  # type: ignore[arg-type]
                          crds=["widgets.test.dev"])  # fmt: skip
    assert client.writes() == writes
    with pytest.raises(ValueError, match="does not use the Webhook conversion strategy"):
        await cainject.inject(client, b"PEM", crds=["plain.test.dev"])  # type: ignore[arg-type]
    with pytest.raises(errors.NotFound):
        await cainject.inject(client, b"PEM", validating=["missing"])  # type: ignore[arg-type]
