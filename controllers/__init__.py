"""The RayCluster and RayService reconcilers, built on :mod:`runtime` and :mod:`api`.

The reconcilers arrive with their own issues.
"""
