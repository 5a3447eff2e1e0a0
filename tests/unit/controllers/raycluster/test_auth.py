"""Token authentication (``authOptions``) as KubeRay v1.7.0 sets it up: the rules, the pods'
env and volumes, and the token Secret the reconciler makes before the pods.

What v1.7.0 does is read from its source (``common/pod.go`` ``configureTokenAuth`` /
``SetContainerTokenAuthEnvVars``, ``raycluster_controller.go`` ``reconcileAuthSecret``,
``utils/validation.go`` ``ValidateRayClusterSpec``); these tests pin ours to it.
"""

from __future__ import annotations

import base64
import copy
from typing import Any

import pytest

import api.v1 as v1
from controllers.raycluster import auth, pods, validation
from controllers.rayservice import validation as rayservice_validation
from tests.unit.controllers.raycluster import scenario

Env = scenario.Env
SECRETS = auth.SECRETS


def model(name: str = "demo", **spec: Any) -> v1.RayCluster:
    obj = scenario.raycluster(name, **{"rayVersion": "2.60.0", **spec})
    return v1.RayCluster.model_validate(obj)


def env_of(container: dict[str, Any]) -> list[str]:
    return [e["name"] for e in container.get("env") or []]


def var(container: dict[str, Any], name: str) -> dict[str, Any]:
    [found] = [e for e in container["env"] if e["name"] == name]
    return found


TOKEN_REF = {"secretKeyRef": {"name": "demo", "key": "auth_token"}}


# -- the rules (ValidateRayClusterSpec) ------------------------------------------------------

REFUSED: list[tuple[dict[str, Any], str]] = [
    ({"authOptions": {"mode": "token"}, "rayVersion": ""}, "needs rayVersion set"),
    ({"authOptions": {"mode": "token"}, "rayVersion": None}, "needs rayVersion set"),
    ({"authOptions": {"mode": "token"}, "rayVersion": "latest"}, "is not a version"),
    ({"authOptions": {"mode": "token"}, "rayVersion": "2"}, "is not a version"),
    ({"authOptions": {"mode": "token"}, "rayVersion": "2.51.9"}, "needs Ray 2.52.0 or later"),
    ({"authOptions": {"mode": "token", "enableK8sTokenAuth": True}, "rayVersion": "2.54.0"},
     "needs Ray 2.55.0 or later"),
    ({"authOptions": {"mode": "token", "enableK8sTokenAuth": True, "secretName": "s"}},
     "cannot both be set"),
    ({"authOptions": {"enableK8sTokenAuth": True}}, "needs authOptions.mode 'token'"),
    ({"authOptions": {"mode": "disabled", "enableK8sTokenAuth": True}},
     "needs authOptions.mode 'token'"),
]  # fmt: skip

ACCEPTED: list[dict[str, Any]] = [
    {"authOptions": {"mode": "token"}, "rayVersion": "2.52.0"},
    {"authOptions": {"mode": "token"}, "rayVersion": "2.52"},
    {"authOptions": {"mode": "token"}, "rayVersion": "v2.60.0rc1"},
    {"authOptions": {"mode": "token", "secretName": "mine"}},
    {"authOptions": {"mode": "token", "enableK8sTokenAuth": True}, "rayVersion": "2.55.0"},
    {"authOptions": {"mode": "disabled"}, "rayVersion": ""},  # no Ray needed when off
    {"authOptions": {}, "rayVersion": "2.9.0"},
    {"authOptions": {"enableK8sTokenAuth": False}},
]


@pytest.mark.parametrize(("spec", "fragment"), REFUSED)
def test_what_kuberay_refuses_is_refused_naming_the_field(
    spec: dict[str, Any], fragment: str
) -> None:
    found = validation.problems(model(**spec))
    assert [p for p in found if fragment in p and "authOptions" in p], found


@pytest.mark.parametrize("spec", ACCEPTED)
def test_what_kuberay_accepts_is_accepted(spec: dict[str, Any]) -> None:
    assert validation.problems(model(**spec)) == []


