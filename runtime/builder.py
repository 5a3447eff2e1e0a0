"""The builder: wire a reconciler to the resources it cares about, in one readable chain.

>>> from runtime import client
>>> DATABASES = client.Resource("example.com", "v1", "Database", "databases")
>>> DEPLOYMENTS = client.builtin("Deployment")
>>> # Builder(manager).for_(DATABASES, predicates=[predicate.generation_changed])
>>> #     .owns(DEPLOYMENTS).with_options(max_concurrent_reconciles=2).complete(reconciler)

(``generation_changed`` suits a custom resource, whose spec moves its generation; a kind
without a spec - ConfigMap, Secret - has no generation, and the predicate would drop
every update of it: :mod:`runtime.predicate` says what to use instead.)

- ``for_(resource)``: reconcile objects of this resource; each change enqueues
  the object itself (exactly one ``for_``).
- ``owns(resource)``: a change to an object **controlled** by one of ours
  (its controller owner reference) enqueues that owner; ``delay=`` seconds
  later if given, so that a burst of changes to the children is one reconcile
  (see :class:`~runtime.source.Kind`).
- ``watches(resource, handler)``: anything else, with your own mapping.
- ``with_event_filter(predicate)``: applies to every source;
  per-source ``predicates=`` apply to one.
- ``cache=ByResource(...)`` on ``for_``, ``owns`` or ``watches``: what the
  manager's cache holds of that resource (label and field selectors, a transform,
  indexers; :class:`runtime.cache.ByResource`), as ``ManagerOptions.cache_by_resource``
  would say it. The cache is shared: the selectors hold for every reader of that
  resource, so they may be given once per resource (by the manager's options or by
  one builder), before anything else watches it; otherwise ``complete`` raises.
- ``with_index(resource, name, indexer)``: an index for
  ``manager.cache.list(resource, index=(name, value))`` in the reconciler
  (controller-runtime's ``mgr.GetFieldIndexer().IndexField``; also
  :meth:`runtime.cache.Cache.index_field` directly).
- ``with_options(**controller.Options fields)``; ``named(name)`` (default: the
  ``for_`` resource's plural, e.g. ``databases``).
- ``with_validator(v)``, ``with_defaulter(d)``, ``with_converter(c)``: webhooks for the
  ``for_`` resource, served by the manager's webhook server at controller-runtime's
  paths (:func:`runtime.webhook.server.register_for`) when ``complete`` runs.
- ``complete(reconciler)`` builds the :class:`~runtime.controller.Controller`,
  gives the cache the options and indexes above, registers its informers with the
  manager's cache (so they start, and sync, before leader election), registers each
  resource it was given with the client's registry unless its kind is there already
  (so the reconciler's ``client.update(obj)`` of a custom resource finds its URL
  without a ``registry.register`` of its own) and adds it to the manager.
"""

from __future__ import annotations

from typing import Any

from runtime import controller as controller_
from runtime import handler as handler_
from runtime import manager as manager_
from runtime import predicate as predicate_
from runtime import source as source_
from runtime.cache import cache as cache_
from runtime.cache import store as store_
from runtime.client import resources
from runtime.webhook import admission, conversion
from runtime.webhook import server as webhook_

__all__ = ["Builder"]


