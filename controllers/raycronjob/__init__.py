"""The RayCronJob controller (KubeRay v1.7.0's, behind its ``RayCronJob`` gate): RayJobs
created on a cron schedule.

- :mod:`controllers.raycronjob.plan`: which tick is due, the RayJob it creates, when to
  look again (pure);
- :mod:`controllers.raycronjob.reconciler`: one pass - read, plan, create, record
  ``lastScheduleTime``;
- :mod:`controllers.raycronjob.setup`: the controller on a manager, and its RBAC.
"""
