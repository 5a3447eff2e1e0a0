"""Put a CA bundle where the API server reads it to trust a webhook's serving certificate.

:func:`inject` writes ``caBundle`` (base64 of the PEM) into

- every webhook (``webhooks[*].clientConfig``) of the named
  ``ValidatingWebhookConfiguration`` and ``MutatingWebhookConfiguration`` objects,
  by read-modify-write with the object's resourceVersion (retried on conflict);
- ``spec.conversion.webhook.clientConfig`` of the named CRDs, which must already use
  the ``Webhook`` conversion strategy (a merge patch of that one field).

Nothing is written where the bundle is already the same. A missing object raises
:class:`runtime.client.errors.NotFound` (the configuration is part of the deployment:
a missing one is an installation error, not something to create here).
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from typing import Any

from runtime.client import client as client_
from runtime.client import errors, resources

__all__ = ["CRDS", "MUTATING", "VALIDATING", "inject"]

VALIDATING = resources.Resource(
    "admissionregistration.k8s.io", "v1", "ValidatingWebhookConfiguration",
    "validatingwebhookconfigurations", namespaced=False,
)  # fmt: skip
MUTATING = resources.Resource(
    "admissionregistration.k8s.io", "v1", "MutatingWebhookConfiguration",
    "mutatingwebhookconfigurations", namespaced=False,
)  # fmt: skip
CRDS = resources.Resource(
    "apiextensions.k8s.io", "v1", "CustomResourceDefinition", "customresourcedefinitions",
    namespaced=False,
)  # fmt: skip

_CONFLICT_RETRIES = 5


async def _inject_configuration(
    client: client_.Client, resource: resources.Resource, name: str, bundle: str
) -> None:
    for attempt in range(_CONFLICT_RETRIES):
        obj: dict[str, Any] = await client.get(resource, None, name)
        webhooks = obj.get("webhooks") or []
        if all((w.get("clientConfig") or {}).get("caBundle") == bundle for w in webhooks):
            return
        for webhook in webhooks:
            webhook.setdefault("clientConfig", {})["caBundle"] = bundle
        try:
            await client.update(obj)
            return
        except errors.Conflict:
            if attempt == _CONFLICT_RETRIES - 1:
                raise


async def _inject_crd(client: client_.Client, name: str, bundle: str) -> None:
    crd = await client.get(CRDS, None, name)
    conversion = crd.get("spec", {}).get("conversion") or {}
    if conversion.get("strategy") != "Webhook":
        raise ValueError(f"CRD {name} does not use the Webhook conversion strategy")
    if (conversion.get("webhook") or {}).get("clientConfig", {}).get("caBundle") == bundle:
        return
    patch = {"spec": {"conversion": {"webhook": {"clientConfig": {"caBundle": bundle}}}}}
    await client.patch(CRDS, None, name, patch, patch_type="merge")


async def inject(
    client: client_.Client,
    ca_pem: bytes,
    *,
    validating: Sequence[str] = (),
    mutating: Sequence[str] = (),
    crds: Sequence[str] = (),
) -> None:
    """Write ``ca_pem`` as ``caBundle`` into the named objects (see the module docstring)."""
    bundle = base64.b64encode(ca_pem).decode()
    for resource in (VALIDATING, MUTATING, CRDS):
        if (resource.api_version, resource.kind) not in client.registry:
            client.registry.register(resource)
    for name in validating:
        await _inject_configuration(client, VALIDATING, name, bundle)
    for name in mutating:
        await _inject_configuration(client, MUTATING, name, bundle)
    for name in crds:
        await _inject_crd(client, name, bundle)
