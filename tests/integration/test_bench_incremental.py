"""``hack/bench/incremental.py`` runs as its own process for our operator alone (one
RayService, 15 s idle windows): the incremental upgrade finishes with traffic through
Traefik on both clusters, every figure is there, and an idle service is never written
(KubeRay v1.7.0's column needs its binary and is run by hand: docs/operator/performance.md's
section)."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).parents[2]
SCRIPT = ROOT / "hack/bench/incremental.py"
FIGURES = (
    "time_to_ready_s",
    "idle_before_status_writes_per_min_per_svc", "idle_after_status_writes_per_min_per_svc",
    "upgrade_status_writes_per_svc", "upgrade_status_writes_per_step", "writes_per_svc",
    "time_to_upgraded_s", "requests", "failed_requests",
)  # fmt: skip
"""The issue's figures, first in a run's object and in this order."""
MORE = (
    "idle_before_raycluster_status_writes_per_min_per_svc",
    "idle_after_raycluster_status_writes_per_min_per_svc",
    "idle_before_operator_writes_per_min", "idle_after_operator_writes_per_min",
    "idle_before_writes_all_clients_per_min", "idle_after_writes_all_clients_per_min",
    "idle_before_dashboard_requests_per_min_per_svc",
    "idle_after_dashboard_requests_per_min_per_svc", "init_status_writes_per_svc",
    "upgrade_raycluster_status_writes_per_svc", "upgrade_route_writes_per_svc",
    "upgrade_operator_writes_per_svc", "upgrade_serve_puts_per_svc", "time_to_old_deleted_s",
    "writes_all_clients_per_svc", "conflicts", "peak_rss_mib", "cpu_s",
)  # fmt: skip
IDLE = 15.0


@pytest.mark.timeout(420)
def test_ours_upgrades_incrementally_and_never_writes_at_rest(bin_dir: pathlib.Path) -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--services", "1", "--operator", "ours",
         "--idle-seconds", str(IDLE), "--interval", "2", "--deletion-delay", "3",
         "--bin-dir", str(bin_dir)],
        cwd=ROOT, capture_output=True, text=True, timeout=400, check=False,
    )  # fmt: skip
    lines = done.stdout.strip().splitlines()
    assert lines, f"no output; stderr:\n{done.stderr[-3000:]}"
    summary = json.loads(lines[-1])
    assert done.returncode == 0, f"{summary.get('error')}\nstderr:\n{done.stderr[-3000:]}"
    assert "error" not in summary
    assert (summary["bench"], summary["services"], summary["operators"]) == (
        "incremental",
        1,
        "ours",
    )
    assert summary["idle_seconds"] == IDLE
    assert summary["cluster_upgrade_options"] == {
        "maxSurgePercent": 50, "stepSizePercent": 50, "intervalSeconds": 2
    }  # fmt: skip
    assert "kuberay" not in summary
    assert "ratios" not in summary

    run = summary["ours"]
    assert "upgrade_error" not in run, run.get("upgrade_error")
    assert tuple(run)[: len(FIGURES)] == FIGURES, list(run)
    for key in (*FIGURES, *MORE):
        assert isinstance(run[key], int | float), key
        assert run[key] >= 0, key
    assert 0 < run["time_to_ready_s"] < 120
    # Two traffic steps of 50 %, 2 s apart at least; then the old cluster goes 3 s later.
    assert 2 <= run["time_to_upgraded_s"] < run["time_to_old_deleted_s"] < 150, run

    # At rest nothing is written, before the upgrade and after it.
    figures = {k: run[k] for k in (*FIGURES, *MORE)}
    for phase in ("idle_before", "idle_after"):
        assert run[f"{phase}_status_writes_per_min_per_svc"] == 0, figures
        assert run[f"{phase}_raycluster_status_writes_per_min_per_svc"] == 0, figures
        assert run[f"{phase}_operator_writes_per_min"] == 0, figures
        assert run["detail"]["operator_writes_by_kind"][phase] == {}

    # The upgrade: statuses written, route weights moved (add the new backend, 50, 100,
    # drop the old one), Serve's target_capacity set on both clusters.
    assert run["upgrade_status_writes_per_svc"] >= 2, figures
    assert run["upgrade_status_writes_per_step"] == pytest.approx(
        run["upgrade_status_writes_per_svc"] / 2, abs=0.001
    )
    assert run["upgrade_route_writes_per_svc"] >= 2, figures
    assert run["upgrade_serve_puts_per_svc"] >= 3, figures
    assert run["writes_per_svc"] >= run["upgrade_operator_writes_per_svc"] > 0, figures

    # Traffic went through Traefik to both clusters (the simulator's pod header says which).
    traffic = run["detail"]["traffic"]
    assert run["requests"] > 50, traffic
    assert run["failed_requests"] == sum(traffic["failed_by"].values()), traffic
    assert run["failed_requests"] < run["requests"] / 10, traffic
    answered = traffic["answered_by_cluster"]
    assert len(answered) == 2, answered
    assert all(name.startswith("inc-ours-0/inc-0-") for name in answered), answered
    assert set(run["detail"]["windows"]) == {
        "init", "idle_before", "upgrade", "cleanup", "idle_after", "run"
    }  # fmt: skip
