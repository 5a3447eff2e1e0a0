"""What a RayService of the e2e suite needs when a real kubelet runs its pods: against
``$KUBECONFIG``'s cluster (``make kind-e2e``), instead of the suite's own control plane
and the Ray simulator.

- **Applications**: the sample's come from a GitHub archive (a runtime_env
  ``working_dir``), which a cluster without a route to the internet cannot fetch. Each
  becomes ``rso_e2e_apps:named`` (tests/e2e/testdata/realray_apps), which answers its
  application's name as the simulator does, so every expectation of the suite holds as
  written. The module reaches the Ray containers in a ConfigMap (:func:`configmap`)
  mounted at :data:`MOUNT` and put on their ``PYTHONPATH``: the Ray image stays Ray's.
- **Upgrades**: a cluster can only run the Ray image its nodes have, so a change that
  needs a new RayCluster is :func:`new_revision` (an env var of every Ray container)
  rather than another ``rayVersion`` and image.
- **Room**: an upgrade runs two clusters at once; on a small node (kind on two cores) the
  sample's CPU requests would leave the second pending. Requests are lowered to
  :data:`CPU_REQUEST` (limits, and so Ray's own CPU count, unchanged).

>>> obj = {"spec": {"serveConfigV2": "applications:\\n- {name: a, route_prefix: /a, "
...        "import_path: x.y, runtime_env: {working_dir: 'https://example.invalid/z.zip'}}\\n",
...        "rayClusterConfig": {"headGroupSpec": {"template": {"spec": {"containers": [
...        {"name": "ray-head", "resources": {"requests": {"cpu": "1"}}}]}}}}}}
>>> fit(obj)
>>> print(obj["spec"]["serveConfigV2"], end="")
applications:
- name: a
  route_prefix: /a
  import_path: rso_e2e_apps:named
  args:
    name: a
>>> head = obj["spec"]["rayClusterConfig"]["headGroupSpec"]["template"]["spec"]
>>> head["containers"][0]["resources"]["requests"]["cpu"], head["volumes"][0]["configMap"]
('100m', {'name': 'rso-e2e-apps'})
"""

from __future__ import annotations

import os
import pathlib
from typing import Any

import yaml

__all__ = [
    "CONFIGMAP",
    "CPU_REQUEST",
    "MOUNT",
    "app",
    "configmap",
    "enabled",
    "fit",
    "new_revision",
]

Obj = dict[str, Any]
MODULE = pathlib.Path(__file__).parent / "testdata" / "realray_apps" / "rso_e2e_apps.py"
CONFIGMAP = "rso-e2e-apps"
MOUNT = "/home/ray/rso-e2e-apps"
CPU_REQUEST = "100m"


def enabled() -> bool:
    """True against ``$KUBECONFIG``'s cluster (the suite's world is external)."""
    return bool(os.environ.get("KUBECONFIG"))


def app(name: str, route_prefix: str) -> Obj:
    """A Serve application answering ``name`` under ``route_prefix``."""
    return {"name": name, "route_prefix": route_prefix,
            "import_path": "rso_e2e_apps:named", "args": {"name": name}}  # fmt: skip


def configmap(namespace: str) -> Obj:
    """The ConfigMap holding ``rso_e2e_apps.py``, for the namespace of a RayService."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": CONFIGMAP, "namespace": namespace},
        "data": {MODULE.name: MODULE.read_text()},
    }


def _pod(spec: Obj) -> None:
    spec.setdefault("volumes", []).append({"name": CONFIGMAP, "configMap": {"name": CONFIGMAP}})
    for container in spec.get("containers") or []:
        container.setdefault("volumeMounts", []).append(
            {"name": CONFIGMAP, "mountPath": MOUNT, "readOnly": True}
        )
        container.setdefault("env", []).append({"name": "PYTHONPATH", "value": MOUNT})
        requests = container.setdefault("resources", {}).setdefault("requests", {})
        if "cpu" in requests:
            requests["cpu"] = CPU_REQUEST


def fit(obj: Obj) -> None:
    """Change a RayService (in place) as the module docstring says."""
    spec = obj["spec"]
    config = yaml.safe_load(spec["serveConfigV2"])
    config["applications"] = [app(a["name"], a["route_prefix"]) for a in config["applications"]]
    spec["serveConfigV2"] = yaml.safe_dump(config, sort_keys=False)
    cluster = spec["rayClusterConfig"]
    for group in [cluster["headGroupSpec"], *(cluster.get("workerGroupSpecs") or [])]:
        _pod(group["template"]["spec"])


def new_revision(obj: Obj) -> None:
    """A new revision of every Ray container (``RSO_E2E_REVISION``, counting up): a new
    RayCluster with the same image.

    >>> obj = {"spec": {"rayClusterConfig": {"headGroupSpec": {"template": {"spec": {
    ...     "containers": [{"name": "ray-head"}]}}}}}}
    >>> new_revision(obj); new_revision(obj)
    >>> obj["spec"]["rayClusterConfig"]["headGroupSpec"]["template"]["spec"]["containers"]
    [{'name': 'ray-head', 'env': [{'name': 'RSO_E2E_REVISION', 'value': '2'}]}]
    """
    cluster = obj["spec"]["rayClusterConfig"]
    for group in [cluster["headGroupSpec"], *(cluster.get("workerGroupSpecs") or [])]:
        for container in group["template"]["spec"].get("containers") or []:
            env = container.setdefault("env", [])
            found = [e for e in env if e["name"] == "RSO_E2E_REVISION"]
            if found:
                found[0]["value"] = str(int(found[0]["value"]) + 1)
            else:
                env.append({"name": "RSO_E2E_REVISION", "value": "1"})
