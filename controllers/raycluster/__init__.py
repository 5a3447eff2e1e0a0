"""The RayCluster controller: builders of the objects KubeRay v1.5.0 creates (the reconciler follows)."""
