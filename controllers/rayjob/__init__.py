"""The RayJob controller (KubeRay v1.7.0's RayJob), observe -> plan -> act as the
RayCluster and RayService controllers:

- :mod:`controllers.rayjob.snapshot`, :mod:`~controllers.rayjob.observe`: what one pass
  reads (the cache, and in ``Running`` the dashboard);
- :mod:`controllers.rayjob.plan`: KubeRay's state machine as a pure function, and where we
  deliberately differ;
- :mod:`controllers.rayjob.act`: the only writer; :mod:`~controllers.rayjob.reconciler`:
  one pass; :mod:`~controllers.rayjob.setup`: the controller on a manager.

Pure building blocks, no I/O:

- :mod:`controllers.rayjob.names`: finalizer, labels, annotations and the names of
  everything a RayJob makes (its RayCluster, submission id, head Service, submitter Job);
- :mod:`controllers.rayjob.validation`: KubeRay's ``ValidateRayJobMetadata`` /
  ``ValidateRayJobSpec`` / ``ValidateRayJobStatus``, the webhook's rules and the
  RayCronJob's;
- :mod:`controllers.rayjob.cron`: standard cron schedules (robfig/cron's
  ``ParseStandard``) and their next tick;
- :mod:`controllers.rayjob.submitter`: the ``ray job submit`` script, the submitter Job
  (``K8sJobMode``) and the sidecar container (``SidecarMode``);
- :mod:`controllers.rayjob.cluster`: the RayCluster and the ``<rayjob>-head-svc``
  Service a RayJob makes, and its dashboard URL.
"""