def test_a_rayservice_refuses_kubernetes_token_auth_and_takes_the_token_mode() -> None:
    def service(options: dict[str, Any]) -> dict[str, Any]:
        config = scenario.raycluster(rayVersion="2.60.0", authOptions=options)["spec"]
        return {"metadata": {"name": "svc", "namespace": "ns"},
                "spec": {"rayClusterConfig": config}}  # fmt: skip

    found = rayservice_validation.problems(service({"mode": "token", "enableK8sTokenAuth": True}))
    assert found == [
        "spec.rayClusterConfig.authOptions.enableK8sTokenAuth is not supported for a "
        "RayService (as in KubeRay): use mode 'token' with the generated or a named Secret"
    ]
    assert rayservice_validation.problems(service({"mode": "token"})) == []
    assert rayservice_validation.problems(service({"mode": "token", "secretName": "s"})) == []


def test_a_mode_the_crd_does_not_list_is_a_schema_error() -> None:
    with pytest.raises(ValueError, match="mode"):
        model(authOptions={"mode": "Token"})


# -- the pods (configureTokenAuth) ---------------------------------------------------------


def test_the_head_ray_container_gets_the_mode_and_the_token_from_the_generated_secret() -> None:
    head = pods.head_pod(model(authOptions={"mode": "token"}))
    ray = head["spec"]["containers"][0]
    names = env_of(ray)
    # after the GCS FT settings, before the env vars BuildPod appends (RAY_CLUSTER_NAME...)
    assert names.index("RAY_AUTH_MODE") + 1 == names.index("RAY_AUTH_TOKEN")
    assert names.index("RAY_AUTH_TOKEN") < names.index("RAY_CLUSTER_NAME")
    assert var(ray, "RAY_AUTH_MODE") == {"name": "RAY_AUTH_MODE", "value": "token"}
    assert var(ray, "RAY_AUTH_TOKEN") == {"name": "RAY_AUTH_TOKEN", "valueFrom": TOKEN_REF}
    assert "RAY_ENABLE_K8S_TOKEN_AUTH" not in names
    assert [v["name"] for v in head["spec"]["volumes"]] == ["shared-mem"]


def test_after_the_gcs_fault_tolerance_settings() -> None:
    cluster = model(authOptions={"mode": "token"},
                    gcsFaultToleranceOptions={"redisAddress": "redis:6379"})  # fmt: skip
    names = env_of(pods.head_pod(cluster)["spec"]["containers"][0])
    assert names.index("RAY_REDIS_ADDRESS") < names.index("RAY_AUTH_MODE")


