"""controllers/rayjob/submitter.py: KubeRay v1.7.0's script, submitter Job and sidecar.

The Go formats (``strconv.Quote``, ``encoding/json``, ``%f`` of a float32) were checked
against Go itself; the expected scripts below are BuildJobSubmitCommand's words.
"""

# ruff: noqa: E501 (the tables read one case per line)
from __future__ import annotations

from typing import Any

import pytest

from api import v1
from controllers.rayjob import submitter

HEALTH = (
    "python -c \"import urllib.request; r=urllib.request.urlopen('{url}', timeout=10); "
    "exit(0 if b'success' in r.read() else 1)\""
)
HEAD = {
    "headGroupSpec": {
        "template": {
            "spec": {
                "containers": [
                    {
                        "name": "ray-head",
                        "image": "rayproject/ray:2.60.0",
                        "ports": [{"name": "dashboard", "containerPort": 9000}],
                    }
                ]
            }
        }
    }
}


def _job(spec: dict[str, Any] | None = None, **status: Any) -> v1.RayJob:
    return v1.RayJob.model_validate(
        {
            "metadata": {"name": "pi", "namespace": "ml", "uid": "uid-1"},
            "spec": {"entrypoint": "python pi.py", "rayClusterSpec": HEAD, **(spec or {})},
            "status": {"jobId": "pi-abcde", "dashboardURL": "pi-x-head-svc.ml.svc:8265", **status},
        }
    )


def _cluster(spec: dict[str, Any] | None = None) -> v1.RayCluster:
    return v1.RayCluster.model_validate(
        {"metadata": {"name": "pi-x", "namespace": "ml"}, "spec": {**HEAD, **(spec or {})}}
    )


ADDR = "http://pi-x-head-svc.ml.svc:8265"
WAIT = (
    f"until {HEALTH.format(url=ADDR + '/api/gcs_healthz')} >/dev/null 2>&1 ; do echo "
    f'"Waiting for Ray Dashboard GCS to become healthy at {ADDR} ..." ; sleep 2 ; done ;'
)


def test_k8s_job_mode_script() -> None:
    cmd, args = submitter.command(
        _job(), address="pi-x-head-svc.ml.svc:8265", status_check=True, login_shell=False
    )
    assert cmd == ["/bin/bash", "-ce", "--"]
    assert args == [
        f"{WAIT} if ! ray job status --address {ADDR} pi-abcde >/dev/null 2>&1 ; then "
        f"ray job submit --address {ADDR} --no-wait --submission-id pi-abcde -- python pi.py ; "
        f"fi ; ray job logs --address {ADDR} --follow pi-abcde"
    ]


def test_every_option() -> None:
    job = _job(
        {
            "entrypoint": "  python -c 'print(1)'\n",
            "runtimeEnvYAML": "pip:\n  - numpy\nenv_vars:\n  Z: '1'\n  A: <b&c>\nworking_dir: .\n",
            "metadata": {"team": "ml", "owner": 'a"b'},
            "entrypointNumCpus": 2,
            "entrypointNumGpus": 0.1,
            "entrypointResources": '{"custom": 1}',
        }
    )
    _, args = submitter.command(job, address=ADDR, status_check=True, login_shell=True)
    env = (
        '"{\\"env_vars\\":{\\"A\\":\\"\\\\u003cb\\\\u0026c\\\\u003e\\",\\"Z\\":\\"1\\"},'
        '\\"pip\\":[\\"numpy\\"],\\"working_dir\\":\\".\\"}"'
    )
    metadata = '"{\\"owner\\":\\"a\\\\\\"b\\",\\"team\\":\\"ml\\"}"'
    assert args[0].split(" ; then ")[1] == (
        f"ray job submit --address {ADDR} --no-wait --runtime-env-json {env} "
        f"--metadata-json {metadata} --submission-id pi-abcde --entrypoint-num-cpus 2.000000 "
        '--entrypoint-num-gpus 0.100000 --entrypoint-resources "{\\"custom\\": 1}" '
        f"-- python -c 'print(1)' ; fi ; ray job logs --address {ADDR} --follow pi-abcde"
    )


def test_login_shell_and_no_status_check() -> None:
    cmd, args = submitter.command(_job(), address=ADDR, status_check=False, login_shell=True)
    assert cmd == ["/bin/bash", "-cel", "--"]
    assert args == [
        f"{WAIT} ray job submit --address {ADDR} --submission-id pi-abcde -- python pi.py ;"
    ]


def test_sidecar_asks_localhost() -> None:
    job = _job({"submissionMode": "SidecarMode"})
    address = submitter.sidecar_address(job.spec.ray_cluster_spec)  # type: ignore[arg-type]
    assert address == "http://127.0.0.1:9000"
    _, args = submitter.command(job, address=address, status_check=False, login_shell=False)
    assert args[0].startswith(
        f"until {HEALTH.format(url='http://localhost:9000/api/gcs_healthz')} >/dev/null 2>&1 ; do "
        'echo "Waiting for Ray Dashboard GCS to become healthy at http://127.0.0.1:9000 ..." ;'
    )


