"""The status writer a reconciler of this operator uses: one
:class:`runtime.status.StatusWriter` per reconciler, stamping ``lastUpdateTime`` from the
reconciler's clock and comparing against the cache's newest copy.

``latest=cache``: the write is based on the cache's copy when that one is newer and of
the same generation (an annotation written meanwhile, the RayService's on its RayCluster
say, costs no 409), and is ``STALE`` without a request when the generation moved
(:mod:`runtime.status`, step 2). Both reconcilers use it.

>>> import datetime
>>> moment = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
>>> stamp(lambda: moment)()
'2026-01-01T00:00:00Z'
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Collection
from typing import Any

from runtime import clock as clock_
from runtime import status
from runtime.cache import cache as cache_

__all__ = ["for_reconciler", "stamp"]


def stamp(clock: Callable[[], datetime.datetime]) -> Callable[[], str]:
    """``clock``'s time as the API writes a ``metav1.Time`` (:func:`runtime.clock.rfc3339`)."""
    return lambda: clock_.rfc3339(clock())


def for_reconciler(
    client: Any,
    cache: cache_.Cache,
    *,
    volatile: Collection[str],
    clock: Callable[[], datetime.datetime],
) -> status.StatusWriter:
    """A status writer ignoring ``volatile`` when it compares, stamping
    ``lastUpdateTime`` from ``clock`` on each real write and reading the latest copy
    from ``cache``."""
    return status.StatusWriter(
        client, volatile=volatile, stamps={"lastUpdateTime": stamp(clock)}, latest=cache
    )
