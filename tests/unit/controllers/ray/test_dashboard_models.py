"""controllers.ray.dashboard models: the bodies Ray 2.60 really sends, and bodies it must not."""

from __future__ import annotations

import json

import pytest

from controllers.ray import dashboard
from tests.unit.controllers.ray import headserver

Status = dashboard.ApplicationStatus


def test_an_empty_cluster_has_no_applications() -> None:
    details = dashboard.parse_serve_details(headserver.recorded("get-empty.json"))
    assert details.applications == {}
    # the rest of Ray's answer is kept, not dropped or refused
    assert details.model_extra is not None
    assert details.target_capacity is None  # a field of its own (incremental upgrades)


def test_deploying_applications_have_no_route_prefix_and_no_deployments_yet() -> None:
    details = dashboard.parse_serve_details(headserver.recorded("get-deploying.json"))
    assert sorted(details.applications) == ["echo", "hello"]
    for name, app in details.applications.items():
        assert app.name == name
        assert app.status == Status.DEPLOYING
        assert app.message == ""
        assert app.route_prefix is None  # measured: null until the app is running
        assert app.deployments == {}


def test_two_running_applications_and_their_deployments() -> None:
    details = dashboard.parse_serve_details(headserver.recorded("get-two-running.json"))
    apps = details.applications
    assert {name: app.status for name, app in apps.items()} == {
        "hello": Status.RUNNING,
        "echo": Status.RUNNING,
    }
    assert apps["hello"].route_prefix == "/hello"
    assert apps["echo"].route_prefix == "/echo"
    assert {n: (d.status, d.message) for n, d in apps["hello"].deployments.items()} == {
        "Hello": (dashboard.DeploymentStatus.HEALTHY, "")
    }
    assert apps["echo"].deployments["Echo"].name == "Echo"
    extra = apps["hello"].model_extra
    assert extra is not None
    assert extra["deployed_app_config"]["import_path"] == "dashapp:hello"


def test_a_broken_import_path_is_deploy_failed_with_a_message_naming_the_module() -> None:
    details = dashboard.parse_serve_details(headserver.recorded("get-deploy-failed.json"))
    broken = details.applications["broken"]
    assert broken.status == Status.DEPLOY_FAILED
    assert "No module named 'no_such_module_xyz'" in broken.message
    assert broken.message.startswith("Deploying app 'broken' failed")
    assert broken.deployments == {}
    assert details.applications["hello"].status == Status.RUNNING


def test_unknown_statuses_and_fields_are_kept_and_nulls_read_as_empty() -> None:
    body = {
        "applications": {
            "a": {
                "status": "SOMETHING_NEW",
                "message": None,
                "brand_new_field": [1, 2],
                "deployments": {"D": {"status": "WARMING", "message": None, "x": {}}},
            }
        },
        "a_new_top_level_field": True,
    }
    app = dashboard.parse_serve_details(json.dumps(body)).applications["a"]
    assert app.status == "SOMETHING_NEW"
    assert app.message == ""
    assert app.deployments["D"].status == "WARMING"
    assert app.deployments["D"].message == ""
    assert app.model_extra == {"brand_new_field": [1, 2]}


def test_a_missing_applications_key_is_no_application() -> None:
    assert dashboard.parse_serve_details(b"{}").applications == {}


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (b"<html>502 Bad Gateway</html>", "not JSON"),
        (b"", "not JSON"),
        (b"[]", "(top)"),
        (b'{"applications": []}', "applications"),
        (b'{"applications": {"a": "RUNNING"}}', "applications.a"),
        (b'{"applications": {"a": {"message": "x"}}}', "applications.a.status"),
        (b'{"applications": {"a": {"status": 3}}}', "applications.a.status"),
        (b'{"applications": {"a": {"status": "RUNNING", "deployments": []}}}', "deployments"),
    ],
)
def test_bodies_of_the_wrong_shape_are_malformed(body: bytes, says: str) -> None:
    with pytest.raises(dashboard.DashboardMalformed) as caught:
        dashboard.parse_serve_details(body)
    assert says in str(caught.value)
    assert caught.value.text == body.decode()
    assert isinstance(caught.value, dashboard.DashboardError)


def test_statuses_compare_as_the_strings_ray_sends() -> None:
    assert [s.value for s in Status] == [
        "NOT_STARTED", "DEPLOYING", "RUNNING", "DEPLOY_FAILED", "DELETING", "UNHEALTHY",
    ]  # fmt: skip
    assert Status.RUNNING == "RUNNING"
