"""The environment variables of KubeRay v1.7.0's operator that we honour, read once.

The operator's ``main`` reads them from ``os.environ`` at start-up
(:meth:`Environment.read`) and passes the values into the RayCluster, RayService and
RayJob reconcilers' ``Options``, whose own defaults are plain constants: making options,
or importing a module, never reads the environment.

=================================  ==========================================  =========
variable                           meaning                                     default
=================================  ==========================================  =========
``CLUSTER_DOMAIN``                 DNS domain of in-cluster addresses          ``cluster.local``
``ENABLE_ZERO_DOWNTIME``           ``false`` (any case): a changed             on
                                   ``rayClusterConfig`` without an
                                   ``upgradeStrategy.type`` is not rolled out
``ENABLE_RANDOM_POD_DELETE``       ``true`` (any case): autoscaled groups      off
                                   scale down without ``workersToDelete``
``ENABLE_GCS_FT_REDIS_CLEANUP``    ``false`` (any case): no Redis clean-up     on
                                   finalizer on GCS fault-tolerant clusters
``DELETE_RAYJOB_CR_AFTER_JOB_``    ``true`` (any case): ``shutdownAfterJob``   off
``FINISHES``                       ``Finishes`` deletes the RayJob, not only
                                   its RayCluster
``ENABLE_LOGIN_SHELL``             ``true`` (any case): the submitter's        off
                                   command runs in ``bash -l``
``RAYJOB_DEPLOYMENT_STATUS_``      seconds Ray's job may have ended while      300
``TRANSITION_GRACE_PERIOD_``       its submitter still runs (not an integer:
``SECONDS``                        the default)
``RAYJOB_STATUS_CHECK_TIMEOUT_``   seconds the dashboard may fail before the   300
``SECONDS``                        job fails (not a positive integer: the
                                   default)
=================================  ==========================================  =========

>>> env = Environment.read({"ENABLE_ZERO_DOWNTIME": "FALSE", "CLUSTER_DOMAIN": ""})
>>> env.cluster_domain, env.zero_downtime, env.redis_cleanup
('cluster.local', False, True)
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping

__all__ = ["Environment"]


@dataclasses.dataclass(frozen=True)
class Environment:
    """The values; the defaults are KubeRay's when a variable is unset."""

    cluster_domain: str = "cluster.local"
    zero_downtime: bool = True
    random_pod_delete: bool = False
    redis_cleanup: bool = True
    delete_rayjob_after_finish: bool = False
    login_shell: bool = False
    rayjob_grace_period: float = 300.0
    rayjob_status_check_timeout: float = 300.0

    @classmethod
    def read(cls, environ: Mapping[str, str]) -> Environment:
        """The values ``environ`` gives (empty counts as unset)."""
        return cls(
            cluster_domain=environ.get("CLUSTER_DOMAIN") or cls.cluster_domain,
            zero_downtime=environ.get("ENABLE_ZERO_DOWNTIME", "").lower() != "false",
            random_pod_delete=environ.get("ENABLE_RANDOM_POD_DELETE", "").lower() == "true",
            redis_cleanup=environ.get("ENABLE_GCS_FT_REDIS_CLEANUP", "").lower() != "false",
            delete_rayjob_after_finish=environ.get(
                "DELETE_RAYJOB_CR_AFTER_JOB_FINISHES", ""
            ).lower()
            == "true",
            login_shell=environ.get("ENABLE_LOGIN_SHELL", "").lower() == "true",
            rayjob_grace_period=_seconds(
                environ.get("RAYJOB_DEPLOYMENT_STATUS_TRANSITION_GRACE_PERIOD_SECONDS"),
                cls.rayjob_grace_period,
                positive=False,
            ),
            rayjob_status_check_timeout=_seconds(
                environ.get("RAYJOB_STATUS_CHECK_TIMEOUT_SECONDS"),
                cls.rayjob_status_check_timeout,
                positive=True,
            ),
        )


def _seconds(text: str | None, default: float, *, positive: bool) -> float:
    """An integer number of seconds (KubeRay's ``strconv.Atoi``), else ``default``; with
    ``positive``, one that is not > 0 is the default too. At most a year.

    >>> _seconds("60", 300.0, positive=True), _seconds("-5", 300.0, positive=True)
    (60.0, 300.0)
    >>> _seconds("x", 300.0, positive=False), _seconds("-5", 300.0, positive=False)
    (300.0, -5.0)
    """
    if text is None or not re.fullmatch(r"[+-]?[0-9]{1,12}", text.strip()):
        return default
    value = float(int(text.strip()))
    if positive and value <= 0:
        return default
    return min(value, 365 * 86400.0)
