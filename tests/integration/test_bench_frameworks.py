"""``hack/bench/frameworks.py`` runs as its own process with 50 Widgets: both operators (ours
on ``runtime/``, and Kopf from PyPI, installed by ``hack/peers/kopf.sh`` if missing) make
every Widget converge after the creates and after the updates, and the last line holds
every figure the framework table of docs/operator/performance.md shows. The performance
targets are not asserted at this size (the full run is by hand, ``--objects 2000``)."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).parents[2]
SCRIPT = ROOT / "hack/bench/frameworks.py"
OBJECTS = 50
HEADLINE = ("converge_s", "cpu_s", "peak_rss_mib", "api_requests")
STATUS_WRITE = {"ours": "update widgets/status", "kopf": "patch widgets/status"}


@pytest.mark.timeout(600)
def test_both_frameworks_converge_every_widget(bin_dir: pathlib.Path) -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--objects", str(OBJECTS), "--bin-dir", str(bin_dir)],
        cwd=ROOT, capture_output=True, text=True, timeout=580, check=False,
    )  # fmt: skip
    lines = [json.loads(line) for line in done.stdout.strip().splitlines()]
    assert lines, f"no output; stderr:\n{done.stderr[-3000:]}"
    final = lines[-1]
    assert done.returncode == 0, f"{final.get('error')}\nstderr:\n{done.stderr[-3000:]}"
    assert "error" not in final
    assert (final["bench"], final["objects"]) == ("frameworks", OBJECTS)
    assert set(final["ratios"]) == set(HEADLINE)

    per_framework = {line["framework"]: line for line in lines[:-1]}
    assert list(per_framework) == ["ours", "kopf"]
    for name, report in per_framework.items():
        assert tuple(report)[:7] == ("bench", "framework", "objects", *HEADLINE), name
        assert final[name] == {key: report[key] for key in HEADLINE}
        assert report["created_converged"] == OBJECTS, report
        assert report["updated_converged"] == OBJECTS, report
        assert report["operator_exit_code"] == 0, report
        assert report["converge_s"] < 60, report
        assert report["cpu_s"] > 0, report
        assert 0 < report["peak_rss_mib"] < 1024, report
        # At least one status write per create and per update (and the canary's), and
        # every request counted is one of the operator's own.
        assert report["api_requests_by"].get(STATUS_WRITE[name], 0) >= 2 * OBJECTS + 1, report
        assert report["api_requests"] == sum(report["api_requests_by"].values())
        prefix = "frameworks-bench/ours" if name == "ours" else "kopf/"
        agents = [agent for agent in report["audited_by_agent"] if agent.startswith(prefix)]
        assert len(agents) == 1, report["audited_by_agent"]
        assert report["api_requests"] == report["audited_by_agent"][agents[0]]
        # The bench's own requests: canary + N creates, N patches, and its LIST and WATCH
        # (again each time the apiserver closed its watch for falling behind).
        restarts = report["bench_watch_restarts"]
        assert report["bench_requests_by"] == {
            "create widgets": OBJECTS + 1, "patch widgets": OBJECTS,
            "list widgets": 1 + restarts, "watch widgets": 1 + restarts,
        }, report  # fmt: skip
        # apiserver_request_total agrees with the audit log the counts come from.
        assert report["metrics_minus_audit"] == 0, report["metrics_minus_audit_by"]
