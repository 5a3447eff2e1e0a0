"""``hack/bench/metrics_flood.py`` runs as its own process (control plane, a manager with
secure metrics and a GETting stand-in controller) with 100 junk tokens over 2 s: its JSON
has the figures side by side, every junk token was answered 401 (one TokenReview each)
or 429 (none), and the controller's GETs were not held up by the flood."""

from __future__ import annotations

import pathlib

import pytest

from tests.integration import helpers

ROOT = pathlib.Path(__file__).parents[2]
SCRIPT = ROOT / "hack/bench/metrics_flood.py"
HEADLINE = (
    "bench", "tokens", "seconds", "qps", "burst", "get_p50_ms", "get_p99_ms",
    "token_reviews_sent", "answered_429",
)  # fmt: skip
TOKENS = 100


@pytest.mark.timeout(300)
def test_a_flood_is_measured_beside_the_controllers_gets(bin_dir: pathlib.Path) -> None:
    report = helpers.bench(SCRIPT, [
        "--tokens", str(TOKENS), "--seconds", "2",
        "--concurrency", "50", "--bin-dir", str(bin_dir)
    ], timeout=280)  # fmt: skip
    assert tuple(report)[: len(HEADLINE)] == HEADLINE
    assert (report["bench"], report["tokens"], report["seconds"]) == ("metrics_flood", TOKENS, 2)
    for key in ("get_p50_ms", "get_p99_ms", "get_max_ms", "gets", "manager_cpu_s"):
        assert set(report[key]) == {"no_flood", "flood"}, key
    assert min(report["gets"].values()) >= 4, report["gets"]  # a GET every 0.25 s

    # Each junk token answered once: 401 after its one TokenReview, or 429 with none sent.
    assert set(report["answers"]) <= {"401", "429"}, report["answers"]
    assert report["answered_401"] + report["answered_429"] == TOKENS
    assert report["token_reviews_sent"] == report["answered_401"]
    assert report["subject_access_reviews_sent"] == 0
    # 50 tokens a second against 10 reviews a second (bursts of 20), 16 in flight: 429s.
    assert report["answered_429"] > 0, report["answers"]
    assert report["review_options"]["max_reviews_in_flight"] == 16
    # The controller's GETs do not wait behind the reviews (before the fix: seconds).
    assert report["get_p99_ms"]["flood"] < 1000, report["get_p99_ms"]
