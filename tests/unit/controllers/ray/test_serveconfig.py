"""controllers.ray.serveconfig: serveConfigV2 YAML -> the JSON body of the PUT."""

from __future__ import annotations

import json

import pytest
import yaml

from controllers.ray import serveconfig
from tests.unit import helpers

SAMPLES = helpers.ROOT / "config" / "samples"

MULTI_APP = """\
proxy_location: EveryNode
http_options:
  host: 0.0.0.0
  port: 8000
applications:
  - name: fruit_app
    import_path: fruit.deployment_graph
    route_prefix: /fruit
    runtime_env:
      working_dir: "https://github.com/ray-project/test_dag/archive/78b4a5da38796123d9f9ffff59bab2792a043e95.zip"
    deployments:
      - name: MangoStand
        num_replicas: 2
        max_replicas_per_node: 1
        user_config:
          price: 3
        ray_actor_options:
          num_cpus: 0.1
"""


def test_a_multi_application_config_becomes_its_json_object() -> None:
    config = serveconfig.serve_config(MULTI_APP)
    assert config["proxy_location"] == "EveryNode"
    app = config["applications"][0]
    assert app["name"] == "fruit_app"
    assert app["deployments"][0] == {
        "name": "MangoStand",
        "num_replicas": 2,
        "max_replicas_per_node": 1,
        "user_config": {"price": 3},
        "ray_actor_options": {"num_cpus": 0.1},
    }
    # it is the JSON body as sent
    assert json.loads(json.dumps(config)) == config


def test_the_rayservice_samples_convert() -> None:
    found = 0
    for path in sorted(SAMPLES.glob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            if not document or document.get("kind") != "RayService":
                continue
            config = serveconfig.serve_config(document["spec"]["serveConfigV2"])
            assert config["applications"], path
            found += 1
    assert found >= 1, f"no RayService sample under {SAMPLES}"


def test_yaml_types_follow_kubernetes_yaml() -> None:
    config = serveconfig.serve_config(
        "a: yes\nb: off\nc: 2024-01-02\nd: 2001-12-14t21:59:43.10-05:00\n"
        "1: one\ne: ~\nf: '3'\ng: 3\n"
    )
    assert config == {
        "a": True, "b": False, "c": "2024-01-02", "d": "2001-12-14t21:59:43.10-05:00",
        "1": "one", "e": None, "f": "3", "g": 3,
    }  # fmt: skip


@pytest.mark.parametrize(
    ("text", "line", "column"),
    [
        ("applications:\n  - name: a\n   import_path: x", 3, 4),
        ("applications: [a, b\nx: 1", 2, 2),
        ("a: b: c", 1, 5),
        ("\tapplications: []", 1, 1),
    ],
)
def test_invalid_yaml_says_where(text: str, line: int, column: int) -> None:
    with pytest.raises(serveconfig.ServeConfigError) as caught:
        serveconfig.serve_config(text)
    assert (caught.value.line, caught.value.column) == (line, column)
    assert f"(line {line}, column {column})" in str(caught.value)
    assert str(caught.value).startswith("serveConfigV2 is not valid YAML")
    assert isinstance(caught.value, ValueError)


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("", "empty"),
        ("# only a comment\n", "empty"),
        ("- name: a\n", "a list"),
        ("just text", "a string ('just text')"),
        ("42", "a number (42)"),
        ("true", "a boolean (True)"),
    ],
)
def test_a_document_that_is_no_mapping_is_refused(text: str, kind: str) -> None:
    with pytest.raises(serveconfig.ServeConfigError) as caught:
        serveconfig.serve_config(text)
    assert str(caught.value).endswith(f"but it is {kind}")
    assert caught.value.line is None


@pytest.mark.parametrize(
    "text", ["a: .nan", "a: .inf", "a: !!binary aGVsbG8=", "a: &x [*x]", "a: !!set {x}"]
)
def test_values_without_a_json_form_are_refused(text: str) -> None:
    with pytest.raises(serveconfig.ServeConfigError, match="JSON cannot carry"):
        serveconfig.serve_config(text)


def test_python_tags_are_not_constructed() -> None:
    with pytest.raises(serveconfig.ServeConfigError, match="could not determine a constructor"):
        serveconfig.serve_config("a: !!python/object/apply:os.system ['true']")
