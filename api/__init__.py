"""The operator's API types, built on :mod:`runtime` (never the reverse).

- :mod:`api.v1`: ``ray.io/v1`` RayCluster and RayService as pydantic models; the
  CRDs in ``config/crd/bases`` are generated from them by ``hack/gen_manifests.py``.
"""
