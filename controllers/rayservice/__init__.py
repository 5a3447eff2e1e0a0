"""The RayService controller: Ray Serve applications on RayClusters, upgraded without
downtime, level-based, with nothing that matters kept in memory.

One pass is observe -> plan -> act (docs/architecture.md, 2.7b, tells it once):

- :mod:`controllers.rayservice.observe` reads a :mod:`~controllers.rayservice.snapshot`
  (frozen data) from the cache and the Ray dashboard, its
  :mod:`~controllers.rayservice.roles` decided once;
- :mod:`controllers.rayservice.plan` decides every write from it (pure, no I/O), with
  :mod:`~controllers.rayservice.serving` (when to submit, when to ask a proxy),
  :mod:`~controllers.rayservice.clusters`, :mod:`~controllers.rayservice.services`,
  :mod:`~controllers.rayservice.gateway`, :mod:`~controllers.rayservice.incremental` and
  :mod:`~controllers.rayservice.report` (the status);
- :mod:`controllers.rayservice.act` makes the writes;
- :mod:`controllers.rayservice.reconciler` runs the pass and the lifecycle;
  :mod:`controllers.rayservice.setup` wires it to a manager;
  :mod:`controllers.rayservice.validation` and :mod:`controllers.ray.tokens`
  serve both.

Importing this package imports nothing else.
"""