def test_workers_get_it_on_the_ray_container_and_on_wait_gcs_ready() -> None:
    cluster = model(authOptions={"mode": "token", "secretName": "mine"})
    worker = pods.worker_pod(cluster, cluster.spec.worker_group_specs[0])  # type: ignore[index]
    ray = worker["spec"]["containers"][0]
    [init] = worker["spec"]["initContainers"]
    assert init["name"] == "wait-gcs-ready"
    ref = {"secretKeyRef": {"name": "mine", "key": "auth_token"}}
    for container in (ray, init):
        assert var(container, "RAY_AUTH_MODE")["value"] == "token"
        assert var(container, "RAY_AUTH_TOKEN")["valueFrom"] == ref
    # wait-gcs-ready: the Ray container's env as it was, then the auth vars, then FQ_RAY_IP
    assert env_of(init)[-4:] == ["RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "FQ_RAY_IP", "RAY_IP"]


def test_a_users_init_container_other_than_wait_gcs_ready_is_left_alone() -> None:
    cluster = model(authOptions={"mode": "token"})
    group = cluster.spec.worker_group_specs[0]  # type: ignore[index]
    group.template["spec"]["initContainers"] = [{"name": "mine", "image": "busybox"}]
    worker = pods.worker_pod(cluster, group)
    mine, wait = worker["spec"]["initContainers"]
    assert "RAY_AUTH_MODE" not in env_of(mine)
    assert "RAY_AUTH_MODE" in env_of(wait)


def test_the_autoscaler_gets_it_before_the_users_overrides() -> None:
    user_env = [{"name": "RAY_AUTH_MODE", "value": "disabled"}, {"name": "X", "value": "1"}]
    cluster = model(
        authOptions={"mode": "token"},
        enableInTreeAutoscaling=True,
        autoscalerOptions={"env": user_env},
    )
    head = pods.head_pod(cluster)
    [sidecar] = [c for c in head["spec"]["containers"] if c["name"] == "autoscaler"]
    # KubeRay sets the auth vars, then appends autoscalerOptions.env (the user's last)
    assert env_of(sidecar)[-4:] == ["RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_MODE", "X"]
    assert var(head["spec"]["containers"][0], "RAY_AUTH_MODE")["value"] == "token"


def test_a_variable_the_user_sets_is_kept_and_not_doubled() -> None:
    cluster = model(authOptions={"mode": "token"})
    ray = cluster.spec.head_group_spec.template["spec"]["containers"][0]
    ray["env"] = [{"name": "RAY_AUTH_TOKEN", "value": "mine"}]
    head = pods.head_pod(cluster)
    container = head["spec"]["containers"][0]
    assert [e for e in container["env"] if e["name"] == "RAY_AUTH_TOKEN"] == [
        {"name": "RAY_AUTH_TOKEN", "value": "mine"}
    ]
    assert var(container, "RAY_AUTH_MODE")["value"] == "token"


def test_kubernetes_token_auth_mounts_the_projected_token_instead_of_a_secret() -> None:
    cluster = model(authOptions={"mode": "token", "enableK8sTokenAuth": True},
                    enableInTreeAutoscaling=True)  # fmt: skip
    head = pods.head_pod(cluster)
    worker = pods.worker_pod(cluster, cluster.spec.worker_group_specs[0])  # type: ignore[index]
    mount = {"name": "ray-token", "mountPath": "/var/run/secrets/ray.io/serviceaccount",
             "readOnly": True}  # fmt: skip
    volume = {"name": "ray-token",
              "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}}  # fmt: skip
    for pod in (head, worker):
        # the token volume first: configureTokenAuth runs before BuildPod adds shared-mem
        assert pod["spec"]["volumes"][0] == volume
        assert [v["name"] for v in pod["spec"]["volumes"]].count("ray-token") == 1
    containers = [
        head["spec"]["containers"][0],
        worker["spec"]["containers"][0],
        worker["spec"]["initContainers"][0],
        next(c for c in head["spec"]["containers"] if c["name"] == "autoscaler"),
    ]
    for container in containers:
        assert var(container, "RAY_AUTH_MODE")["value"] == "token"
        assert var(container, "RAY_ENABLE_K8S_TOKEN_AUTH")["value"] == "true"
        assert "RAY_AUTH_TOKEN" not in env_of(container)
        assert mount in container["volumeMounts"]


@pytest.mark.parametrize("options", [{"mode": "disabled"}, {}, {"secretName": "x"}])
def test_without_mode_token_the_pods_are_untouched(options: dict[str, Any]) -> None:
    plain = model()
    cluster = model(authOptions=options)
    assert pods.head_pod(cluster) == pods.head_pod(plain)
    group = cluster.spec.worker_group_specs[0]  # type: ignore[index]
    plain_group = plain.spec.worker_group_specs[0]  # type: ignore[index]
    assert pods.worker_pod(cluster, group) == pods.worker_pod(plain, plain_group)


# -- the Secret (reconcileAuthSecret) --------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "made"),
    [({"mode": "token"}, True), ({}, True),  # no mode: KubeRay makes it too
     ({"mode": "disabled"}, False), ({"mode": "token", "secretName": "mine"}, False),
     ({"mode": "token", "enableK8sTokenAuth": True}, False), (None, False)],
)  # fmt: skip
def test_which_clusters_get_a_generated_secret(options: dict[str, Any] | None, made: bool) -> None:
    cluster = model(**({"authOptions": options} if options is not None else {}))
    assert (auth.generated_secret(cluster) is not None) is made


def test_the_generated_token_is_32_random_bytes_in_base64() -> None:
    first = auth.generated_secret(model(authOptions={"mode": "token"}))
    second = auth.generated_secret(model(authOptions={"mode": "token"}))
    assert first is not None
    assert second is not None
    token = base64.b64decode(first["data"]["auth_token"]).decode()
    assert len(base64.b64decode(token)) == 32
    assert first["data"] != second["data"]


async def test_the_secret_is_made_before_the_pods_owned_by_the_cluster(env: Env) -> None:
    await env.client.create(scenario.raycluster(rayVersion="2.60.0",
                                                authOptions={"mode": "token"}))  # fmt: skip
    await env.reconcile()
    secret = await env.client.get(SECRETS, "ns", "demo")
    owner = await env.cluster()
    [ref] = secret["metadata"]["ownerReferences"]
    assert (ref["kind"], ref["uid"], ref["controller"]) == (
        "RayCluster",
        owner["metadata"]["uid"],
        True,
    )
    assert secret["metadata"]["labels"] == {"ray.io/cluster": "demo"}
    token = base64.b64decode(secret["data"]["auth_token"]).decode()
    assert len(token) == 44
    creates = [(r, s) for verb, r, s in env.client.calls if verb == "create"]
    assert creates.index(("secrets", "")) < creates.index(("pods", ""))
    head = next(
        p for p in await env.pods() if p["metadata"]["labels"]["ray.io/node-type"] == "head"
    )
    assert var(head["spec"]["containers"][0], "RAY_AUTH_TOKEN")["valueFrom"] == TOKEN_REF


async def test_the_secret_is_never_rewritten_and_made_again_when_deleted(env: Env) -> None:
    await env.client.create(scenario.raycluster(rayVersion="2.60.0",
                                                authOptions={"mode": "token"}))  # fmt: skip
    await env.reconcile()
    first = copy.deepcopy(await env.client.get(SECRETS, "ns", "demo"))
    calls = len(env.client.calls)
    await env.reconcile()
    # Looked up by name (one GET a pass), never listed or watched: the operator's RBAC
    # grants no list/watch on Secrets (controllers.rbac).
    assert [c for c in env.client.calls[calls:] if c[1] == "secrets"] == [("get", "secrets", "")]
    assert not [c for c in env.client.calls if c[1] == "secrets" and c[0] in ("list", "watch")]
    assert await env.client.get(SECRETS, "ns", "demo") == first
    await env.client.delete(SECRETS, "ns", "demo")
    await env.reconcile()  # the next pass (nothing watches Secrets to cause one at once)
    again = await env.client.get(SECRETS, "ns", "demo")
    assert again["metadata"]["uid"] != first["metadata"]["uid"]


async def test_an_unlabelled_secret_of_that_name_is_kept_and_used(env: Env) -> None:
    theirs = {"apiVersion": "v1", "kind": "Secret",
              "metadata": {"name": "demo", "namespace": "ns"},
              "data": {"auth_token": base64.b64encode(b"theirs").decode()}}  # fmt: skip
    await env.client.create(theirs)
    await env.client.create(scenario.raycluster(rayVersion="2.60.0",
                                                authOptions={"mode": "token"}))  # fmt: skip
    await env.reconcile()  # AlreadyExists is no failure: the pods are made
    secret = await env.client.get(SECRETS, "ns", "demo")
    assert secret["data"] == theirs["data"]
    assert len(await env.pods()) == 4


@pytest.mark.parametrize("options", [{"mode": "disabled"}, {"mode": "token", "secretName": "mine"}])
async def test_no_secret_is_made_when_none_is_needed(env: Env, options: dict[str, Any]) -> None:
    await env.client.create(scenario.raycluster(rayVersion="2.60.0", authOptions=options))
    await env.reconcile()
    assert (await env.client.list(SECRETS, "ns")).items == []
    assert len(await env.pods()) == 4


async def test_an_invalid_auth_setup_is_refused_before_anything_is_made(env: Env) -> None:
    await env.client.create(scenario.raycluster(rayVersion="2.46.0",
                                                authOptions={"mode": "token"}))  # fmt: skip
    with pytest.raises(Exception, match=r"2\.52\.0"):
        await env.reconcile()
    assert (await env.client.list(SECRETS, "ns")).items == []
    assert await env.pods() == []
    conditions = {c["type"]: c for c in (await env.cluster())["status"]["conditions"]}
    assert conditions["ReplicaFailure"]["reason"] == "InvalidRayClusterSpec"
    assert "authOptions.mode 'token' needs Ray 2.52.0" in conditions["ReplicaFailure"]["message"]
    await env.recorder.flush()
    events = (await env.client.list(scenario.EVENTS, "ns")).items
    assert [e["reason"] for e in events if e["type"] == "Warning"] == ["InvalidRayClusterSpec"]
