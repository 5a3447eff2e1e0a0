#!/usr/bin/env python3
"""Record which metrics, labels and label values KubeRay's operator dashboard queries.

Run ``python3 hack/golden/kuberay_dashboard_metrics.py [--repo GIT_DIR] [--ref v1.7.0]``.
It reads ``config/grafana/KubeRay-Operator.json`` at ``--ref`` from a clone (bare or not)
of github.com/ray-project/kuberay (``--repo``, default ``/work/.mirror/ray-project+kuberay/repo``,
read with ``git show``; nothing is fetched) and writes the facts the integration test
``tests/integration/test_metrics.py`` checks our ``/metrics`` against - not the dashboard.

Output: ``tests/integration/testdata/kuberay-v1.7.0/dashboard-metrics.json`` (``--out``),
JSON with ``indent=1``, sorted keys and a trailing newline::

    {"source": "config/grafana/KubeRay-Operator.json", "kuberay_version": "v1.7.0",
     "metrics": {"<metric>": {"labels": [...],      # every label name a query uses on it:
                                                     # matchers, by (...), on (...),
                                                     # label_values(..., <label>)
                              "matchers": [[label, op, value], ...]}},
     "variables": {"<name>": {"query": "...", "current": "..."}}}   # the query variables

A metric is every name a PromQL expression selects (``name{...}`` or a bare ``name``);
``by``/``on`` labels are attributed to every metric of the expression they appear in
(each query of this dashboard that groups has one metric, or joins two on ``pod``).
Matcher values are as written (``$Controller`` is a dashboard variable; its default is
under ``variables``). Two runs give identical bytes.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import re
import subprocess
from collections.abc import Iterator
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[2]
DASHBOARD = "config/grafana/KubeRay-Operator.json"
DEFAULT_REPO = "/work/.mirror/ray-project+kuberay/repo"
DEFAULT_OUT = ROOT / "tests/integration/testdata/kuberay-v1.7.0/dashboard-metrics.json"

_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or",
             "unless", "bool", "offset"}  # fmt: skip
_SELECTOR = re.compile(r"([A-Za-z_:][A-Za-z0-9_:]*)\s*(\{[^}]*\})?")
_MATCHER = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"')
_GROUPING = re.compile(r"\b(?:by|on|without|ignoring)\s*\(([^)]*)\)")
_LABEL_VALUES = re.compile(r"label_values\((.*),\s*([A-Za-z_][A-Za-z0-9_]*)\s*\)\s*$")


def expressions(dashboard: dict[str, Any]) -> Iterator[str]:
    """Every panel target's ``expr`` (nested rows included), in file order."""

    def walk(panels: list[dict[str, Any]]) -> Iterator[str]:
        for panel in panels:
            for target in panel.get("targets") or ():
                if target.get("expr"):
                    yield str(target["expr"])
            yield from walk(panel.get("panels") or [])

    yield from walk(dashboard.get("panels") or [])


def selectors(expr: str) -> Iterator[tuple[str, str]]:
    """``(metric, matchers text)`` for each metric selected in ``expr``."""
    text = re.sub(r"\[[^\]]*\]", "", expr)  # range durations: [5m], [$__rate_interval]
    text = _GROUPING.sub("", text)
    for match in _SELECTOR.finditer(text):
        name, braces = match.group(1), match.group(2) or ""
        start, end = match.span()
        if name in _KEYWORDS or text[end:].lstrip().startswith("("):
            continue  # a keyword or a function call
        before = text[:start].rstrip()
        if before.endswith(("$", ".")) or re.match(r"\d", name) or before.endswith('"'):
            continue
        if _inside_braces(text, start):
            continue  # a label name of a matcher
        yield name, braces


def _inside_braces(text: str, at: int) -> bool:
    return text.rfind("{", 0, at) > text.rfind("}", 0, at)


def record(metrics: dict[str, dict[str, Any]], expr: str) -> None:
    grouping = [label.strip() for group in _GROUPING.findall(expr)
                for label in group.split(",") if label.strip()]  # fmt: skip
    for name, braces in selectors(expr):
        entry = metrics.setdefault(name, {"labels": set(), "matchers": set()})
        for label, op, value in _MATCHER.findall(braces):
            entry["labels"].add(label)
            entry["matchers"].add((label, op, value))
        entry["labels"].update(grouping)


def facts(dashboard: dict[str, Any], ref: str) -> dict[str, Any]:
    metrics: dict[str, dict[str, Any]] = {}
    for expr in expressions(dashboard):
        record(metrics, expr)
    variables = {}
    for variable in (dashboard.get("templating") or {}).get("list") or ():
        if variable.get("type") != "query":
            continue
        query = variable.get("definition") or (variable.get("query") or {}).get("query", "")
        current = (variable.get("current") or {}).get("value")
        if isinstance(current, list):
            current = ",".join(current)
        variables[variable["name"]] = {"query": query, "current": current}
        found = _LABEL_VALUES.match(query)
        if found:
            inner, label = found.groups()
            record(metrics, inner)
            for name, _ in selectors(inner):
                metrics[name]["labels"].add(label)
    return {
        "source": DASHBOARD,
        "kuberay_version": ref,
        "metrics": {
            name: {
                "labels": sorted(entry["labels"]),
                "matchers": [list(m) for m in sorted(entry["matchers"])],
            }
            for name, entry in sorted(metrics.items())
        },
        "variables": dict(sorted(variables.items())),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repo", default=DEFAULT_REPO, help="a clone of ray-project/kuberay")
    parser.add_argument("--ref", default="v1.7.0")
    parser.add_argument("--out", type=pathlib.Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    text = subprocess.run(
        ["git", "-C", args.repo, "show", f"{args.ref}:{DASHBOARD}"],
        check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    out: pathlib.Path = args.out
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(facts(json.loads(text), args.ref), indent=1, sort_keys=True) + "\n")
    print(out)


if __name__ == "__main__":
    main()
