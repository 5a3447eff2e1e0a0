"""``hack/bench/compare.py`` runs our operator and KubeRay v1.5.0 one after the other (one
RayService, a 20 s steady window, one round): both bring the service to Ready and through
the ``rayVersion`` upgrade, and every run and the summary carry the issue's figures.
Nothing about performance is asserted at this size."""

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
    "time_to_upgraded_s", "peak_rss_mib", "cpu_s",
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
         "--rounds", "1", "--bin-dir", str(bin_dir)],
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
            "conflicts_by_client",
        }  # fmt: skip
    # Each run's steady traffic is its own operator's: KubeRay's client never shows up in
    # our run, and KubeRay's proxy requests go to the simulated heads.
    ours, kuberay = runs
    assert "kuberay-operator" not in ours["detail"]["steady_by_client"]
    assert "kuberay-operator" in kuberay["detail"]["steady_by_client"]
    assert kuberay["steady_proxy_requests_per_min"] > 0
    assert kuberay["dashboard_requests_per_min_per_svc"] > 0

    heading = (summary["bench"], summary["services"], summary["steady_seconds"], summary["rounds"])
    assert heading == ("compare", 1, 20.0, 1)
    for operator in ("ours", "kuberay"):
        for key in (*FIGURES, *SPLIT):
            assert summary[operator][key] == next(
                r[key] for r in runs if r["operator"] == operator
            ), (operator, key)  # the median of one round is that round
    for key in FIGURES:
        assert key in summary["ratios"], key
