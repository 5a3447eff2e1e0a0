"""The ``ray.io/v1`` API types (RayCluster, RayService) as pydantic models.

Built on :mod:`runtime`; the types themselves arrive with the API issue.
"""
