"""controllers.rayservice.validation: every rule, with values that fail when the rule is wrong."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from controllers.rayservice import gateway, validation

Obj = dict[str, Any]

SERVE = """\
applications:
  - name: fruit
    import_path: fruit.deployment_graph
    route_prefix: /fruit
  - name: math
    import_path: conditional_dag:serve_dag
    route_prefix: /calc
"""


def service(**spec: Any) -> Obj:
    body: Obj = {
        "rayClusterConfig": {
            "rayVersion": "2.46.0",
            "headGroupSpec": {
                "rayStartParams": {},
                "template": {
                    "spec": {"containers": [{"name": "ray-head", "image": "rayproject/ray"}]}
                },
            },
            "workerGroupSpecs": [
                {
                    "groupName": "small-group",
                    "replicas": 1,
                    "template": {
                        "spec": {"containers": [{"name": "ray-worker", "image": "rayproject/ray"}]}
                    },
                }
            ],
        },
        "serveConfigV2": SERVE,
    }
    body.update(spec)
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayService",
        "metadata": {"name": "rayservice-sample", "namespace": "ns", "uid": "u"},
        "spec": body,
    }


def with_serve(text: str | None) -> Obj:
    svc = service()
    if text is None:
        del svc["spec"]["serveConfigV2"]
    else:
        svc["spec"]["serveConfigV2"] = text
    return svc


def test_a_valid_service_has_no_problems() -> None:
    svc = service()
    before = json.dumps(svc, sort_keys=True)
    assert validation.problems(svc) == []
    assert json.dumps(svc, sort_keys=True) == before


# --- metadata.name -------------------------------------------------------------------------------


def test_name_of_47_characters_is_fine_48_is_not() -> None:
    svc = service()
    svc["metadata"]["name"] = "a" * 47
    assert validation.problems(svc) == []
    svc["metadata"]["name"] = "a" * 48
    (problem,) = validation.problems(svc)
    assert "metadata.name" in problem
    assert "48 characters" in problem
    assert "at most 47" in problem


@pytest.mark.parametrize("name", ["Rayservice", "1abc", "my_svc", "abc-", "a.b"])
def test_name_must_be_a_dns1035_label(name: str) -> None:
    svc = service()
    svc["metadata"]["name"] = name
    problems = validation.problems(svc)
    assert problems == [
        f"metadata.name {name!r} is not a valid DNS-1035 label (lower-case letters, digits "
        "and '-', starting with a letter and ending with a letter or digit)"
    ]


def test_an_invalid_name_does_not_produce_cluster_name_problems_too() -> None:
    svc = service()
    svc["metadata"]["name"] = "x" * 60
    problems = validation.problems(svc)
    assert len(problems) == 1
    assert problems[0].startswith("metadata.name")


# --- initializing timeout ------------------------------------------------------------------------


def annotated(value: str) -> Obj:
    svc = service()
    svc["metadata"]["annotations"] = {validation.INITIALIZING_TIMEOUT_ANNOTATION: value}
    return svc


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("30m", 1800.0),
        ("1h30m", 5400.0),
        ("90s", 90.0),
        ("1.5h", 5400.0),
        ("2h45m30.5s", 9930.5),
        ("1500ms", 1.5),
        ("+10s", 10.0),
        ("600", 600.0),
        ("+7", 7.0),
        ("1us", 1e-6),
        ("1\u00b5s", 1e-6),
    ],
)
def test_initializing_timeout_parses_both_forms(value: str, seconds: float) -> None:
    svc = annotated(value)
    assert validation.initializing_timeout(svc) == pytest.approx(seconds)
    assert validation.problems(svc) == []


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("0", "must be a positive duration"),
        ("-5m", "must be a positive duration"),
        ("0s", "must be a positive duration"),
        ("-600", "must be a positive number of seconds"),
        ("5 m", "invalid value"),
        ("5min", "invalid value"),
        ("1d", "invalid value"),
        ("m", "invalid value"),
        (".s", "invalid value"),
        ("1.5", "invalid value"),
        ("soon", "invalid value"),
        ("10_000", "invalid value"),
        (" 60", "invalid value"),
        ("3000000h", "invalid value"),  # beyond Go's 290 years
    ],
)
def test_initializing_timeout_rejects(value: str, says: str) -> None:
    svc = annotated(value)
    (problem,) = validation.problems(svc)
    assert problem.startswith(f"annotation {validation.INITIALIZING_TIMEOUT_ANNOTATION}")
    assert says in problem
    assert repr(value) in problem
    with pytest.raises(ValueError, match="initializing-timeout") as caught:
        validation.initializing_timeout(svc)
    assert str(caught.value) == problem


def test_initializing_timeout_absent_or_empty() -> None:
    assert validation.initializing_timeout(service()) is None
    assert validation.initializing_timeout(annotated("")) is None
    assert validation.problems(annotated("")) == []


# --- rayClusterConfig ----------------------------------------------------------------------------


def test_cluster_config_is_required() -> None:
    svc = service()
    del svc["spec"]["rayClusterConfig"]
    assert validation.problems(svc) == ["spec.rayClusterConfig is required"]


def test_cluster_config_schema_errors_name_the_field() -> None:
    svc = service()
    svc["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]["replicas"] = -1
    problems = validation.problems(svc)
    assert len(problems) == 1
    assert problems[0].startswith("spec.rayClusterConfig.workerGroupSpecs[0].replicas:")


def test_cluster_rules_apply() -> None:
    svc = service()
    svc["spec"]["rayClusterConfig"]["headGroupSpec"]["template"]["spec"]["containers"] = []
    svc["spec"]["rayClusterConfig"]["workerGroupSpecs"].append(
        copy.deepcopy(svc["spec"]["rayClusterConfig"]["workerGroupSpecs"][0])
    )
    problems = validation.problems(svc)
    assert "spec.rayClusterConfig: headGroupSpec.template should have at least one container" in (
        problems
    )
    assert any("worker group names must be unique" in p and "small-group" in p for p in problems)


def test_cluster_rules_see_the_services_annotations() -> None:
    # KubeRay checks the cluster spec with the RayService's annotations.
    svc = service()
    svc["metadata"]["annotations"] = {"ray.io/ft-enabled": "true"}
    svc["spec"]["rayClusterConfig"]["gcsFaultToleranceOptions"] = {"redisAddress": "redis:6379"}
    problems = validation.problems(svc)
    assert len(problems) == 1
    assert "ray.io/ft-enabled annotation and gcsFaultToleranceOptions are both set" in problems[0]


def test_head_service_name_must_not_be_set() -> None:
    svc = service()
    svc["spec"]["rayClusterConfig"]["headGroupSpec"]["headService"] = {
        "metadata": {"name": "custom-head"}
    }
    assert validation.problems(svc) == [
        "spec.rayClusterConfig.headGroupSpec.headService.metadata.name must not be set (it is "
        "'custom-head'): a RayService's head service is always <name>-head-svc"
    ]
    svc["spec"]["rayClusterConfig"]["headGroupSpec"]["headService"] = {
        "metadata": {"annotations": {"a": "b"}}
    }
    assert validation.problems(svc) == []


def ports(*names: str) -> list[Obj]:
    return [{"name": n, "containerPort": 8000 + i} for i, n in enumerate(names)]


def test_head_ports_need_a_serve_port() -> None:
    svc = service()
    head = svc["spec"]["rayClusterConfig"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    head["ports"] = ports("dashboard", "gcs")
    (problem,) = validation.problems(svc)
    assert "none named 'serve'" in problem
    assert problem.startswith("spec.rayClusterConfig.headGroupSpec.template")
    head["ports"] = ports("dashboard", "serve")
    assert validation.problems(svc) == []


def test_serve_service_template_can_supply_the_serve_port() -> None:
    svc = service(serveService={"spec": {"ports": [{"name": "serve", "port": 9000}]}})
    head = svc["spec"]["rayClusterConfig"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    head["ports"] = ports("dashboard")
    assert validation.problems(svc) == []
    svc["spec"]["serveService"]["spec"]["ports"][0]["name"] = "http"
    (problem,) = validation.problems(svc)
    assert "spec.serveService has no port named 'serve'" in problem


# --- spec fields ---------------------------------------------------------------------------------


def incremental(options: Any = None, *, autoscaling: bool = True) -> Obj:
    svc = service(upgradeStrategy={"type": "NewClusterWithIncrementalUpgrade"})
    if options is not None:
        svc["spec"]["upgradeStrategy"]["clusterUpgradeOptions"] = options
    svc["spec"]["rayClusterConfig"]["enableInTreeAutoscaling"] = autoscaling
    return svc


GOOD_OPTIONS = {"stepSizePercent": 25, "intervalSeconds": 30, "gatewayClassName": "traefik"}


def test_incremental_upgrade_with_kuberays_options_is_valid() -> None:
    checked = validation.validate(incremental(GOOD_OPTIONS))
    assert checked.problems == ()
    assert checked.spec is not None
    assert checked.spec.upgrade_strategy is not None
    options = checked.spec.upgrade_strategy.cluster_upgrade_options
    assert options is not None
    assert options.max_surge_percent == 100  # KubeRay's default


G = GOOD_OPTIONS
RANGE = "must be between 1 and 100, got"


@pytest.mark.parametrize(
    ("options", "autoscaling", "expected"),
    [
        (G, False, "needs the Ray autoscaler: set spec.rayClusterConfig.enableInTreeAutoscaling"),
        (None, True, "clusterUpgradeOptions is required for 'NewClusterWithIncrementalUpgrade'"),
        ({**G, "maxSurgePercent": 101}, True, f"maxSurgePercent {RANGE} 101"),
        ({**G, "maxSurgePercent": 0}, True, f"maxSurgePercent {RANGE} 0"),
        ({**G, "stepSizePercent": -1}, True, f"stepSizePercent {RANGE} -1"),
        ({**G, "stepSizePercent": 0}, True, f"stepSizePercent {RANGE} 0"),
        ({**G, "maxSurgePercent": 20}, True,
         "stepSizePercent (25) must be less than or equal to maxSurgePercent (20)"),
        ({**G, "intervalSeconds": 0}, True, "intervalSeconds must be greater than 0, got 0"),
        ({**G, "gatewayClassName": ""}, True,
         "gatewayClassName is required for 'NewClusterWithIncrementalUpgrade'"),
    ],
)  # fmt: skip
def test_incremental_upgrade_options_are_checked_as_kuberay_does(
    options: Any, autoscaling: bool, expected: str
) -> None:
    (problem,) = validation.problems(incremental(options, autoscaling=autoscaling))
    assert expected in problem
    assert problem.startswith("spec.upgradeStrategy.")


def test_with_the_gate_off_incremental_options_are_not_checked() -> None:
    """KubeRay v1.7.0 with ``RayServiceIncrementalUpgrade=false``: the type is valid and
    behaves as ``None``; its options are not looked at."""
    svc = incremental({**GOOD_OPTIONS, "intervalSeconds": 0}, autoscaling=False)
    assert validation.problems(svc, incremental=False) == []
    assert validation.problems(svc) != []


def test_the_gateway_class_is_checked_against_the_operators_allow_list() -> None:
    """:func:`validation.gateway_class_problems`: what the webhook adds to KubeRay's rules
    when it knows ``--gateway-classes``. A class is only asked for by an incremental
    upgrade with the gate on; :func:`validation.problems` does not look at the list (the
    spec is valid; the operator's policy is reported on its own reason)."""
    allowed = gateway.GatewayClasses.parse(["traefik"])
    svc = incremental({**GOOD_OPTIONS, "gatewayClassName": "public-lb"})
    (problem,) = validation.gateway_class_problems(svc, allowed)
    assert problem.startswith(
        "spec.upgradeStrategy.clusterUpgradeOptions.gatewayClassName 'public-lb' is not allowed"
    )
    assert "--gateway-classes=public-lb,traefik" in problem
    assert validation.problems(svc) == []
    assert validation.requested_gateway_class(svc) == "public-lb"
    assert validation.gateway_class_problems(incremental(GOOD_OPTIONS), allowed) == []
    assert validation.gateway_class_problems(svc, gateway.GatewayClasses.parse(["*"])) == []
    assert validation.gateway_class_problems(svc, allowed, incremental=False) == []
    assert validation.requested_gateway_class(svc, incremental=False) is None
    unnamed = incremental({**GOOD_OPTIONS, "gatewayClassName": ""})
    for other in (service(), service(upgradeStrategy={"type": "NewCluster"}), incremental(None),
                  unnamed):  # fmt: skip
        assert validation.gateway_class_problems(other, gateway.GatewayClasses()) == []


@pytest.mark.parametrize("kind", ["NewCluster", "None", None])
def test_supported_upgrade_types(kind: str | None) -> None:
    assert validation.problems(service(upgradeStrategy={"type": kind})) == []


def test_unknown_upgrade_type() -> None:
    (problem,) = validation.problems(service(upgradeStrategy={"type": "Rolling"}))
    assert problem == (
        "spec.upgradeStrategy.type 'Rolling' is invalid; valid values are "
        "'NewClusterWithIncrementalUpgrade', 'NewCluster', 'None'"
    )


@pytest.mark.parametrize("delay", [0, 60, 3600])
def test_deletion_delay_ok(delay: int) -> None:
    assert validation.problems(service(rayClusterDeletionDelaySeconds=delay)) == []


@pytest.mark.parametrize("delay", [-1, "60", True, 1.5])
def test_deletion_delay_rejected(delay: Any) -> None:
    (problem,) = validation.problems(service(rayClusterDeletionDelaySeconds=delay))
    assert problem == (
        f"spec.rayClusterDeletionDelaySeconds must be a non-negative integer, got {delay!r}"
    )


def test_serve_service_name_must_be_a_service_name() -> None:
    assert validation.problems(service(serveService={"metadata": {"name": "my-serve"}})) == []
    (problem,) = validation.problems(service(serveService={"metadata": {"name": "My_Serve"}}))
    assert problem.startswith("spec.serveService.metadata.name 'My_Serve' is not a valid")


# --- serveConfigV2 -------------------------------------------------------------------------------


def test_serve_config_parses() -> None:
    assert validation.serve_config(service()) == {
        "applications": [
            {"name": "fruit", "import_path": "fruit.deployment_graph", "route_prefix": "/fruit"},
            {"name": "math", "import_path": "conditional_dag:serve_dag", "route_prefix": "/calc"},
        ]
    }


@pytest.mark.parametrize("text", [None, "", "  \n"])
def test_no_serve_config_is_valid_and_none(text: str | None) -> None:
    svc = with_serve(text)
    assert validation.problems(svc) == []
    assert validation.serve_config(svc) is None


def serve_problems(text: str) -> list[str]:
    svc = with_serve(text)
    found = validation.problems(svc)
    assert found, "expected problems"
    with pytest.raises(ValueError, match="serveConfigV2") as caught:
        validation.serve_config(svc)
    assert str(caught.value) == "; ".join(found)
    return found


def test_serve_config_yaml_errors_keep_the_parsers_message() -> None:
    (problem,) = serve_problems("applications:\n  - name: a\n   import_path: x")
    assert problem.startswith("spec.serveConfigV2 is not valid YAML (line 3, column 4)")


def test_serve_config_must_be_a_mapping() -> None:
    (problem,) = serve_problems("- a\n- b\n")
    assert problem.startswith("spec.serveConfigV2 must be a YAML mapping")


def test_serve_config_needs_applications() -> None:
    assert serve_problems("proxy_location: EveryNode\n") == [
        "spec.serveConfigV2: 'applications' is required (a list of Serve applications)"
    ]
    assert serve_problems("applications: []\n") == [
        "spec.serveConfigV2: 'applications' must be a non-empty list of Serve applications, got []"
    ]
    (problem,) = serve_problems("applications: {name: a}\n")
    assert "must be a non-empty list" in problem
    assert "{'name': 'a'}" in problem


def test_application_must_be_a_mapping() -> None:
    assert serve_problems("applications: [fruit]\n") == [
        "spec.serveConfigV2: applications[0] must be a mapping (name, import_path, ...), "
        "got 'fruit'"
    ]


def test_application_name() -> None:
    assert serve_problems("applications:\n- name: ''\n  import_path: m.a\n") == [
        "spec.serveConfigV2: applications[0].name must be a non-empty string, got ''"
    ]
    assert serve_problems("applications:\n- name: 7\n  import_path: m.a\n") == [
        "spec.serveConfigV2: applications[0].name must be a non-empty string, got 7"
    ]


def test_application_names_are_unique() -> None:
    text = (
        "applications:\n"
        "- {name: a, import_path: m.a, route_prefix: /a}\n"
        "- {name: b, import_path: m.b, route_prefix: /b}\n"
        "- {name: a, import_path: m.c, route_prefix: /c}\n"
    )
    assert serve_problems(text) == [
        "spec.serveConfigV2: application name 'a' is used more than once "
        "(applications[0], applications[2])"
    ]


def test_an_absent_name_is_rays_default() -> None:
    # Ray Serve names an unnamed application "default": valid alone, a clash with "default".
    alone = "applications:\n- {import_path: m.a}\n"
    assert validation.problems(with_serve(alone)) == []
    clash = (
        "applications:\n"
        "- {import_path: m.a, route_prefix: /a}\n"
        "- {name: default, import_path: m.b}\n"
    )
    (problem,) = serve_problems(clash)
    assert "application name 'default' is used more than once" in problem


def test_import_path_is_required_and_a_string() -> None:
    assert serve_problems("applications:\n- {name: a}\n") == [
        "spec.serveConfigV2: applications[0].import_path is required (such as 'module.application')"
    ]
    assert serve_problems("applications:\n- {name: a, import_path: [m]}\n") == [
        "spec.serveConfigV2: applications[0].import_path must be a string, got ['m']"
    ]


@pytest.mark.parametrize(
    ("path", "says"),
    [
        ("module", "must name a module and an attribute"),
        (".module", "may not start or end with '.'"),
        ("module.", "may not start or end with '.'"),
        ("a:b:c", "at most one ':'"),
        (":app", "may not start or end with ':'"),
        ("mod:", "may not start or end with ':'"),
    ],
)
def test_import_path_format(path: str, says: str) -> None:
    (problem,) = serve_problems(f"applications:\n- name: a\n  import_path: '{path}'\n")
    assert problem.startswith(f"spec.serveConfigV2: applications[0].import_path {path!r}")
    assert says in problem


@pytest.mark.parametrize("path", ["m.a", "pkg.mod.app", "pkg.mod:app", "mod:app"])
def test_import_path_valid(path: str) -> None:
    assert (
        validation.problems(with_serve(f"applications:\n- {{name: a, import_path: '{path}'}}\n"))
        == []
    )


@pytest.mark.parametrize(
    ("route", "says"),
    [
        ("api", "must start with '/'"),
        ("/api/", "must not end with '/'"),
        ("/api/{id}", "must not contain '{' or '}'"),
    ],
)
def test_route_prefix_format(route: str, says: str) -> None:
    (problem,) = serve_problems(
        f"applications:\n- name: a\n  import_path: m.a\n  route_prefix: '{route}'\n"
    )
    assert problem.startswith(f"spec.serveConfigV2: applications[0].route_prefix {route!r}")
    assert says in problem


def test_route_prefix_root_and_null_are_fine() -> None:
    text = (
        "applications:\n"
        "- {name: a, import_path: m.a, route_prefix: /}\n"
        "- {name: b, import_path: m.b, route_prefix: null}\n"
        "- {name: c, import_path: m.c, route_prefix: null}\n"
    )
    assert validation.problems(with_serve(text)) == []


def test_route_prefix_must_be_a_string() -> None:
    assert serve_problems("applications:\n- {name: a, import_path: m.a, route_prefix: 5}\n") == [
        "spec.serveConfigV2: applications[0].route_prefix must be a string or null, got 5"
    ]


def test_route_prefixes_are_unique_and_absent_means_root() -> None:
    explicit = (
        "applications:\n"
        "- {name: a, import_path: m.a, route_prefix: /x}\n"
        "- {name: b, import_path: m.b, route_prefix: /x}\n"
    )
    (problem,) = serve_problems(explicit)
    assert problem.startswith(
        "spec.serveConfigV2: route_prefix '/x' is used by more than one application "
        "(applications[0], applications[1])"
    )
    implicit = (
        "applications:\n"
        "- {name: a, import_path: m.a}\n"
        "- {name: b, import_path: m.b, route_prefix: /}\n"
    )
    (problem,) = serve_problems(implicit)
    assert "route_prefix '/' is used by more than one application" in problem


def test_serve_config_must_be_a_string() -> None:
    svc = service()
    svc["spec"]["serveConfigV2"] = {"applications": []}
    (problem,) = validation.problems(svc)
    assert problem == "spec.serveConfigV2 must be a string holding YAML, got dict"


def test_all_problems_are_listed_together() -> None:
    svc = service(upgradeStrategy={"type": "Rolling"}, rayClusterDeletionDelaySeconds=-1)
    svc["metadata"]["name"] = "Bad"
    svc["spec"]["serveConfigV2"] = "applications:\n- {name: a}\n"
    problems = validation.problems(svc)
    assert [p.split(" ")[0] for p in problems] == [
        "metadata.name",
        "spec.upgradeStrategy.type",
        "spec.rayClusterDeletionDelaySeconds",
        "spec.serveConfigV2:",
    ]


def test_an_endless_initializing_timeout_is_refused_before_it_is_parsed() -> None:
    svc = service()
    svc["metadata"]["annotations"] = {validation.INITIALIZING_TIMEOUT_ANNOTATION: "9" * 5000 + "s"}
    assert validation.problems(svc) == [
        f"annotation {validation.INITIALIZING_TIMEOUT_ANNOTATION} has 5001 characters; at most 64"
    ]
    with pytest.raises(ValueError, match="at most 64"):
        validation.initializing_timeout(svc)
