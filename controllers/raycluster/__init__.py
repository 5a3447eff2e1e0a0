"""The RayCluster controller: the pods and services KubeRay v1.7.0 would make, an honest
status, and no request at all once a cluster has converged.

- :mod:`controllers.raycluster.names`: generated names and the problems that make a
  cluster's objects impossible to create;
- :mod:`controllers.raycluster.pods`, :mod:`~controllers.raycluster.services`,
  :mod:`~controllers.raycluster.autoscaler`: pure builders of the head and worker
  pods, the head (and serve) service, and the autoscaler's sidecar and RBAC;
- :mod:`controllers.raycluster.report`: the status, computed in one pure function;
- :mod:`controllers.raycluster.redis_cleanup`: GCS fault tolerance's Redis clean-up
  finalizer and Job;
- :mod:`controllers.raycluster.reconciler`: one reconcile pass, in three steps:
  :mod:`~controllers.raycluster.observe` (a read-only snapshot),
  :mod:`~controllers.raycluster.plan` (pure: the writes) and
  :mod:`~controllers.raycluster.act` (the only part that writes);
- :mod:`controllers.raycluster.setup`: :func:`~controllers.raycluster.setup.setup` wires
  the reconciler to a manager.

Importing this package imports nothing else.
"""
