"""The RayJob controller (KubeRay v1.7.0's RayJob and RayCronJob, issue 38).

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
