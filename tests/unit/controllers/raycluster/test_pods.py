"""Head and worker pods: KubeRay v1.7.0's semantics, each able to fail."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from api import v1
from controllers.raycluster import pods

IMAGE = "rayproject/ray:2.46.0"


def make(
    *,
    head: dict[str, Any] | None = None,
    head_params: dict[str, str] | None = None,
    workers: list[dict[str, Any]] | None = None,
    metadata: dict[str, Any] | None = None,
    **spec: Any,
) -> v1.RayCluster:
    container = {"name": "ray-head", "image": IMAGE, **(head or {})}
    return v1.RayCluster.model_validate(
        {
            "metadata": {"name": "demo", "namespace": "ns", **(metadata or {})},
            "spec": {
                "headGroupSpec": {
                    "rayStartParams": head_params or {},
                    "template": {"spec": {"containers": [container]}},
                },
                "workerGroupSpecs": workers
                or [{"groupName": "small", "template": worker_template()}],
                **spec,
            },
        }
    )


def worker_template(**container: Any) -> dict[str, Any]:
    return {"spec": {"containers": [{"name": "ray-worker", "image": IMAGE, **container}]}}


def ray(pod: dict[str, Any]) -> dict[str, Any]:
    container: dict[str, Any] = pod["spec"]["containers"][0]
    return container


def env(container: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for var in container.get("env", []):
        out.setdefault(var["name"], var.get("value", var.get("valueFrom")))
    return out


def flags(pod: dict[str, Any]) -> list[str]:
    """The ``--`` flags of the generated ray start line, in order (without ``--head``)."""
    line: str = env(ray(pod))["KUBERAY_GEN_RAY_START_CMD"]
    return [part for part in line.split(" ") if part.startswith("--") and part != "--head"]


def worker(cluster: v1.RayCluster, index: int = 0, **kwargs: Any) -> dict[str, Any]:
    groups = cluster.spec.worker_group_specs or []
    return pods.worker_pod(cluster, groups[index], **kwargs)


# --- the ray start line ----------------------------------------------------------------------


def test_head_start_line_has_kuberays_defaults_sorted_with_double_spaces() -> None:
    pod = pods.head_pod(make(head={"resources": {"limits": {"cpu": "2", "memory": "4Gi"}}}))
    assert ray(pod)["command"] == ["/bin/bash", "-c", "--"]
    assert ray(pod)["args"] == [
        "ulimit -n ${RAY_START_ULIMIT_OPEN_FILES:-65536}; ray start --head  --block  "
        "--dashboard-agent-listen-port=52365  "
        "--dashboard-host=0.0.0.0  --memory=4294967296  --metrics-export-port=8080  --num-cpus=2 "
    ]


def test_worker_start_line_points_at_the_head_service_fqdn() -> None:
    pod = worker(make(), cluster_domain="corp.example")
    assert flags(pod) == [
        "--address=demo-head-svc.ns.svc.corp.example:6379",
        "--block",
        "--dashboard-agent-listen-port=52365",
        "--metrics-export-port=8080",
    ]
    assert ray(pod)["args"][0].startswith(
        "ulimit -n ${RAY_START_ULIMIT_OPEN_FILES:-65536}; ray start  --address="
    )


def test_head_port_param_moves_workers_address_and_env() -> None:
    cluster = make(head_params={"port": "6380"})
    assert "--address=demo-head-svc.ns.svc.cluster.local:6380" in flags(worker(cluster))
    head_env = env(ray(pods.head_pod(cluster)))
    assert (head_env["RAY_PORT"], head_env["RAY_ADDRESS"]) == ("6380", "127.0.0.1:6380")


def test_cpu_is_rounded_up_and_falls_back_to_the_request() -> None:
    pod = pods.head_pod(make(head={"resources": {"limits": {"cpu": "1500m"}}}))
    assert "--num-cpus=2" in flags(pod)
    pod = pods.head_pod(make(head={"resources": {"requests": {"cpu": "250m", "memory": "1Gi"}}}))
    assert "--num-cpus=1" in flags(pod)
    # memory only from the limit, never from the request
    assert not [f for f in flags(pod) if f.startswith("--memory")]


def test_zero_cpu_limit_is_ignored_and_params_win_over_resources() -> None:
    pod = pods.head_pod(
        make(head={"resources": {"limits": {"cpu": "0"}, "requests": {"cpu": "3"}}})
    )
    assert "--num-cpus=3" in flags(pod)
    pod = pods.head_pod(
        make(
            head={"resources": {"limits": {"cpu": "8", "memory": "1G"}}},
            head_params={"num-cpus": "0", "memory": "5"},
        )
    )
    assert "--num-cpus=0" in flags(pod)
    assert "--memory=5" in flags(pod)


def test_gpus_from_limits_first_sorted_key_wins() -> None:
    limits = {"nvidia.com/gpu": "2", "amd.com/gpu": "1", "cpu": "1"}
    pod = pods.head_pod(make(head={"resources": {"limits": limits}}))
    assert "--num-gpus=1" in flags(pod)  # amd.com/gpu sorts first
    mig = {"nvidia.com/mig-2g.32gb": "3"}
    assert "--num-gpus=3" in flags(pods.head_pod(make(head={"resources": {"limits": mig}})))


def test_tpu_limit_goes_into_resources_json_merged_with_the_users() -> None:
    pod = pods.head_pod(
        make(
            head={"resources": {"limits": {"google.com/tpu": "4"}}},
            head_params={"resources": "'{\"Custom\": 1.5}'"},
        )
    )
    assert '--resources=\'{"Custom":1.5,"TPU":4}\'' in flags(pod)
    # a user-given TPU resource is left alone
    pod = pods.head_pod(
        make(
            head={"resources": {"limits": {"google.com/tpu": "4"}}},
            head_params={"resources": "'{\"TPU\": 8}'"},
        )
    )
    assert "--resources='{\"TPU\": 8}'" in ray(pod)["args"][0]


def test_boolean_params_are_switches_except_log_color_and_include_dashboard() -> None:
    pod = pods.head_pod(
        make(
            head_params={
                "disable-usage-stats": "True",
                "no-redirect": "false",
                "log-color": "true",
                "include-dashboard": "false",
            }
        )
    )
    assert "--disable-usage-stats" in flags(pod)
    assert not [f for f in flags(pod) if "no-redirect" in f]
    assert "--log-color=true" in flags(pod)
    assert "--include-dashboard=false" in flags(pod)
    # KubeRay v1.7.0 keeps include-log-monitor's value too (false was silently dropped)
    pod = pods.head_pod(make(head_params={"include-log-monitor": "false"}))
    assert "--include-log-monitor=false" in flags(pod)


def test_user_params_override_defaults_but_block_is_forced() -> None:
    pod = pods.head_pod(
        make(
            head_params={
                "dashboard-host": "127.0.0.1",
                "metrics-export-port": "9000",
                "block": "false",
                "dashboard-agent-listen-port": "1",
            }
        )
    )
    assert flags(pod) == [
        "--block",
        "--dashboard-agent-listen-port=1",
        "--dashboard-host=127.0.0.1",
        "--metrics-export-port=9000",
    ]


def test_group_resources_and_labels_become_flags() -> None:
    cluster = make(
        workers=[
            {
                "groupName": "g",
                "template": worker_template(resources={"limits": {"cpu": "4"}}),
                "resources": {"CPU": "500m", "memory": "1Gi", "nvidia.com/gpu": "1", "Custom": "2"},
                "labels": {"zone": "b", "accel": "x"},
            }
        ]
    )
    pod = worker(cluster)
    assert "--num-cpus=1" in flags(pod)  # the group's resources win over the container's
    assert "--memory=1073741824" in flags(pod)
    assert "--num-gpus=1" in flags(pod)
    assert "--resources='{\"Custom\":2}'" in flags(pod)
    assert "--labels=accel=x,zone=b" in flags(pod)
    # Ray node labels are pod labels too
    assert pod["metadata"]["labels"]["zone"] == "b"


def test_fractional_custom_resource_is_written_as_go_does() -> None:
    cluster = make(
        workers=[{"groupName": "g", "template": worker_template(), "resources": {"x": "250m"}}]
    )
    assert "--resources='{\"x\":0.25}'" in flags(worker(cluster))


# --- command ---------------------------------------------------------------------------------


def test_user_command_without_ray_start_runs_before_it() -> None:
    pod = pods.head_pod(make(head={"command": ["echo", "hi"], "args": ["there"]}))
    assert ray(pod)["command"] == ["/bin/bash", "-c", "--"]
    assert ray(pod)["args"][0].startswith(
        " echo  hi  there  && ulimit -n ${RAY_START_ULIMIT_OPEN_FILES:-65536}; ray start --head"
    )


def test_user_command_with_ray_start_is_kept() -> None:
    cmd = ["/bin/sh", "-c", "ray start --head --block --port=7000"]
    pod = pods.head_pod(make(head={"command": cmd}))
    assert ray(pod)["command"] == cmd
    assert "args" not in ray(pod)
    # the generated line is still recorded
    assert env(ray(pod))["KUBERAY_GEN_RAY_START_CMD"].startswith("ray start --head")


def test_overwrite_annotation_keeps_the_users_command_and_is_copied_to_the_pod() -> None:
    cluster = make(
        head={"command": ["sleep"], "args": ["infinity"]},
        metadata={"annotations": {"ray.io/overwrite-container-cmd": "TRUE"}},
    )
    pod = pods.head_pod(cluster)
    assert (ray(pod)["command"], ray(pod)["args"]) == (["sleep"], ["infinity"])
    assert pod["metadata"]["annotations"]["ray.io/overwrite-container-cmd"] == "true"
    assert worker(cluster)["metadata"]["annotations"]["ray.io/overwrite-container-cmd"] == "true"


# --- metadata --------------------------------------------------------------------------------


def test_labels_defaults_template_overrides_and_fixed_keys() -> None:
    cluster = v1.RayCluster.model_validate(
        {
            "metadata": {"name": "demo", "namespace": "ns"},
            "spec": {
                "headGroupSpec": {
                    "template": {
                        "metadata": {
                            "labels": {
                                "ray.io/cluster": "evil",
                                "ray.io/node-type": "worker",
                                "ray.io/group": "x",
                                "app.kubernetes.io/name": "mine",
                                "team": "a",
                            },
                            "annotations": {"note": "kept"},
                        },
                        "spec": {"containers": [{"name": "ray-head", "image": IMAGE}]},
                    }
                }
            },
        }
    )
    pod = pods.head_pod(cluster, created_by="me")
    assert pod["metadata"]["labels"] == {
        "ray.io/is-ray-node": "yes",
        "ray.io/cluster": "demo",
        "ray.io/node-type": "head",
        "ray.io/group": "headgroup",
        "ray.io/identifier": "demo-head",
        "app.kubernetes.io/name": "mine",
        "app.kubernetes.io/created-by": "me",
        "team": "a",
    }
    assert pod["metadata"]["annotations"] == {
        "note": "kept",
        "ray.io/ft-enabled": "false",
        "ray.io/kuberay-version": "v1.7.0",
    }
    assert pod["metadata"]["generateName"] == "demo-head-"
    assert pod["metadata"]["namespace"] == "ns"
    assert "ownerReferences" not in pod["metadata"]
    assert (pod["apiVersion"], pod["kind"]) == ("v1", "Pod")


def test_worker_metadata_drops_template_name_and_has_no_ft_annotation() -> None:
    template = worker_template()
    template["metadata"] = {"name": "fixed"}
    pod = worker(make(workers=[{"groupName": "small", "template": template}]))
    assert "name" not in pod["metadata"]
    assert pod["metadata"]["generateName"] == "demo-small-worker-"
    assert "annotations" not in pod["metadata"]
    assert pod["metadata"]["labels"]["ray.io/group"] == "small"
    assert pod["metadata"]["labels"]["ray.io/identifier"] == "demo-worker"


def test_rayservice_cluster_labels_serve_and_adds_timeouts() -> None:
    cluster = make(metadata={"labels": {"ray.io/originated-from-crd": "RayService"}})
    head = pods.head_pod(cluster)
    work = worker(cluster)
    assert head["metadata"]["labels"]["ray.io/serve"] == "false"
    assert work["metadata"]["labels"]["ray.io/serve"] == "true"
    head_env = env(ray(head))
    assert head_env["RAY_timeout_ms_task_wait_for_death_info"] == "0"
    assert head_env["RAY_gcs_server_request_timeout_seconds"] == "5"
    assert head_env["RAY_SERVE_KV_TIMEOUT_S"] == "5"
    assert head_env["RAY_USAGE_STATS_EXTRA_TAGS"] == "kuberay_version=v1.7.0;kuberay_crd=RayService"
    plain = pods.head_pod(make())
    assert "ray.io/serve" not in plain["metadata"]["labels"]
    assert "RAY_SERVE_KV_TIMEOUT_S" not in env(ray(plain))


# --- env -------------------------------------------------------------------------------------


def test_head_env_order_and_user_values_winning() -> None:
    user = [{"name": "RAY_ADDRESS", "value": "mine:1"}, {"name": "OTHER", "value": "x"}]
    pod = pods.head_pod(make(head={"env": user}))
    names = [e["name"] for e in ray(pod)["env"]]
    assert names == [
        "RAY_ADDRESS",
        "OTHER",
        "RAY_CLUSTER_NAME",
        "RAY_CLUSTER_NAMESPACE",
        "RAY_CLOUD_INSTANCE_ID",
        "RAY_NODE_TYPE_NAME",
        "KUBERAY_GEN_RAY_START_CMD",
        "RAY_PORT",
        "RAY_USAGE_STATS_KUBERAY_IN_USE",
        "RAY_USAGE_STATS_EXTRA_TAGS",
        "RAY_DASHBOARD_ENABLE_K8S_DISK_USAGE",
    ]
    assert env(ray(pod))["RAY_ADDRESS"] == "mine:1"
    assert env(ray(pod))["RAY_CLUSTER_NAME"] == {
        "fieldRef": {"fieldPath": "metadata.labels['ray.io/cluster']"}
    }


def test_worker_env_has_fq_ray_ip_and_the_head_address() -> None:
    values = env(ray(worker(make())))
    assert values["FQ_RAY_IP"] == "demo-head-svc.ns.svc.cluster.local"
    assert values["RAY_IP"] == "demo-head-svc"
    assert values["RAY_ADDRESS"] == "demo-head-svc.ns.svc.cluster.local:6379"
    assert "RAY_USAGE_STATS_EXTRA_TAGS" not in values
    assert values["RAY_NODE_TYPE_NAME"] == {
        "fieldRef": {"fieldPath": "metadata.labels['ray.io/group']"}
    }


def test_custom_head_service_name_moves_the_fqdn() -> None:
    data = make().model_dump(by_alias=True, exclude_none=True)
    data["spec"]["headGroupSpec"]["headService"] = {"metadata": {"name": "my-head"}}
    cluster = v1.RayCluster.model_validate(data)
    assert env(ray(worker(cluster)))["FQ_RAY_IP"] == "my-head.ns.svc.cluster.local"


# --- ports, probes, volumes ------------------------------------------------------------------


def test_metrics_port_added_once() -> None:
    pod = pods.head_pod(make(head={"ports": [{"name": "gcs", "containerPort": 6379}]}))
    assert ray(pod)["ports"] == [
        {"name": "gcs", "containerPort": 6379},
        {"name": "metrics", "containerPort": 8080},
    ]
    pod = pods.head_pod(make(head={"ports": [{"name": "metrics", "containerPort": 9999}]}))
    assert ray(pod)["ports"] == [{"name": "metrics", "containerPort": 9999}]


RAYLET = "wget --tries 1 -T 2 -q -O- http://localhost:52365/api/local_raylet_healthz | grep success"
GCS = "wget --tries 1 -T 10 -q -O- http://localhost:8265/api/gcs_healthz | grep success"


def test_head_probes() -> None:
    container = ray(pods.head_pod(make()))
    assert container["readinessProbe"] == {
        "exec": {"command": ["bash", "-c", f"{RAYLET} && {GCS}"]},
        "initialDelaySeconds": 10,
        "timeoutSeconds": 5,
        "periodSeconds": 5,
        "successThreshold": 1,
        "failureThreshold": 10,
    }
    assert container["livenessProbe"] == {
        "exec": {"command": ["bash", "-c", f"{RAYLET} && {GCS}"]},
        "initialDelaySeconds": 30,
        "timeoutSeconds": 5,
        "periodSeconds": 5,
        "successThreshold": 1,
        "failureThreshold": 120,
    }


def test_worker_probes_check_only_the_raylet() -> None:
    container = ray(worker(make()))
    assert container["readinessProbe"]["exec"]["command"] == ["bash", "-c", RAYLET]
    assert container["readinessProbe"]["timeoutSeconds"] == 2
    assert container["livenessProbe"]["timeoutSeconds"] == 2
    assert container["livenessProbe"]["failureThreshold"] == 120


def test_rayservice_worker_readiness_checks_the_serve_proxy() -> None:
    cluster = make(
        metadata={"labels": {"ray.io/originated-from-crd": "RayService"}},
        workers=[
            {
                "groupName": "g",
                "template": worker_template(ports=[{"name": "serve", "containerPort": 9000}]),
            }
        ],
    )
    probe = ray(worker(cluster))["readinessProbe"]
    serve = "wget --tries 1 -T 10 -q -O- http://localhost:9000/-/healthz | grep success"
    assert probe["exec"]["command"] == ["bash", "-c", f"{RAYLET} && {serve}"]
    assert probe["failureThreshold"] == 1
    # liveness is not affected
    assert ray(worker(cluster))["livenessProbe"]["exec"]["command"] == ["bash", "-c", RAYLET]


@pytest.mark.parametrize("version", ["2.53.0", "2.60.1", "v2.53", "3.0"])
def test_ray_2_53_and_later_probe_the_agents_healthz(version: str) -> None:
    """KubeRay v1.7.0: one HTTP check, ``GET :<agent port>/api/healthz``, from Ray 2.53."""
    cluster = make(
        rayVersion=version, metadata={"labels": {"ray.io/originated-from-crd": "RayService"}}
    )
    head, work = ray(pods.head_pod(cluster)), ray(worker(cluster))
    check = {"httpGet": {"path": "/api/healthz", "port": 52365}}
    for container in (head, work):
        assert {"httpGet": container["livenessProbe"]["httpGet"]} == check
        assert "exec" not in container["livenessProbe"]
    assert {"httpGet": head["readinessProbe"]["httpGet"]} == check
    assert head["livenessProbe"]["timeoutSeconds"] == 5
    # a RayService worker's readiness still runs the wget checks, with the serve proxy's
    assert "httpGet" not in work["readinessProbe"]
    assert work["readinessProbe"]["exec"]["command"][2].startswith(RAYLET + " && ")


@pytest.mark.parametrize("version", ["2.52.1", "2.46.0", "2", "", "latest", "02.60.0"])
def test_older_or_unreadable_ray_versions_keep_the_exec_probes(version: str) -> None:
    container = ray(pods.head_pod(make(rayVersion=version)))
    assert container["livenessProbe"]["exec"]["command"] == ["bash", "-c", f"{RAYLET} && {GCS}"]


def test_probe_ports_follow_the_ray_start_params() -> None:
    """KubeRay v1.7.0 probes the agent and dashboard ports the params set."""
    cluster = make(head_params={"dashboard-agent-listen-port": "9999", "dashboard-port": "8300"})
    command = ray(pods.head_pod(cluster))["livenessProbe"]["exec"]["command"][2]
    assert "http://localhost:9999/api/local_raylet_healthz" in command
    assert "http://localhost:8300/api/gcs_healthz" in command
    cluster = make(rayVersion="2.53.0", head_params={"dashboard-agent-listen-port": "9999"})
    assert ray(pods.head_pod(cluster))["readinessProbe"]["httpGet"]["port"] == 9999
    bad = make(head_params={"dashboard-agent-listen-port": "not-a-port"})
    assert ":52365/" in ray(pods.head_pod(bad))["livenessProbe"]["exec"]["command"][2]


def test_user_probes_win_one_by_one() -> None:
    mine = {"httpGet": {"path": "/", "port": 1}}
    container = ray(pods.head_pod(make(head={"readinessProbe": mine})))
    assert container["readinessProbe"] == mine
    assert container["livenessProbe"]["initialDelaySeconds"] == 30


def test_shared_memory_volume_sized_by_memory_limit_then_request() -> None:
    pod = pods.head_pod(
        make(head={"resources": {"limits": {"memory": "2G"}, "requests": {"memory": "1G"}}})
    )
    assert pod["spec"]["volumes"] == [
        {"name": "shared-mem", "emptyDir": {"medium": "Memory", "sizeLimit": "2G"}}
    ]
    assert ray(pod)["volumeMounts"] == [{"name": "shared-mem", "mountPath": "/dev/shm"}]
    pod = pods.head_pod(make(head={"resources": {"requests": {"memory": "1G"}}}))
    assert pod["spec"]["volumes"][0]["emptyDir"]["sizeLimit"] == "1G"
    pod = pods.head_pod(make())
    assert pod["spec"]["volumes"][0]["emptyDir"] == {"medium": "Memory"}


def test_shared_memory_not_added_when_the_object_store_is_elsewhere() -> None:
    """KubeRay v1.7.0: an explicit ``plasma-directory`` param means no /dev/shm volume."""
    pod = pods.head_pod(make(head_params={"plasma-directory": "/data/plasma"}))
    assert "volumes" not in pod["spec"]
    assert "--plasma-directory=/data/plasma" in flags(pod)


def test_shared_memory_not_added_when_something_is_mounted_there() -> None:
    mounts = [{"name": "mine", "mountPath": "/dev/shm"}]
    pod = pods.head_pod(make(head={"volumeMounts": mounts}))
    assert ray(pod)["volumeMounts"] == mounts
    assert "volumes" not in pod["spec"]


# --- init containers -------------------------------------------------------------------------


def test_wait_gcs_ready_init_container() -> None:
    cluster = make(
        workers=[
            {
                "groupName": "g",
                "template": {
                    "spec": {
                        "initContainers": [{"name": "mine", "image": "busybox"}],
                        "containers": [
                            {
                                "name": "w",
                                "image": IMAGE,
                                "imagePullPolicy": "Always",
                                "env": [{"name": "TLS", "value": "1"}],
                                "volumeMounts": [{"name": "certs", "mountPath": "/c"}],
                                "securityContext": {"runAsUser": 1000},
                            }
                        ],
                    }
                },
            }
        ]
    )
    pod = worker(cluster)
    mine, wait = pod["spec"]["initContainers"]
    assert mine["env"] == [
        {"name": "FQ_RAY_IP", "value": "demo-head-svc.ns.svc.cluster.local"},
        {"name": "RAY_IP", "value": "demo-head-svc"},
    ]
    assert wait["name"] == "wait-gcs-ready"
    assert (wait["image"], wait["imagePullPolicy"]) == (IMAGE, "Always")
    assert wait["command"] == ["/bin/bash", "-c", "--"]
    assert wait["securityContext"] == {"runAsUser": 1000}
    assert wait["volumeMounts"] == [{"name": "certs", "mountPath": "/c"}]  # no /dev/shm
    assert [e["name"] for e in wait["env"]] == ["TLS", "FQ_RAY_IP", "RAY_IP"]
    assert wait["resources"] == {
        "limits": {"cpu": "200m", "memory": "256Mi"},
        "requests": {"cpu": "200m", "memory": "256Mi"},
    }
    script = wait["args"][0]
    assert (
        "ray health-check --address demo-head-svc.ns.svc.cluster.local:6379 > /dev/null 2>&1"
        in script
    )
    assert "sleep 5" in script
    assert script.startswith("\n\t\t\t\t\tSECONDS=0\n")
    assert script.endswith("done\n\t\t\t\t")


def test_head_has_no_wait_gcs_ready() -> None:
    assert "initContainers" not in pods.head_pod(make())["spec"]


# --- fault tolerance -------------------------------------------------------------------------


def test_gcs_fault_tolerance_options() -> None:
    cluster = make(
        metadata={"uid": "u-1"},
        gcsFaultToleranceOptions={
            "redisAddress": "redis:6379",
            "redisPassword": {"valueFrom": {"secretKeyRef": {"name": "s", "key": "p"}}},
        },
    )
    head = pods.head_pod(cluster)
    assert head["metadata"]["annotations"] == {
        "ray.io/ft-enabled": "true",
        "ray.io/external-storage-namespace": "u-1",
        "ray.io/kuberay-version": "v1.7.0",
    }
    values = env(ray(head))
    assert values["RAY_external_storage_namespace"] == "u-1"
    assert values["RAY_REDIS_ADDRESS"] == "redis:6379"
    assert values["REDIS_PASSWORD"] == {"secretKeyRef": {"name": "s", "key": "p"}}
    assert "--redis-password=$REDIS_PASSWORD" in flags(head)
    assert env(ray(worker(cluster)))["RAY_gcs_rpc_server_reconnect_timeout_s"] == "600"
    # the input is untouched
    assert "redis-password" not in cluster.spec.head_group_spec.ray_start_params


def test_ft_annotation_with_redis_password_param() -> None:
    cluster = make(
        metadata={
            "annotations": {"ray.io/ft-enabled": "true", "ray.io/external-storage-namespace": "x"}
        },
        head_params={"redis-password": "secret"},
    )
    head = pods.head_pod(cluster)
    assert head["metadata"]["annotations"]["ray.io/external-storage-namespace"] == "x"
    assert env(ray(head))["REDIS_PASSWORD"] == "secret"
    assert "RAY_REDIS_ADDRESS" not in env(ray(head))


# --- multi-host, helpers, purity -------------------------------------------------------------


def test_cluster_namespace_env_after_the_cluster_name() -> None:
    for pod in (pods.head_pod(make()), worker(make())):
        names = [e["name"] for e in ray(pod)["env"]]
        assert names[names.index("RAY_CLUSTER_NAME") + 1] == "RAY_CLUSTER_NAMESPACE"
        assert env(ray(pod))["RAY_CLUSTER_NAMESPACE"] == {
            "fieldRef": {"fieldPath": "metadata.namespace"}
        }


def test_only_the_head_carries_the_kuberay_version() -> None:
    assert pods.head_pod(make())["metadata"]["annotations"]["ray.io/kuberay-version"] == "v1.7.0"
    assert "annotations" not in worker(make())["metadata"]


def test_replica_slots_fill_the_lowest_free_indexes() -> None:
    single = v1.WorkerGroupSpec(group_name="g", template={}, replicas=2)
    assert pods.replica_slots(single) == [{"replica_index": 0}, {"replica_index": 1}]
    assert pods.replica_slots(single, used=[0, 2], replicas=2) == [
        {"replica_index": 1},
        {"replica_index": 3},
    ]
    multi = v1.WorkerGroupSpec(group_name="tpu", template={}, replicas=2, num_of_hosts=2)
    slots = pods.replica_slots(multi)
    assert [(s["replica_index"], s["host_index"]) for s in slots] == [
        (0, 0),
        (0, 1),
        (1, 0),
        (1, 1),
    ]
    first, second = slots[0]["replica_name"], slots[2]["replica_name"]
    assert first == slots[1]["replica_name"]
    assert first != second
    assert all(s["replica_name"].startswith("tpu-") and len(s["replica_name"]) == 9 for s in slots)


def test_multihost_labels_only_when_asked() -> None:
    cluster = make(workers=[{"groupName": "tpu", "numOfHosts": 2, "template": worker_template()}])
    plain = worker(cluster)
    assert not [k for k in plain["metadata"]["labels"] if "replica" in k]
    indexed = worker(cluster, replica_name="tpu-abcde", replica_index=3, host_index=1)
    labels = indexed["metadata"]["labels"]
    assert labels["ray.io/worker-group-replica-name"] == "tpu-abcde"
    assert labels["ray.io/worker-group-replica-index"] == "3"
    assert labels["ray.io/replica-host-index"] == "1"


def test_selector_and_pod_helpers() -> None:
    assert pods.selector("c") == "ray.io/cluster=c"
    assert pods.selector("c", node_type="worker", group="g") == (
        "ray.io/cluster=c,ray.io/node-type=worker,ray.io/group=g"
    )
    head = pods.head_pod(make())
    work = worker(make())
    assert pods.is_head(head)
    assert not pods.is_head(work)
    assert (pods.group_of(head), pods.group_of(work)) == ("headgroup", "small")
    assert pods.node_type_of({}) is None


@pytest.mark.parametrize(
    ("replicas", "low", "high", "hosts", "suspend", "want"),
    [
        (2, 0, 5, 1, None, 2),
        (0, 1, 5, 1, None, 1),
        (9, 0, 5, 1, None, 5),
        (1, 4, 3, 1, None, 3),
        (2, 0, 5, 4, None, 8),
        (2, 0, 5, 1, True, 0),
    ],
)
def test_desired_workers(
    replicas: int, low: int, high: int, hosts: int, suspend: bool | None, want: int
) -> None:
    group = v1.WorkerGroupSpec(
        group_name="g",
        template={},
        replicas=replicas,
        min_replicas=low,
        max_replicas=high,
        num_of_hosts=hosts,
        suspend=suspend,
    )
    assert pods.desired_workers(group) == want


def test_builders_never_mutate_the_cluster() -> None:
    cluster = make(
        head={
            "resources": {"limits": {"cpu": "1", "memory": "1G"}},
            "env": [{"name": "A", "value": "1"}],
        },
        enableInTreeAutoscaling=True,
        autoscalerOptions={"env": [{"name": "B", "value": "2"}]},
        metadata={"labels": {"ray.io/originated-from-crd": "RayService"}},
    )
    before = copy.deepcopy(cluster.model_dump(by_alias=True))
    pods.head_pod(cluster)
    worker(cluster)
    assert cluster.model_dump(by_alias=True) == before
    # and two builds are equal (no shared state between calls)
    assert json.dumps(pods.head_pod(cluster), sort_keys=True) == json.dumps(
        pods.head_pod(cluster), sort_keys=True
    )


def test_missing_container_is_a_value_error() -> None:
    cluster = v1.RayCluster.model_validate(
        {"metadata": {"name": "x"}, "spec": {"headGroupSpec": {"template": {"spec": {}}}}}
    )
    with pytest.raises(ValueError, match="at least one container"):
        pods.head_pod(cluster)


@pytest.mark.parametrize(
    ("amount", "written"),
    [
        ("2", "2"),
        ("1500m", "1.5"),
        ("1e22", "1e+22"),
        ("1n", "1e-9"),
        ("123456789012", "123456789012"),
    ],
)
def test_custom_resource_amounts_are_written_like_go_json(amount: str, written: str) -> None:
    cluster = make(
        workers=[{"groupName": "g", "template": worker_template(), "resources": {"x": amount}}]
    )
    assert f"--resources='{{\"x\":{written}}}'" in flags(worker(cluster))


def test_unreadable_resources_param_stops_accelerator_flags_as_in_kuberay() -> None:
    # KubeRay gives up on accelerators (GPUs included) when it cannot read --resources
    limits = {"nvidia.com/gpu": "1", "google.com/tpu": "4"}
    for unreadable in ("'not json'", '\'{"x": "1"}\''):
        pod = pods.head_pod(
            make(head={"resources": {"limits": limits}}, head_params={"resources": unreadable})
        )
        assert not [f for f in flags(pod) if f.startswith("--num-gpus")]
        assert unreadable in ray(pod)["args"][0]


def test_external_storage_namespace_option_wins() -> None:
    cluster = make(
        metadata={"uid": "u-1", "annotations": {"ray.io/external-storage-namespace": "ann"}},
        gcsFaultToleranceOptions={"redisAddress": "r:6379", "externalStorageNamespace": "opt"},
    )
    head = pods.head_pod(cluster)
    assert head["metadata"]["annotations"]["ray.io/external-storage-namespace"] == "opt"
    assert env(ray(head))["RAY_external_storage_namespace"] == "opt"


# --- the operator's pod defaults (KubeRay's Configuration file) -------------------------------

DEFAULTS = pods.PodDefaults(
    head_sidecars=({"name": "head-log", "image": "fluentbit"},),
    worker_sidecars=({"name": "worker-log", "image": "fluentbit"},),
    env=({"name": "TEAM", "value": "ml"}, {"name": "MINE", "value": "default"}),
    annotations={"team": "ml", "mine": "default"},
    labels={"cost-center": "42", "mine": "default", "ray.io/node-type": "not-this"},
)


def test_pod_defaults_fill_in_what_the_template_leaves_out() -> None:
    template = {
        "metadata": {"labels": {"mine": "template"}, "annotations": {"mine": "template"}},
        "spec": {"containers": [{"name": "ray-worker", "image": IMAGE,
                                 "env": [{"name": "MINE", "value": "template"}]}]},
    }  # fmt: skip
    cluster = make(
        head={"env": [{"name": "MINE", "value": "template"}]},
        workers=[{"groupName": "small", "template": template}],
        enableInTreeAutoscaling=True,
    )
    head = pods.head_pod(cluster, defaults=DEFAULTS)
    pod = worker(cluster, defaults=DEFAULTS)
    for built in (head, pod):
        labels, annotations = built["metadata"]["labels"], built["metadata"]["annotations"]
        assert labels["cost-center"] == "42"
        assert annotations["team"] == "ml"
        assert env(ray(built))["TEAM"] == "ml"
        assert env(ray(built))["MINE"] == "template", "the template's own env var wins"
    assert head["metadata"]["labels"]["ray.io/node-type"] == "head", "KubeRay's labels win"
    assert pod["metadata"]["labels"]["mine"] == "template", "the template's label wins"
    assert pod["metadata"]["annotations"]["mine"] == "template"
    assert [c["name"] for c in head["spec"]["containers"]] == [
        "ray-head", "head-log", "autoscaler"
    ], "sidecars after the template's containers, before the autoscaler"  # fmt: skip
    assert [c["name"] for c in pod["spec"]["containers"]] == ["ray-worker", "worker-log"]
    (init,) = pod["spec"]["initContainers"]
    assert "TEAM" not in env(init), "KubeRay builds wait-gcs-ready before adding its defaults"


def test_pod_defaults_are_copied_not_shared() -> None:
    cluster = make()
    first = pods.head_pod(cluster, defaults=DEFAULTS)
    first["spec"]["containers"][1]["image"] = "changed"
    ray(first)["env"][0]["value"] = "changed"
    second = pods.head_pod(cluster, defaults=DEFAULTS)
    assert second["spec"]["containers"][1]["image"] == "fluentbit"
    assert DEFAULTS.head_sidecars[0]["image"] == "fluentbit"
    assert DEFAULTS.env[0]["value"] == "ml"


def test_no_pod_defaults_change_nothing() -> None:
    cluster = make()
    assert pods.head_pod(cluster, defaults=pods.PodDefaults()) == pods.head_pod(cluster)
    assert worker(cluster, defaults=pods.PodDefaults()) == worker(cluster)
