"""``hack/bench/compare.py`` runs our operator and KubeRay one after the other (one
RayService, a 20 s steady window, one round): both bring the service to Ready, through the
``rayVersion`` upgrade and its deletion, and every run and the summary carry the issue's
figures and a start-up timeline. Nothing about performance is asserted at this size.

The peer here is KubeRay v1.5.0, which the Go module proxy serves (CI cannot fetch
v1.7.0's source; ``make bench-compare`` runs v1.7.0 built from a checkout)."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).parents[2]
SCRIPT = ROOT / "hack/bench/compare.py"
FIGURES = (
    "init_status_writes_per_svc", "steady_status_writes_per_svc",
    "upgrade_status_writes_per_svc", "steady_nonwatch_requests_per_min",
    "dashboard_requests_per_min_per_svc", "conflicts_per_svc", "time_to_ready_s",
    "time_to_upgraded_s", "writes_per_svc", "time_to_deleted_s", "peak_rss_mib", "cpu_s",
)  # fmt: skip
"""The issue's figures, in its order (``hack/bench/results/<date>.json``)."""
SPLIT = tuple(
    f"{phase}_{kind}_status_writes_per_svc"
    for phase in ("init", "steady", "upgrade")
    for kind in ("rayservice", "raycluster")
)
EXTRA = (
    "steady_proxy_requests_per_min", "steady_nonwatch_incl_proxy_per_min", "conflicts",
    "writes_all", "serve_puts", "steady_nonwatch_all_clients_per_min",
    "steady_proxy_all_clients_per_min", "conflicts_all_clients", "writes_all_clients",
)  # fmt: skip


