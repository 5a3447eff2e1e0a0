#!/usr/bin/env python3
"""Record how KubeRay v1.7.0's own manifests start its operator (test data for the drop-in test).

Run ``.venv/bin/python hack/golden/kuberay_deployments.py --source DIR``, ``DIR`` holding
KubeRay's source at tag v1.7.0 (e.g. ``git archive v1.7.0 helm-chart ray-operator/config``
of a clone, unpacked). It renders ``helm-chart/kuberay-operator`` with ``helm template`` (the
helm this repo caches: ``hack/helm/install.sh``) under each value set of :data:`VARIANTS`,
reads the kustomize base's Deployment (``ray-operator/config/manager/manager.yaml``: the default
overlay only sets the image and namespace), and writes, for each, the operator container's
``command``, ``args`` and ``env``, and the ``config.yaml`` of the chart's ConfigMap when it
renders one.

Output: ``tests/integration/testdata/kuberay-v1.7.0/deployments.json`` (or ``--out FILE``),
JSON with ``indent=1``, sorted keys, a trailing newline::

    {"kuberay_version": "v1.7.0",
     "deployments": {"<variant>": {"source": "helm-chart/kuberay-operator" | "<path>",
                                   "values": [...],   # helm --set arguments
                                   "command": [...], "args": [...], "env": [...],
                                   "config": "<config.yaml>" | null}}}

Only what KubeRay's manifests *say* is recorded (facts: flags and values), not its files.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import subprocess
import sys
from typing import Any

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "integration" / "testdata" / "kuberay-v1.7.0" / "deployments.json"
CHART = "helm-chart/kuberay-operator"
KUSTOMIZE = "ray-operator/config/manager/manager.yaml"

VARIANTS: dict[str, list[str]] = {
    "helm-defaults": [],
    "helm-watch-namespace": ["watchNamespace={team-a,team-b}"],
    "helm-single-namespace": ["singleNamespaceInstall=true"],
    "helm-feature-gates": [
        "featureGates[0].name=RayClusterStatusConditions",
        "featureGates[0].enabled=false",
        "featureGates[1].name=RayCronJob",
        "featureGates[1].enabled=true",
    ],
    "helm-batch-scheduler": ["batchScheduler.name=volcano"],
    "helm-log-file": ["logging.baseDir=/tmp/kuberay-logs", "logging.fileName=operator.log"],
    "helm-kubernetes-proxy": ["useKubernetesProxy=true"],
    "helm-env": ["env[0].name=ENABLE_ZERO_DOWNTIME", "string:env[0].value=true"],
    "helm-configuration": [
        "configuration.enabled=true",
        "configuration.defaultPodLabels.team=ml",
        "configuration.defaultContainerEnvs[0].name=TEAM",
        "configuration.defaultContainerEnvs[0].value=ml",
    ],
}
"""Variant name -> ``helm template --set`` arguments (``string:``: ``--set-string``)."""


def _helm() -> str:
    done = subprocess.run(
        ["bash", str(ROOT / "hack" / "helm" / "install.sh")],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip().splitlines()[-1]


def _container(deployment: dict[str, Any]) -> dict[str, Any]:
    container: dict[str, Any] = deployment["spec"]["template"]["spec"]["containers"][0]
    return container


def render(source: pathlib.Path, helm: str, values: list[str]) -> dict[str, Any]:
    command = [helm, "template", "kuberay-operator", str(source / CHART), "--namespace", "kuberay"]
    for value in values:
        string = value.startswith("string:")
        command += ["--set-string" if string else "--set", value.removeprefix("string:")]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    docs = [d for d in yaml.safe_load_all(done.stdout) if d]
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    config = next(
        (d["data"]["config.yaml"] for d in docs if d["kind"] == "ConfigMap"
         and "config.yaml" in (d.get("data") or {})),
        None,
    )  # fmt: skip
    container = _container(deployment)
    return {
        "source": CHART,
        "values": values,
        "command": container.get("command") or [],
        "args": container.get("args") or [],
        "env": container.get("env") or [],
        "config": config,
    }


def kustomize(source: pathlib.Path) -> dict[str, Any]:
    docs = [d for d in yaml.safe_load_all((source / KUSTOMIZE).read_text()) if d]
    container = _container(next(d for d in docs if d["kind"] == "Deployment"))
    return {
        "source": KUSTOMIZE,
        "values": [],
        "command": container.get("command") or [],
        "args": container.get("args") or [],
        "env": container.get("env") or [],
        "config": None,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--source", type=pathlib.Path, required=True)
    parser.add_argument("--out", type=pathlib.Path, default=OUT)
    args = parser.parse_args(argv)
    if not (args.source / CHART / "Chart.yaml").is_file():
        print(f"{args.source}: no {CHART}/Chart.yaml", file=sys.stderr)
        return 2
    version = yaml.safe_load((args.source / CHART / "Chart.yaml").read_text())["version"]
    helm = _helm()
    deployments = {name: render(args.source, helm, values) for name, values in VARIANTS.items()}
    deployments["kustomize"] = kustomize(args.source)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    record = {"kuberay_version": f"v{str(version).removeprefix('v')}", "deployments": deployments}
    args.out.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    print(f"wrote {len(deployments)} deployments to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
