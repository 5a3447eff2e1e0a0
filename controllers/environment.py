"""The environment variables of KubeRay v1.7.0's operator that we honour, read once.

The operator's ``main`` reads them from ``os.environ`` at start-up
(:meth:`Environment.read`) and passes the values into both reconcilers' ``Options``,
whose own defaults are plain constants: making options, or importing a module, never
reads the environment.

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
=================================  ==========================================  =========

>>> env = Environment.read({"ENABLE_ZERO_DOWNTIME": "FALSE", "CLUSTER_DOMAIN": ""})
>>> env.cluster_domain, env.zero_downtime, env.redis_cleanup
('cluster.local', False, True)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

__all__ = ["Environment"]


@dataclasses.dataclass(frozen=True)
class Environment:
    """The values; the defaults are KubeRay's when a variable is unset."""

    cluster_domain: str = "cluster.local"
    zero_downtime: bool = True
    random_pod_delete: bool = False
    redis_cleanup: bool = True

    @classmethod
    def read(cls, environ: Mapping[str, str]) -> Environment:
        """The values ``environ`` gives (empty counts as unset)."""
        return cls(
            cluster_domain=environ.get("CLUSTER_DOMAIN") or cls.cluster_domain,
            zero_downtime=environ.get("ENABLE_ZERO_DOWNTIME", "").lower() != "false",
            random_pod_delete=environ.get("ENABLE_RANDOM_POD_DELETE", "").lower() == "true",
            redis_cleanup=environ.get("ENABLE_GCS_FT_REDIS_CLEANUP", "").lower() != "false",
        )