@pytest.mark.timeout(600)
def test_both_operators_reach_ready_and_upgrade(bin_dir: pathlib.Path) -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--services", "1", "--steady-seconds", "20",
         "--rounds", "1", "--bin-dir", str(bin_dir), "--kuberay-version", "v1.5.0"],
        cwd=ROOT, capture_output=True, text=True, timeout=580, check=False,
    )  # fmt: skip
    lines = [json.loads(line) for line in done.stdout.strip().splitlines()]
    assert lines, f"no output; stderr:\n{done.stderr[-3000:]}"
    summary = lines[-1]
    assert done.returncode == 0, f"{summary.get('error')}\nstderr:\n{done.stderr[-3000:]}"
    assert "error" not in summary

    runs = lines[:-1]
    assert [(r["bench"], r["operator"], r["round"]) for r in runs] == [
        ("compare-run", "ours", 1), ("compare-run", "kuberay", 1)
    ]  # fmt: skip
    for run in runs:
        assert "error" not in run, run
        assert tuple(run)[3 : 3 + len(FIGURES)] == FIGURES, list(run)
        for key in (*FIGURES, *SPLIT, *EXTRA):
            assert isinstance(run[key], int | float), (run["operator"], key)
            assert run[key] >= 0, (run["operator"], key)
        # Ready and upgraded (the script waits for both; the times say it got there).
        assert 0 < run["time_to_ready_s"] < 120, run
        assert 0 < run["time_to_upgraded_s"] < 150, run
        assert 0 < run["time_to_deleted_s"] < 150, run
        assert run["writes_per_svc"] == run["writes_all"], "one service: all its writes"
        # The start-up timeline: every step seen once, in the order it must happen.
        line = run["detail"]["timeline"]
        steps = ("cluster_created", "head_pod_bound", "head_pod_running", "head_svc_created",
                 "first_dashboard_get", "first_dashboard_ok", "first_serve_put",
                 "serve_svc_created", "first_status_write",
                 "last_status_write", "ready_seen")  # fmt: skip
        assert {e: line[e]["n"] for e in steps if e in line} == dict.fromkeys(steps, 1), line
        assert "old_cluster_deleted" not in line, "nothing is deleted while starting"
        # What the dashboards were asked, per phase: one PUT to start, one to upgrade.
        plane = run["detail"]["data_plane_by_phase"]
        assert plane["init"]["dashboard PUT /api/serve/applications/"] == 1, plane
        assert plane["upgrade"]["dashboard PUT /api/serve/applications/"] == 1, plane
        assert run["detail"]["proxy_by_phase"]["init"], "the dashboard reached through the proxy"
        # ... and the upgrade's: a new cluster, traffic moved, the old one deleted.
        up = run["detail"]["upgrade_timeline"]
        for step in ("cluster_created", "first_serve_put", "services_updated",
                     "old_cluster_deleted", "ready_seen"):  # fmt: skip
            assert up.get(step, {}).get("n") == 1, (step, up)
        assert up["cluster_created"]["p50"] <= up["services_updated"]["p50"], up
        assert up["services_updated"]["p50"] <= up["old_cluster_deleted"]["p50"], up
        p50 = run["timeline_p50_s"]
        assert 0 <= p50["cluster_created"] <= p50["head_pod_bound"] <= p50["head_pod_running"]
        assert p50["head_pod_running"] <= p50["first_serve_put"] <= p50["ready_seen"], p50
        # The Serve PUT follows a dashboard GET that was answered.
        assert p50["first_dashboard_get"] <= p50["first_dashboard_ok"] <= p50["first_serve_put"]
        assert p50["first_status_write"] <= p50["last_status_write"] <= p50["ready_seen"], p50
        # Each operator wrote its statuses and made its own traffic.
        assert run["init_rayservice_status_writes_per_svc"] >= 1, run
        assert run["init_raycluster_status_writes_per_svc"] >= 1, run
        assert run["init_status_writes_per_svc"] == pytest.approx(
            run["init_rayservice_status_writes_per_svc"]
            + run["init_raycluster_status_writes_per_svc"]
        )
        assert run["serve_puts"] >= 2, "a Serve config PUT to the first and to the new cluster"
        # The operator's own traffic, attributed by the audit log: it polls its heads
        # through the API server's proxy while idle, and it made writes.
        assert run["steady_proxy_requests_per_min"] > 0, run["detail"]["steady_by_client"]
        assert run["writes_all"] > 0, run["detail"]["operator_writes_by_kind"]
        assert run["peak_rss_mib"] > 0
        assert run["cpu_s"] > 0
        assert set(run["detail"]) >= {
            "steady_nonwatch_by_kind", "steady_proxy_by_kind", "data_plane_steady_by_kind",
            "writes_by_kind", "steady_by_client", "operator_writes_by_kind",
            "conflicts_by_client", "phases", "rps_timeline",
        }  # fmt: skip
        # Where the time went: every process's CPU per phase, the requests per second.
        phases = run["detail"]["phases"]
        assert list(phases) == ["init", "steady", "upgrade", "delete"]
        assert phases["init"]["cpu_s"]["kube-apiserver"] > 0, phases["init"]
        assert {"operator", "etcd", "simulator"} <= set(phases["init"]["cpu_s"])
        assert phases["init"]["histograms"]["workqueue_queue_duration_seconds"]["count"] > 0
        rps = run["detail"]["rps_timeline"]
        assert sum(rps["all_clients"]) > sum(sum(v) for v in rps["operator"].values()) > 0
    # Each run's steady traffic is its own operator's: KubeRay's client never shows up in
    # our run, and KubeRay's proxy requests go to the simulated heads.
    ours, kuberay = runs
    assert "kuberay-operator" not in ours["detail"]["steady_by_client"]
    assert "kuberay-operator" in kuberay["detail"]["steady_by_client"]
    assert kuberay["steady_proxy_requests_per_min"] > 0
    assert kuberay["dashboard_requests_per_min_per_svc"] > 0
    # Ours exports its client-side limiter's waits (qps 100 by default) and its event
    # loop's lag; controller-runtime exports neither.
    histograms = ours["detail"]["phases"]["init"]["histograms"]
    assert histograms["rest_client_rate_limiter_duration_seconds"]["count"] > 0
    assert histograms["event_loop_lag_seconds"]["count"] > 0
    assert "event_loop_lag_seconds" not in kuberay["detail"]["phases"]["init"]["histograms"]

    heading = (summary["bench"], summary["services"], summary["steady_seconds"], summary["rounds"],
               summary["kuberay_version"], summary["head_only"])  # fmt: skip
    assert heading == ("compare", 1, 20.0, 1, "v1.5.0", False)
    for operator in ("ours", "kuberay"):
        for key in (*FIGURES, *SPLIT):
            assert summary[operator][key] == next(
                r[key] for r in runs if r["operator"] == operator
            ), (operator, key)  # the median of one round is that round
    for key in FIGURES:
        assert key in summary["ratios"], key
