"""tests/support/raysim/serve.py: Ray Serve's REST subset and lifecycle, on an injected clock."""

from __future__ import annotations

import doctest
from typing import Any

import pytest

from tests.support.raysim import serve


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make(**behaviour: Any) -> tuple[serve.Head, Clock]:
    clock = Clock()
    return serve.Head(serve.Behaviour(**behaviour), clock=clock, ip="198.18.1.9"), clock


def app(name: str, import_path: str = "fruit.deployment_graph", **extra: Any) -> dict[str, Any]:
    return {"name": name, "import_path": import_path, "route_prefix": f"/{name}", **extra}


def statuses(head: serve.Head) -> dict[str, str]:
    return {n: a["status"] for n, a in head.get_applications()["applications"].items()}


def test_the_modules_doctests_pass() -> None:
    result = doctest.testmod(serve)
    assert result.attempted > 0, "serve.py lost its examples"
    assert result.failed == 0


def test_before_any_put_serve_is_not_running_and_the_status_is_empty() -> None:
    head, _ = make()
    assert head.get_applications() == {
        "controller_info": {}, "proxies": {}, "applications": {}, "target_capacity": None,
    }  # fmt: skip
    assert not head.serve_running
    assert head.route("/x") is None


def test_deploying_turns_running_exactly_after_the_delay() -> None:
    head, clock = make(deploy_delay=4.0)
    head.put_applications({"applications": [app("a"), app("b", deployments=[{"name": "D"}])]})
    assert statuses(head) == {"a": "DEPLOYING", "b": "DEPLOYING"}
    body = head.get_applications()
    assert body["applications"]["b"]["deployments"]["D"]["status"] == "UPDATING"
    clock.now += 3.999
    assert statuses(head) == {"a": "DEPLOYING", "b": "DEPLOYING"}
    assert head.route("/a") is None
    clock.now += 0.001
    assert statuses(head) == {"a": "RUNNING", "b": "RUNNING"}
    body = head.get_applications()
    deployment = body["applications"]["b"]["deployments"]["D"]
    assert deployment["name"] == "D"
    assert deployment["status"] == "HEALTHY"
    assert body["applications"]["a"]["deployments"] == {
        "deployment_graph": body["applications"]["a"]["deployments"]["deployment_graph"]
    }
    assert body["applications"]["a"]["message"] == ""
    assert body["applications"]["a"]["deployed_app_config"]["import_path"] == (
        "fruit.deployment_graph"
    )
    assert body["controller_info"]["node_ip"] == "198.18.1.9"
    assert next(iter(body["proxies"].values()))["status"] == "HEALTHY"
    assert set(body) >= {"proxy_location", "http_options", "target_capacity", "applications"}


def test_an_unimportable_module_fails_with_a_traceback_naming_it() -> None:
    head, clock = make(deploy_delay=1.0, unimportable=frozenset({"secret_pkg"}))
    head.put_applications({
        "applications": [
            app("gone", "does_not_exist.app"),
            app("listed", "secret_pkg.sub:app"),
            app("fine", "fruit.app"),
        ]
    })  # fmt: skip
    assert statuses(head) == {"gone": "DEPLOYING", "listed": "DEPLOYING", "fine": "DEPLOYING"}
    clock.now += 1.0
    assert statuses(head) == {"gone": "DEPLOY_FAILED", "listed": "DEPLOY_FAILED", "fine": "RUNNING"}
    apps = head.get_applications()["applications"]
    assert apps["gone"]["message"].startswith("Deploying app 'gone' failed with exception:\n")
    assert "Traceback (most recent call last)" in apps["gone"]["message"]
    assert (
        apps["gone"]["message"]
        .rstrip()
        .endswith("ModuleNotFoundError: No module named 'does_not_exist'")
    )
    assert "No module named 'secret_pkg'" in apps["listed"]["message"]
    assert apps["gone"]["deployments"] == {}
    assert head.route("/gone") is None


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ({"applications": [{"name": "a", "route_prefix": "/a"}]},
         "applications -> 0 -> import_path\n  field required"),
        ({"applications": [app("a"), app("a")]}, "Found multiple configs"),
        ({"applications": [app("a"), {**app("b"), "route_prefix": "/a"}]}, "route_prefix"),
        ({"http_options": {}}, "applications\n  field required"),
        (["not", "a", "dict"], "value is not a valid dict"),
    ],
)  # fmt: skip
def test_an_invalid_config_is_a_400_text_and_changes_nothing(body: Any, fragment: str) -> None:
    head, clock = make(deploy_delay=1.0)
    head.put_applications({"applications": [app("keep")]})
    clock.now += 2.0
    with pytest.raises(serve.ConfigError) as caught:
        head.put_applications(body)
    assert fragment in str(caught.value)
    assert str(caught.value).startswith(("1 validation error", "2 validation errors"))
    assert statuses(head) == {"keep": "RUNNING"}


