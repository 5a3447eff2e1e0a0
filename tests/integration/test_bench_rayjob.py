"""``hack/bench/rayjob.py`` runs two ``K8sJobMode`` RayJobs to ``Complete`` with our operator
and with KubeRay v1.5.0 (the Go module proxy's; v1.7.0 is not on it), the submitter played
by the script the same way for both, and reports the issue's figures for each, side by
side. Nothing about performance is asserted at this size, only that each figure was
measured and is sane (issue 38, item 7)."""

from __future__ import annotations

import pathlib

import pytest

from tests.integration import helpers

ROOT = pathlib.Path(__file__).parents[2]
SCRIPT = ROOT / "hack/bench/rayjob.py"
FIGURES = (
    "status_writes_per_job", "raycluster_status_writes_per_job", "writes_per_job",
    "time_to_complete_p50_s", "time_to_complete_p90_s", "data_plane_requests_per_job",
    "job_api_requests_per_job", "peak_rss_mib", "cpu_s", "rest_status_writes",
)  # fmt: skip
JOBS = 2


@pytest.mark.timeout(600)
def test_both_operators_complete_the_jobs(bin_dir: pathlib.Path) -> None:
    report = helpers.bench(
        SCRIPT, ["--jobs", str(JOBS), "--quick", "--bin-dir", str(bin_dir)], timeout=580
    )
    assert (report["bench"], report["jobs"], report["kuberay_version"]) == (
        "rayjob", JOBS, "v1.5.0"
    )  # fmt: skip
    for operator in ("ours", "kuberay"):
        run = report[operator]
        for key in FIGURES:
            assert isinstance(run[key], int | float), (operator, key)
            assert run[key] >= 0, (operator, key)
        # Every job went through its lifecycle: status written, a cluster created and
        # deleted, the job submitted and its status read by the operator.
        assert run["status_writes_per_job"] >= 1, (operator, run)
        assert run["writes_per_job"] >= 3, (operator, run)  # cluster, submitter Job, delete
        assert 0 < run["time_to_complete_p50_s"] <= run["time_to_complete_p90_s"] < 120, run
        assert run["job_api_requests_per_job"] >= 1, (operator, run)
        assert run["data_plane_requests_per_job"] >= run["job_api_requests_per_job"], run
        assert run["peak_rss_mib"] > 0, run
        assert run["cpu_s"] > 0, run
    # Our operator writes nothing once the jobs are finished and their clusters gone.
    assert report["ours"]["rest_status_writes"] == 0, report["ours"]
    assert report["ours"]["rest_operator_writes"] == 0, report["ours"]
    assert set(report["ratios"]) >= set(FIGURES) - {"rest_status_writes"}
