"""The SecretSync reconciler (see the package docstring for what it does).

Per pass, level-based - it never asks which event woke it:

1. a SecretSync that is gone needs nothing; one being deleted has its copies
   deleted, then its finalizer removed (the API server then deletes it);
2. otherwise the finalizer is added first, so no copy can outlive it;
3. copies in namespaces no longer listed are deleted;
4. the source Secret is copied into every listed namespace (written only when a
   copy differs: :func:`runtime.objects.create_or_update`);
5. the status says what happened, through the diff-gated status writer: a pass
   that changes nothing writes nothing. The ``Ready`` condition is ``True``
   (``Synced``) when every listed namespace has an equal copy, else ``False``
   with ``SourceNotFound`` or ``TargetNamespaceNotFound`` (a namespace that does
   not exist yet is looked at again after ``RETRY_MISSING`` seconds). It is set
   with :func:`runtime.conditions.set_condition` and read with
   ``runtime.conditions.of(sync, "Ready")``.

Copies are labelled with the SecretSync they belong to, so a change to a copy
(or to the source, which has the SecretSync's name) wakes the SecretSync.
"""

from __future__ import annotations

import contextlib
import copy
from typing import Any

import runtime
from examples.secretsync import webhooks as webhooks_  # (which imports this module back)

__all__ = [
    "FINALIZER",
    "SECRETS",
    "SECRETSYNCS",
    "SOURCE_NAME",
    "SOURCE_NAMESPACE",
    "SecretSyncReconciler",
    "build",
]

SECRETSYNCS = runtime.client.Resource(
    group="sync.example.com", version="v1alpha1", kind="SecretSync", plural="secretsyncs"
)
SECRETS = runtime.client.builtin("Secret")

FINALIZER = "sync.example.com/copies"
SOURCE_NAMESPACE = "sync.example.com/source-namespace"
SOURCE_NAME = "sync.example.com/source-name"
RETRY_MISSING = 30.0
"""Seconds before a SecretSync with a missing target namespace is looked at again."""

Obj = dict[str, Any]


def _copy_selector(namespace: str, name: str) -> str:
    return f"{SOURCE_NAMESPACE}={namespace},{SOURCE_NAME}={name}"


