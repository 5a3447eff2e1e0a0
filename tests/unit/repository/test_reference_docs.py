"""The operator's reference pages leave nothing undocumented.

``docs/_ext/operator_reference.py`` generates four tables from the code when the docs
are built (flags, Configuration fields, metrics, Helm values). Here: every entry has a
description (help, docstring, comment in ``values.yaml``), each page renders its table,
and the collection finds what is known to be there, including what is added later.
"""

from __future__ import annotations

import pathlib

import pytest

from runtime import metrics as runtime_metrics
from tests.unit import helpers

reference = helpers.load_script("docs/_ext/operator_reference.py")

OPERATOR_DOCS = helpers.ROOT / "docs" / "operator"
PAGES = {
    "flags.md": "rayservice-flags",
    "configuration.md": "rayservice-configuration",
    "metrics.md": "rayservice-metrics",
    "helm-values.md": "helm-values",
}


@pytest.mark.parametrize(("page", "directive"), PAGES.items())
def test_each_page_renders_its_table(page: str, directive: str) -> None:
    assert f"```{{{directive}}}\n```" in (OPERATOR_DOCS / page).read_text()


def test_every_flag_has_help() -> None:
    assert [f.flag for f in reference.flags() if not f.help.strip()] == []


def test_every_configuration_field_has_a_description() -> None:
    fields = reference.configuration_fields()
    assert [f.key for f in fields if not f.description.strip()] == []


def test_every_metric_has_help() -> None:
    assert [m.name for m in reference.metrics() if not m.help.strip()] == []


def test_every_helm_value_has_a_comment() -> None:
    assert [v.key for v in reference.helm_values() if not v.comment.strip()] == []


def test_the_flags_are_the_settings_with_their_variables() -> None:
    by_flag = {f.flag: f for f in reference.flags()}
    assert {"--leader-elect", "--metrics-bind-address", "--namespace", "--config"} <= set(by_flag)
    leader = by_flag["--leader-elect"]
    assert (leader.env, leader.type, leader.default) == (
        "RAYSERVICE_LEADER_ELECT",
        "boolean",
        "true",
    )
    assert by_flag["--metrics-bind-address"].default == ":8080"
    assert by_flag["--kubeconfig"].default is None
    assert by_flag["--log-format"].type == "auto | json | console"


def test_the_configuration_keys_are_the_files() -> None:
    by_key = {f.key: f for f in reference.configuration_fields()}
    assert {"apiVersion", "metricsAddr", "watchNamespace", "headSidecarContainers"} <= set(by_key)
    assert by_key["apiVersion"].default is None  # required
    assert (by_key["qps"].type, by_key["qps"].default) == ("number", "100.0")
    assert by_key["defaultPodLabels"].type == "map of strings"


def test_the_metrics_are_the_frameworks_and_kuberays() -> None:
    by_name = {m.name: m for m in reference.metrics()}
    for name in (
        "workqueue_depth",
        "workqueue_adds_total",
        "controller_runtime_reconcile_total",
        "controller_runtime_reconcile_time_seconds",
        "leader_election_master_status",
        "rest_client_requests_total",
        "status_writes_total",
        "process_cpu_seconds_total",
    ):
        assert by_name[name].when == "always", name
    depth = by_name["workqueue_depth"]
    assert (depth.type, depth.labels) == ("gauge", ("controller", "name"))
    assert by_name["controller_runtime_reconcile_time_seconds"].type == "histogram"
    info = by_name["kuberay_cluster_info"]
    assert info.labels == ("name", "namespace", "uid", "owner_kind")
    assert "--enable-metrics" in info.when


def test_a_new_metric_is_listed_without_editing_the_docs() -> None:
    family = runtime_metrics.Family("docs_probe_total", "A probe.", "counter", ("x",))
    try:
        listed = {m.name: m for m in reference.metrics()}
    finally:
        runtime_metrics.registry.unregister(family)
    assert listed["docs_probe_total"] == reference.Metric(
        "docs_probe_total", "counter", ("x",), "A probe.", "always"
    )


def test_the_helm_values_are_the_charts() -> None:
    by_key = {v.key: v for v in reference.helm_values()}
    assert by_key["image.repository"].default == '"rayservice-operator"'
    assert by_key["metrics.enabled"].default == "true"
    assert by_key["resources"].default.startswith('{"requests"')  # one row: no key commented
    assert by_key["metrics.secure"].default is None  # its keys are rows of their own


def test_a_helm_comment_is_the_block_right_above_its_key(tmp_path: pathlib.Path) -> None:
    values = tmp_path / "values.yaml"
    values.write_text(
        "# header\n\n"
        "# Documented.\n# Two lines.\n"
        "a: 1\n"
        "b:\n"
        "  # Inner.\n"
        "  c: [x]\n"
        "  d:\n"
        "  - e: 1\n"
        "    # inside a list item\n"
        "    f: 2\n"
        "# After a list.\n"
        "g: |\n"
        "  h: not a key\n"
    )
    rows = [(v.key, v.default, v.comment) for v in reference.helm_values(values)]
    assert rows == [
        ("a", "1", "Documented. Two lines."),
        ("b.c", '["x"]', "Inner."),
        ("b.d", '[{"e": 1, "f": 2}]', ""),
        ("g", '"h: not a key\\n"', "After a list."),
    ]


def test_a_values_file_the_reader_cannot_follow_is_an_error(tmp_path: pathlib.Path) -> None:
    values = tmp_path / "values.yaml"
    values.write_text("a: [1,\n  2]\n")
    with pytest.raises(ValueError, match="line 2"):
        reference.helm_values(values)
