"""The RayCluster and RayService reconcilers, built on :mod:`runtime` and :mod:`api`.

- :mod:`controllers.setup`: both wired to one manager (:func:`controllers.setup.setup`),
  and what they need of its cache (:func:`controllers.setup.cache_by_resource`);
- :mod:`controllers.raycluster` and :mod:`controllers.rayservice`: the two controllers,
  each observe -> plan -> act (docs/architecture.md, section 2);
- :mod:`controllers.main`: the ``rayservice-manager`` binary.

Importing this package imports nothing else: the pure parts (a plan, a report) load
without the client, the cache or aiohttp.
"""