class Builder:
    """See the module docstring."""

    def __init__(self, manager: manager_.Manager) -> None:
        self.manager = manager
        self._for: tuple[resources.Resource, tuple[predicate_.Predicate, ...]] | None = None
        self._owns: list[tuple[resources.Resource, tuple[predicate_.Predicate, ...], float]] = []
        self._watches: list[
            tuple[resources.Resource, handler_.EventHandler, tuple[predicate_.Predicate, ...]]
        ] = []
        self._filters: list[predicate_.Predicate] = []
        self._cache: list[tuple[resources.Resource, cache_.ByResource]] = []
        self._indexes: list[tuple[resources.Resource, str, store_.Indexer]] = []
        self._options: dict[str, Any] = {}
        self._name: str | None = None
        self._validator: admission.Validator | None = None
        self._defaulter: admission.Defaulter | None = None
        self._converter: conversion.Converter | None = None

    def for_(
        self,
        resource: resources.Resource,
        *,
        predicates: tuple[predicate_.Predicate, ...] = (),
        cache: cache_.ByResource | None = None,
    ) -> Builder:
        if self._for is not None:
            raise ValueError("for_() may be called once: a controller reconciles one kind")
        self._for = (resource, tuple(predicates))
        return self._cache_options(resource, cache)

    def owns(
        self,
        resource: resources.Resource,
        *,
        predicates: tuple[predicate_.Predicate, ...] = (),
        delay: float = 0.0,
        cache: cache_.ByResource | None = None,
    ) -> Builder:
        if delay < 0:
            raise ValueError("delay must be >= 0")
        self._owns.append((resource, tuple(predicates), delay))
        return self._cache_options(resource, cache)

    def watches(
        self,
        resource: resources.Resource,
        handler: handler_.EventHandler,
        *,
        predicates: tuple[predicate_.Predicate, ...] = (),
        cache: cache_.ByResource | None = None,
    ) -> Builder:
        self._watches.append((resource, handler, tuple(predicates)))
        return self._cache_options(resource, cache)

    def _cache_options(
        self, resource: resources.Resource, options: cache_.ByResource | None
    ) -> Builder:
        if options is not None:
            if not isinstance(options, cache_.ByResource):
                raise TypeError(f"cache= for {resource}: expected ByResource, got {options!r}")
            self._cache.append((resource, options))
        return self

    def with_index(
        self, resource: resources.Resource, name: str, indexer: store_.Indexer
    ) -> Builder:
        self._indexes.append((resource, name, indexer))
        return self

    def with_event_filter(self, predicate: predicate_.Predicate) -> Builder:
        self._filters.append(predicate)
        return self

    def with_options(self, **options: Any) -> Builder:
        self._options.update(options)
        return self

    def named(self, name: str) -> Builder:
        self._name = name
        return self

    def with_validator(self, validator: admission.Validator) -> Builder:
        self._validator = validator
        return self

    def with_defaulter(self, defaulter: admission.Defaulter) -> Builder:
        self._defaulter = defaulter
        return self

    def with_converter(self, converter: conversion.Converter) -> Builder:
        self._converter = converter
        return self

    def complete(self, reconciler: controller_.ReconcilerLike) -> controller_.Controller:
        if self._for is None:
            raise ValueError("call for_(resource) before complete()")
        resource, predicates = self._for
        cache = self.manager.cache
        for configured, options in self._cache:
            cache.configure(configured, options)
        for indexed, name, indexer in self._indexes:
            cache.index_field(indexed, name, indexer)
        sources: list[source_.Source] = [
            source_.Kind(cache, resource, handler_.for_object(), [*self._filters, *predicates])
        ]
        for owned, owned_predicates, delay in self._owns:
            sources.append(
                source_.Kind(
                    cache,
                    owned,
                    handler_.for_owner(
                        resource.api_version, resource.kind, namespaced=resource.namespaced
                    ),
                    [*self._filters, *owned_predicates],
                    delay=delay,
                )
            )
        for watched, handler, watched_predicates in self._watches:
            sources.append(
                source_.Kind(cache, watched, handler, [*self._filters, *watched_predicates])
            )
        registry = getattr(self.manager.client, "registry", None)
        for src in sources:
            assert isinstance(src, source_.Kind)
            cache.informer(src.resource)  # registered now: synced before leader election
            if (
                registry is not None
                and (src.resource.api_version, src.resource.kind) not in registry
            ):
                registry.register(src.resource)  # so the reconciler can write what it watches
        ctrl = controller_.Controller(
            self._name or resource.plural,
            reconciler,
            options=controller_.Options(**self._options),
        )
        ctrl.watch(*sources)
        if self._validator or self._defaulter or self._converter:
            webhook_.register_for(
                self.manager.webhook_server, resource, validator=self._validator,
                defaulter=self._defaulter, converter=self._converter,
            )  # fmt: skip
        self.manager.add(ctrl)
        return ctrl
