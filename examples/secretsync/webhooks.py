"""SecretSync's admission webhooks: what the CRD's OpenAPI schema cannot say.

The schema (``config/crd.yaml``) already refuses what one object shows on its
own: a missing ``spec.targetNamespaces``, more than 64 of them, a name that is
no DNS-1123 label, the same name twice (``x-kubernetes-list-type: set``). The
webhooks check what needs the request's context or the rest of the cluster.

:class:`Validator` (``/validate-sync-example-com-v1alpha1-secretsync``) refuses,
on create and update, with HTTP 422 (``Invalid``) and a message naming the field:

1. a target that is the SecretSync's own namespace (the source is there: a copy
   would be the Secret itself);
2. a target that another SecretSync of the same name (in another namespace)
   already lists: the two would overwrite each other's copy forever;
3. a target holding a Secret of that name that is not this SecretSync's copy
   (no ``sync.example.com/source-*`` labels naming it): the operator would
   overwrite someone's Secret.

It allows with a warning a SecretSync whose source Secret does not exist (yet),
and allows every delete. On update, the rules apply to the targets added only:
what was admitted stays admitted whatever appeared since (or whatever was stored
before the webhook was installed), so a change of metadata alone (the operator
adding or removing its finalizer) is never refused; and an update of a
SecretSync being deleted is allowed as it is, or its finalizer could never be
removed. Rules 2 and 3 read the API
at admission time: two SecretSyncs created at the same instant can both pass
rule 2 (the reconciler then reports nothing wrong, the copies flip between
them), which is the usual limit of a check-then-act webhook.

:class:`Defaulter` (``/mutate-sync-example-com-v1alpha1-secretsync``) sorts
``spec.targetNamespaces``: it is a set, so the order means nothing, and a
reordering then leaves the stored spec (and its generation) unchanged. It keeps
duplicates, for the schema to refuse.

Both read with the client given (live reads: the webhook server starts before
the caches have synced).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import runtime
from examples.secretsync import secretsync

__all__ = ["Defaulter", "Reader", "Validator"]

Obj = dict[str, Any]
Denied = runtime.webhook.admission.Denied


class Reader(Protocol):
    """What the validator reads with (a :class:`runtime.client.Client`, or the fake)."""

    async def get(
        self, resource: runtime.client.Resource, namespace: str | None, name: str
    ) -> Obj: ...

    async def list(
        self,
        resource: runtime.client.Resource,
        namespace: str | None = None,
        *,
        field_selector: str | None = None,
    ) -> runtime.client.ListResult: ...


def _targets(obj: Obj) -> list[str]:
    return list((obj.get("spec") or {}).get("targetNamespaces") or [])


def _invalid(message: str) -> Denied:
    return Denied(message, code=422, reason="Invalid")


class Validator:
    """See the module docstring."""

    def __init__(self, reader: Reader) -> None:
        self.reader = reader

    async def validate_create(
        self, obj: Obj, request: runtime.webhook.admission.Request
    ) -> Sequence[str]:
        return await self._check(obj, _targets(obj))

    async def validate_update(
        self, old: Obj, obj: Obj, request: runtime.webhook.admission.Request
    ) -> Sequence[str]:
        if obj["metadata"].get("deletionTimestamp"):
            return []  # going away: its finalizer's removal must go through
        added = set(_targets(obj)) - set(_targets(old))
        return await self._check(obj, [t for t in _targets(obj) if t in added])

    async def validate_delete(
        self, old: Obj, request: runtime.webhook.admission.Request
    ) -> Sequence[str]:
        return []

    async def _check(self, obj: Obj, targets: list[str]) -> list[str]:
        """The rules for ``targets``: all of ``obj``'s, or those an update adds."""
        if not targets:
            return []  # nothing new to copy: nothing to check
        namespace, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
        if namespace in targets:
            raise _invalid(
                f"spec.targetNamespaces: {namespace} is the SecretSync's own namespace, "
                f"where the source Secret {name} is"
            )
        by_name = f"metadata.name={name}"
        others = await self.reader.list(secretsync.SECRETSYNCS, None, field_selector=by_name)
        for other in others.items:
            other_namespace = other["metadata"]["namespace"]
            if other_namespace == namespace:
                continue  # this one, as stored before an update
            taken = sorted(set(targets) & set(_targets(other)))
            if taken:
                raise _invalid(
                    f"spec.targetNamespaces: SecretSync {other_namespace}/{name} already "
                    f"copies Secret {name} into {', '.join(taken)}"
                )
        secrets = await self.reader.list(secretsync.SECRETS, None, field_selector=by_name)
        source_found = False
        for found in secrets.items:
            found_namespace = found["metadata"]["namespace"]
            if found_namespace == namespace:
                source_found = True
            elif found_namespace in targets and not _copy_of(found, namespace, name):
                raise _invalid(
                    f"spec.targetNamespaces: Secret {found_namespace}/{name} exists and is "
                    f"not a copy made by this SecretSync; it would be overwritten"
                )
        if not source_found:
            return [f"Secret {namespace}/{name} does not exist: nothing is copied until it does"]
        return []


def _copy_of(secret: Obj, namespace: str, name: str) -> bool:
    labels = secret["metadata"].get("labels") or {}
    return bool(
        labels.get(secretsync.SOURCE_NAMESPACE) == namespace
        and labels.get(secretsync.SOURCE_NAME) == name
    )


class Defaulter:
    """See the module docstring."""

    async def default(self, obj: Obj, request: runtime.webhook.admission.Request) -> None:
        spec = obj.get("spec")
        if isinstance(spec, dict) and isinstance(spec.get("targetNamespaces"), list):
            spec["targetNamespaces"] = sorted(spec["targetNamespaces"], key=str)