@pytest.mark.parametrize(
    ("spec", "flag"),
    [
        ({"entrypointNumCpus": 0}, "--entrypoint-num-cpus"),
        ({"entrypointNumGpus": -1}, "--entrypoint-num-gpus"),
        ({"runtimeEnvYAML": ""}, "--runtime-env-json"),
        ({"metadata": {}}, "--metadata-json"),
        ({"entrypointResources": ""}, "--entrypoint-resources"),
    ],
)
def test_options_left_out(spec: dict[str, Any], flag: str) -> None:
    _, args = submitter.command(_job(spec), address=ADDR, status_check=True, login_shell=False)
    assert flag not in args[0]


def test_no_job_id_no_submission_id() -> None:
    _, args = submitter.command(_job(jobId=""), address=ADDR, status_check=False, login_shell=False)
    assert "--submission-id" not in args[0]


def test_runtime_env_without_document_is_null() -> None:
    _, args = submitter.command(
        _job({"runtimeEnvYAML": "# none"}), address=ADDR, status_check=False, login_shell=False
    )
    assert '--runtime-env-json "null"' in args[0]


def test_unbuildable() -> None:
    old = _job({"metadata": {"a": "b"}, "rayClusterSpec": {**HEAD, "rayVersion": "2.5.0"}})
    with pytest.raises(ValueError, match=r"Ray 2\.6\.0"):
        submitter.command(old, address=ADDR, status_check=True, login_shell=False)
    with pytest.raises(ValueError, match="YAML mapping"):
        submitter.command(
            _job({"runtimeEnvYAML": "[1]"}), address=ADDR, status_check=True, login_shell=False
        )


def test_default_job() -> None:
    manifest = submitter.job(_job(), _cluster(), login_shell=False)
    container = manifest["spec"]["template"]["spec"]["containers"][0]
    cmd, args = submitter.command(_job(), address=ADDR, status_check=True, login_shell=False)
    labels = {
        "ray.io/originated-from-cr-name": "pi",
        "ray.io/originated-from-crd": "RayJob",
        "app.kubernetes.io/created-by": "kuberay-operator",
    }
    assert manifest == {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "pi",
            "namespace": "ml",
            "labels": labels,
            "ownerReferences": [
                {"apiVersion": "ray.io/v1", "kind": "RayJob", "name": "pi", "uid": "uid-1",
                 "controller": True, "blockOwnerDeletion": True}
            ],
        },
        "spec": {
            "backoffLimit": 2,
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "ray-job-submitter",
                            "image": "rayproject/ray:2.60.0",
                            "resources": {
                                "limits": {"cpu": "1", "memory": "1Gi"},
                                "requests": {"cpu": "500m", "memory": "200Mi"},
                            },
                            "command": cmd,
                            "args": args,
                            "env": [
                                {"name": "PYTHONUNBUFFERED", "value": "1"},
                                {"name": "RAY_DASHBOARD_ADDRESS", "value": "pi-x-head-svc.ml.svc:8265"},
                                {"name": "RAY_JOB_SUBMISSION_ID", "value": "pi-abcde"},
                            ],
                        }
                    ],
                },
            },
        },
    }  # fmt: skip
    assert container["name"] == "ray-job-submitter"


def test_users_template_and_command_are_kept() -> None:
    template = {
        "metadata": {"labels": {"team": "ml", "app.kubernetes.io/created-by": "me"}},
        "spec": {
            "containers": [
                {"name": "mine", "command": ["sh", "-c"], "args": ["ray job submit ..."],
                 "env": [{"name": "PYTHONUNBUFFERED", "value": "0"}]},
                {"name": "other"},
            ]
        },
    }  # fmt: skip
    job = _job({"submitterPodTemplate": template, "submitterConfig": {"backoffLimit": 0}})
    manifest = submitter.job(job, _cluster(), login_shell=True, owner={"uid": "x"})
    pod = manifest["spec"]["template"]
    assert manifest["spec"]["backoffLimit"] == 0
    assert manifest["metadata"]["ownerReferences"] == [{"uid": "x"}]
    assert pod["metadata"]["labels"]["team"] == "ml"
    assert pod["metadata"]["labels"]["app.kubernetes.io/created-by"] == "kuberay-operator"
    first, second = pod["spec"]["containers"]
    assert first["command"] == ["sh", "-c"]
    assert first["args"] == ["ray job submit ..."]
    assert [e["name"] for e in first["env"]] == [  # appended, as KubeRay: the later one wins
        "PYTHONUNBUFFERED", "PYTHONUNBUFFERED", "RAY_DASHBOARD_ADDRESS", "RAY_JOB_SUBMISSION_ID",
    ]  # fmt: skip
    assert second == {"name": "other"}
    assert template["spec"]["containers"][0].get("env") == [  # type: ignore[index]
        {"name": "PYTHONUNBUFFERED", "value": "0"}
    ]  # the RayJob's own template is not changed


