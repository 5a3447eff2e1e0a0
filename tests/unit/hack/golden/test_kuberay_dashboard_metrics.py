"""hack/golden/kuberay_dashboard_metrics.py: the metrics, labels and values a Grafana
dashboard's PromQL uses; and the recorded v1.7.0 file is what the script writes."""

from __future__ import annotations

import json
from typing import Any

from tests.unit import helpers

script = helpers.load_script("hack/golden/kuberay_dashboard_metrics.py")
RECORDED = helpers.ROOT / "tests/integration/testdata/kuberay-v1.7.0/dashboard-metrics.json"


def dashboard(*exprs: str, variables: tuple[dict[str, Any], ...] = ()) -> dict[str, Any]:
    return {
        "panels": [
            {"targets": [{"expr": exprs[0]}]},
            {"type": "row", "panels": [{"targets": [{"expr": e} for e in exprs[1:]]}]},
        ],
        "templating": {"list": [{"type": "datasource", "name": "ds"}, *variables]},
    }


def test_matchers_grouping_and_nested_panels_are_attributed_to_their_metric() -> None:
    facts = script.facts(dashboard(
        'histogram_quantile(0.99, sum(rate(x_seconds_bucket{ns="$N", c=~"$C"}[5m])) by (pod,le))',
        "count(y_info) by (namespace)",
        'a{condition="false"} == 1 and on(pod) b{kind="K", pod=~".*-head"}',
    ), "v0")  # fmt: skip
    assert facts["kuberay_version"] == "v0"
    assert facts["metrics"] == {
        "x_seconds_bucket": {"labels": ["c", "le", "ns", "pod"],
                             "matchers": [["c", "=~", "$C"], ["ns", "=", "$N"]]},
        "y_info": {"labels": ["namespace"], "matchers": []},
        "a": {"labels": ["condition", "pod"], "matchers": [["condition", "=", "false"]]},
        "b": {"labels": ["kind", "pod"],
              "matchers": [["kind", "=", "K"], ["pod", "=~", ".*-head"]]},
    }  # fmt: skip


def test_query_variables_record_their_default_and_the_label_they_read() -> None:
    variable = {"type": "query", "name": "Controller", "current": {"value": "raycluster"},
                "definition": 'label_values(workers{ns="$N"},controller)'}  # fmt: skip
    facts = script.facts(dashboard("up", variables=(variable,)), "v0")
    assert facts["variables"] == {
        "Controller": {
            "query": 'label_values(workers{ns="$N"},controller)',
            "current": "raycluster",
        }
    }
    assert facts["metrics"]["workers"] == {"labels": ["controller", "ns"],
                                           "matchers": [["ns", "=", "$N"]]}  # fmt: skip


def test_the_recorded_file_is_canonical_and_holds_what_the_integration_test_checks() -> None:
    text = RECORDED.read_text()
    data = json.loads(text)
    assert text == json.dumps(data, indent=1, sort_keys=True) + "\n"
    assert (data["source"], data["kuberay_version"]) == (script.DASHBOARD, "v1.7.0")
    assert data["variables"]["Controller"]["current"] == "raycluster"
    assert {"kuberay_cluster_info", "kuberay_service_condition_ready", "workqueue_depth",
            "controller_runtime_reconcile_total"} <= set(data["metrics"])  # fmt: skip
