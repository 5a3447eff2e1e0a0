"""``hack/bench/raycluster.py`` still runs: tiny numbers, as its own process, and its last
stdout line is the JSON object ``make bench`` reports (keys and values that make sense)."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

from tests.integration import helpers

ROOT = pathlib.Path(__file__).parents[2]
SCRIPT = ROOT / "hack/bench/raycluster.py"
HEADLINE = (
    "bench", "clusters", "time_to_all_ready_s", "status_writes_per_cluster",
    "writes_per_cluster", "steady_writes_per_min", "manager_rss_mib", "manager_cpu_s",
)  # fmt: skip


def test_benchmark_reports_every_key_with_sane_values(bin_dir: pathlib.Path) -> None:
    report = helpers.bench(SCRIPT, [
        "--clusters", "2", "--steady-seconds", "10",
        "--bin-dir", str(bin_dir)
    ], timeout=240)  # fmt: skip
    assert tuple(report)[: len(HEADLINE)] == HEADLINE

    assert report["bench"] == "raycluster"
    assert report["clusters"] == 2
    assert 0 < report["time_to_all_ready_s"] < 120
    # Every cluster needs 1 head + 2 workers + 1 head service, and ready is a written status.
    assert report["pods_created"] == 6
    assert report["services_created"] == 2
    assert report["objects_created_per_cluster"] == 4
    assert report["status_writes_per_cluster"] >= 1
    assert report["writes_per_cluster"] >= 4 + 1
    # What the apiserver saw of the writes only the manager makes is part of the manager's
    # own count (which also has what the apiserver cannot attribute, like events).
    assert report["apiserver_manager_writes_per_cluster"] >= 4 + 1
    assert report["writes_per_cluster"] >= report["apiserver_manager_writes_per_cluster"]
    assert report["steady_writes_per_min"] >= 0
    assert report["non_watch_requests_per_min_steady"] >= 0
    assert 10 < report["manager_rss_mib"] < 4096
    assert 0 < report["manager_cpu_s"] < 600


def test_benchmark_that_times_out_still_ends_with_json_and_fails(bin_dir: pathlib.Path) -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--clusters", "1", "--steady-seconds", "1",
         "--ready-timeout", "0", "--bin-dir", str(bin_dir)],
        cwd=ROOT, capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert done.returncode == 1
    assert report["bench"] == "raycluster"
    assert report["error"].startswith("0 of 1 RayClusters ready after 0 s")
    assert "last lines of the manager log" in done.stderr