def test_template_without_container() -> None:
    with pytest.raises(ValueError, match="at least one container"):
        submitter.job(_job({"submitterPodTemplate": {"spec": {}}}), _cluster(), login_shell=False)


def test_token_auth() -> None:
    cluster = _cluster({"rayVersion": "2.60.0", "authOptions": {"mode": "token"}})
    container = submitter.job(_job(), cluster, login_shell=False)["spec"]["template"]["spec"]
    env = container["containers"][0]["env"]
    assert env[3:] == [
        {"name": "RAY_AUTH_MODE", "value": "token"},
        {"name": "RAY_AUTH_TOKEN", "valueFrom": {"secretKeyRef": {"name": "pi-x", "key": "auth_token"}}},
    ]  # fmt: skip
    assert "volumes" not in container


def test_k8s_token_auth() -> None:
    """Kubernetes token auth (a selected cluster only): no token, the projected volume."""
    cluster = _cluster(
        {"rayVersion": "2.60.0", "authOptions": {"mode": "token", "enableK8sTokenAuth": True}}
    )
    pod = submitter.job(_job(), cluster, login_shell=False)["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert [e["name"] for e in container["env"]][3:] == [
        "RAY_AUTH_MODE",
        "RAY_ENABLE_K8S_TOKEN_AUTH",
    ]
    assert container["volumeMounts"] == [
        {
            "name": "ray-token",
            "mountPath": "/var/run/secrets/ray.io/serviceaccount",
            "readOnly": True,
        }
    ]
    assert pod["volumes"] == [
        {
            "name": "ray-token",
            "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]},
        }
    ]


def test_k8s_token_auth_without_token_mode_adds_only_the_volume() -> None:
    cluster = _cluster({"authOptions": {"enableK8sTokenAuth": True}})
    pod = submitter.job(_job(), cluster, login_shell=False)["spec"]["template"]["spec"]
    assert [e["name"] for e in pod["containers"][0]["env"]] == [
        "PYTHONUNBUFFERED", "RAY_DASHBOARD_ADDRESS", "RAY_JOB_SUBMISSION_ID",
    ]  # fmt: skip
    assert [v["name"] for v in pod["volumes"]] == ["ray-token"]


@pytest.mark.parametrize("restart", [False, True])
def test_sidecar_container(restart: bool) -> None:
    job = _job({"submissionMode": "SidecarMode"}, dashboardURL="")
    container = submitter.sidecar_container(job, _cluster(), restart=restart)
    cmd, args = submitter.command(
        job, address="http://127.0.0.1:9000", status_check=restart, login_shell=False
    )
    expected: dict[str, Any] = {
        "name": "ray-job-submitter",
        "image": "rayproject/ray:2.60.0",
        "resources": {
            "limits": {"cpu": "1", "memory": "1Gi"},
            "requests": {"cpu": "500m", "memory": "200Mi"},
        },
        "command": cmd,
        "args": args,
        "env": [
            {"name": "PYTHONUNBUFFERED", "value": "1"},
            {"name": "RAY_DASHBOARD_ADDRESS"},
            {"name": "RAY_JOB_SUBMISSION_ID", "value": "pi-abcde"},
        ],
    }
    if restart:
        expected["restartPolicy"] = "OnFailure"
    assert container == expected
    assert ("--no-wait" in args[0]) is restart


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a: 1.0\nb: 1e3\nc: yes\nd: 2024-01-02\ne: ~", '{"a":1,"b":"1e3","c":true,"d":"2024-01-02","e":null}'),
        ("x: 0.000001\ny: 1.0e+21\nz: -0.5", '{"x":0.000001,"y":1e+21,"z":-0.5}'),
        ("k: \"\\u2028\\x01\"", '{"k":"\\u2028\\u0001"}'),
    ],
)  # fmt: skip
def test_runtime_env_json_is_gos(text: str, expected: str) -> None:
    assert submitter.runtime_env_json(_job({"runtimeEnvYAML": text})) == expected


@pytest.mark.parametrize(
    ("version", "ok"),
    [("2.6.0", True), ("2.60.0", True), ("v2.6", True), ("3", True), ("2.5.9", False),
     ("2.6.0-rc1", False), ("latest", False)],
)  # fmt: skip
def test_metadata_needs_ray_2_6(version: str, ok: bool) -> None:
    job = _job({"metadata": {"a": "b"}, "rayClusterSpec": {**HEAD, "rayVersion": version}})
    assert (submitter.metadata_problem(job) is None) is ok