class SecretSyncReconciler:
    """Reads from the manager's cache, writes through its client."""

    def __init__(self, manager: runtime.Manager) -> None:
        self.cache = manager.cache
        self.client = manager.client
        self.events = manager.events
        self.status = runtime.status.StatusWriter(manager.client, latest=manager.cache)

    async def reconcile(self, request: runtime.Request) -> runtime.Result:
        try:
            sync = await self.cache.get(SECRETSYNCS, request.namespace, request.name)
        except runtime.client.NotFound:
            return runtime.Result()  # gone: its finalizer already cleaned up
        if sync["metadata"].get("deletionTimestamp"):
            return await self._finalize(sync)
        if not runtime.objects.has_finalizer(sync, FINALIZER):
            desired = copy.deepcopy(sync)  # cached objects are read-only
            runtime.objects.add_finalizer(desired, FINALIZER)
            sync = await self.client.update(desired)  # conditional on resourceVersion

        targets = set(sync["spec"].get("targetNamespaces") or []) - {request.namespace}
        for stale in await self._copies(request):
            if stale["metadata"]["namespace"] not in targets:
                await self._delete(stale)

        try:
            source = await self.cache.get(SECRETS, request.namespace, request.name)
        except runtime.client.NotFound:
            await self._write_status(sync, [], "False", "SourceNotFound",
                                     f"Secret {request.name} does not exist")  # fmt: skip
            return runtime.Result()  # the Secret's creation wakes us

        synced, missing = [], []
        for target in sorted(targets):
            try:
                await self._copy(source, target)
            except runtime.client.NotFound:
                missing.append(target)  # its namespace does not exist
            else:
                synced.append(target)
        if missing:
            message = f"namespaces not found: {', '.join(missing)}"
            await self._write_status(sync, synced, "False", "TargetNamespaceNotFound", message)
            return runtime.Result(requeue_after=RETRY_MISSING)
        message = f"copied into {len(synced)} namespace(s)"
        await self._write_status(sync, synced, "True", "Synced", message)
        return runtime.Result()

    async def _copy(self, source: Obj, namespace: str) -> None:
        meta = source["metadata"]

        def mutate(secret: Obj) -> None:
            labels = secret["metadata"].setdefault("labels", {})
            labels[SOURCE_NAMESPACE] = meta["namespace"]
            labels[SOURCE_NAME] = meta["name"]
            secret["type"] = source.get("type", "Opaque")
            secret["data"] = copy.deepcopy(source.get("data") or {})

        operation, _ = await runtime.objects.create_or_update(
            self.client, SECRETS, namespace, meta["name"], mutate, cache=self.cache
        )
        if operation is runtime.objects.Operation.CREATED:
            self.events.event(source, "Normal", "Copied", f"copied into {namespace}")

    async def _copies(self, request: runtime.Request) -> list[Obj]:
        selector = _copy_selector(request.namespace, request.name)
        return await self.cache.list(SECRETS, None, label_selector=selector)

    async def _delete(self, secret: Obj) -> None:
        meta = secret["metadata"]
        with contextlib.suppress(runtime.client.NotFound):
            await self.client.delete(SECRETS, meta["namespace"], meta["name"])

    async def _finalize(self, sync: Obj) -> runtime.Result:
        if not runtime.objects.has_finalizer(sync, FINALIZER):
            return runtime.Result()
        request = runtime.Request(sync["metadata"]["namespace"], sync["metadata"]["name"])
        for secret in await self._copies(request):
            await self._delete(secret)
        desired = copy.deepcopy(sync)
        runtime.objects.remove_finalizer(desired, FINALIZER)
        with contextlib.suppress(runtime.client.NotFound):
            await self.client.update(desired)
        return runtime.Result()

    async def _write_status(
        self, sync: Obj, synced: list[str], ready: str, reason: str, message: str
    ) -> None:
        generation = sync["metadata"]["generation"]
        # A list of our own (the cached one is read-only; set_condition replaces an
        # entry, never edits it). Setting what is there already leaves it as it was,
        # lastTransitionTime included, so the status writer finds nothing to write.
        conditions = list((sync.get("status") or {}).get("conditions") or [])
        runtime.conditions.set_condition(
            conditions, "Ready", ready, reason, message,
            generation=generation, now=runtime.clock.rfc3339(),
        )  # fmt: skip
        new_status = {
            "observedGeneration": generation,
            "syncedNamespaces": synced,
            "conditions": conditions,
        }
        # Skipped (nothing sent) when it means the same as the current status; on a
        # 409 re-read and re-applied only while the generation is the same.
        await self.status.update(sync, new_status)


def _requests_for_secret(secret: Obj) -> list[runtime.Request]:
    """A copy wakes the SecretSync it belongs to; any other Secret wakes the SecretSync
    of its own name (its source), if there is one."""
    meta = secret["metadata"]
    labels = meta.get("labels") or {}
    if SOURCE_NAMESPACE in labels and SOURCE_NAME in labels:
        return [runtime.Request(labels[SOURCE_NAMESPACE], labels[SOURCE_NAME])]
    return [runtime.Request(meta["namespace"], meta["name"])]


def build(
    manager: runtime.Manager, *, webhooks: bool = False, **options: Any
) -> runtime.Controller:
    """Register the SecretSync controller with ``manager``; with ``webhooks``, its
    validating and defaulting webhooks too (:mod:`examples.secretsync.webhooks`),
    served by the manager's webhook server (``ManagerOptions.webhook``). Off by
    default: a webhook needs a certificate and a webhook configuration installed
    (``config/webhook.yaml``), and the operator works without one. ``options`` are
    :class:`runtime.ControllerOptions` fields (``max_concurrent_reconciles=4``, say)."""
    # The builder also registers SECRETSYNCS with the client's registry, which the
    # client looks an object's URL up in: the pass's writes of a SecretSync need it.
    builder = (
        runtime.Builder(manager)
        .for_(SECRETSYNCS)
        .watches(SECRETS, runtime.handler.map_to(_requests_for_secret))
        .named("secretsync")
        .with_options(**options)
    )
    if webhooks:
        builder.with_validator(webhooks_.Validator(manager.client))
        builder.with_defaulter(webhooks_.Defaulter())
    return builder.complete(SecretSyncReconciler(manager))
