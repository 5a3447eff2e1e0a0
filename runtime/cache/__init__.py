"""Watch-fed caches: reflector -> store (with indexes) -> shared informer -> cache reader.

- :mod:`runtime.cache.store`: :class:`Store`, indexers, the default transform,
  mutation detection;
- :mod:`runtime.cache.reflector`: :class:`Reflector` (list, watch, bookmarks, 410 relist, backoff);
- :mod:`runtime.cache.informer`: :class:`SharedInformer` and :class:`Event`;
- :mod:`runtime.cache.cache`: :class:`Cache`, the reader reconcilers use, with write-through,
  over all namespaces or a list of them (:class:`NamespaceNotWatched` for a read outside);
- :mod:`runtime.cache.selector`: label selectors.
"""

from runtime.cache import informer, reflector, selector, store
from runtime.cache.cache import Cache, NamespaceNotWatched
from runtime.cache.informer import Event, SharedInformer
from runtime.cache.store import CacheMutationError, Store

__all__ = [
    "Cache",
    "CacheMutationError",
    "Event",
    "NamespaceNotWatched",
    "SharedInformer",
    "Store",
    "informer",
    "reflector",
    "selector",
    "store",
]