def test_applications_left_out_of_a_put_are_removed_and_unchanged_ones_keep_status() -> None:
    head, clock = make(deploy_delay=1.0)
    head.put_applications({"applications": [app("a"), app("b")]})
    clock.now += 1.0
    assert statuses(head) == {"a": "RUNNING", "b": "RUNNING"}
    head.put_applications({"applications": [app("a"), app("c")]})
    assert statuses(head) == {"a": "RUNNING", "c": "DEPLOYING"}
    head.put_applications({"applications": [app("a", runtime_env={"pip": ["x"]}), app("c")]})
    assert statuses(head) == {"a": "DEPLOYING", "c": "DEPLOYING"}


def test_a_delete_delay_shows_deleting_first() -> None:
    head, clock = make(deploy_delay=1.0, delete_delay=2.0)
    head.put_applications({"applications": [app("a"), app("b")]})
    clock.now += 1.0
    head.put_applications({"applications": [app("a")]})
    assert statuses(head) == {"a": "RUNNING", "b": "DELETING"}
    clock.now += 2.0
    assert statuses(head) == {"a": "RUNNING"}


def test_delete_shuts_serve_down() -> None:
    head, clock = make(deploy_delay=1.0)
    head.put_applications({"applications": [app("a")]})
    clock.now += 1.0
    head.delete_applications()
    assert head.get_applications() == serve.empty_status()
    assert not head.serve_running


def test_routing_picks_the_longest_prefix_of_a_serving_app() -> None:
    head, clock = make(deploy_delay=1.0)
    head.put_applications({
        "applications": [
            {**app("root"), "route_prefix": "/"},
            app("fruit"),
            {**app("deep"), "route_prefix": "/fruit/deep"},
        ]
    })  # fmt: skip
    clock.now += 1.0
    assert head.route("/fruit") == "fruit"
    assert head.route("/fruit/apple") == "fruit"
    assert head.route("/fruit/deep/x") == "deep"
    assert head.route("/fruity") == "root"
    assert head.route("/") == "root"
    assert head.routes() == {"/": "root", "/fruit": "fruit", "/fruit/deep": "deep"}


def test_fault_unhealthy_only_for_a_running_app() -> None:
    head, clock = make(deploy_delay=1.0)
    head.put_applications({"applications": [app("a", deployments=[{"name": "D"}])]})
    assert head.make_unhealthy("a") is False
    assert head.make_unhealthy("nope") is False
    clock.now += 1.0
    assert head.make_unhealthy("a") is True
    body = head.get_applications()["applications"]["a"]
    assert body["status"] == "UNHEALTHY"
    assert body["deployments"]["D"]["status"] == "UNHEALTHY"
    assert body["message"]
    assert head.route("/a") == "a"
    # A new config redeploys it: the fault is gone.
    head.put_applications({"applications": [app("a", deployments=[{"name": "E"}])]})
    clock.now += 1.0
    assert statuses(head) == {"a": "RUNNING"}


def test_fault_restart_forgets_the_applications() -> None:
    head, clock = make(deploy_delay=1.0)
    head.put_applications({"applications": [app("a")]})
    clock.now += 1.0
    head.restart()
    assert head.get_applications() == serve.empty_status()
    assert head.route("/a") is None


def test_api_type_imperative_lists_no_declarative_apps() -> None:
    head, _ = make()
    head.put_applications({"applications": [app("a")]})
    assert head.get_applications("imperative")["applications"] == {}
    assert set(head.get_applications("declarative")["applications"]) == {"a"}
    assert head.get_applications()["applications"]["a"]["source"] == "declarative"


def test_defaults_name_and_route_prefix_like_ray() -> None:
    head, _ = make()
    head.put_applications({"applications": [{"import_path": "m.app"}]})
    only = head.get_applications()["applications"]["default"]
    assert only["route_prefix"] == "/"
    assert only["deployed_app_config"]["name"] == "default"
