"""Watch-fed caches: reflector -> store (with indexes) -> shared informer -> cache reader.

- :mod:`runtime.cache.store`: :class:`Store`, indexers, the default transform,
  mutation detection;
- :mod:`runtime.cache.reflector`: :class:`Reflector` (list, watch, bookmarks, 410 relist, backoff);
- :mod:`runtime.cache.informer`: :class:`SharedInformer` and :class:`Event`;
- :mod:`runtime.cache.cache`: :class:`Cache`, the reader reconcilers use, with write-through,
  over all namespaces or a list of them (:class:`NamespaceNotWatched` for a read outside),
  and per resource what it holds (:class:`ByResource`: label and field selectors, a
  transform, indexers) - the cache is that filtered view;
- :mod:`runtime.cache.selector`: label selectors; :mod:`runtime.cache.fields`: field selectors.
"""

from runtime.cache import fields, informer, reflector, selector, store
from runtime.cache.cache import ByResource, Cache, NamespaceNotWatched
from runtime.cache.informer import Event, SharedInformer
from runtime.cache.store import CacheMutationError, Store

__all__ = [
    "ByResource",
    "Cache",
    "CacheMutationError",
    "Event",
    "NamespaceNotWatched",
    "SharedInformer",
    "Store",
    "fields",
    "informer",
    "reflector",
    "selector",
    "store",
]
