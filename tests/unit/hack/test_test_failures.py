"""hack/test_failures.py: a red ``make test`` names its failed tests at the end of its output."""

from __future__ import annotations

import pathlib
import subprocess
import sys

from tests.unit import helpers

script = helpers.load_script("hack/test_failures.py")

REPORT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" errors="1" failures="1" skipped="0" tests="3">
<testcase classname="tests.e2e.test_rayservice" name="test_ok" time="1.0"/>
<testcase classname="tests.e2e.test_rayservice" name="test_upgrade[pod-ip]" time="2.0">
<failure message="AssertionError: 3 failed requests&#10;assert 3 == 0">trace</failure></testcase>
<testcase classname="tests.integration.test_manager" name="test_lease" time="0.1">
<error message="failed on setup with &quot;TimeoutError&quot;">trace</error></testcase>
</testsuite></testsuites>
"""


def test_failures_and_errors_are_named_with_the_first_line_of_their_reason(
    tmp_path: pathlib.Path,
) -> None:
    report = tmp_path / "junit.xml"
    report.write_text(REPORT)
    assert script.failures(report) == [
        "FAILURE tests/e2e/test_rayservice.py::test_upgrade[pod-ip]: "
        "AssertionError: 3 failed requests",
        'ERROR tests/integration/test_manager.py::test_lease: failed on setup with "TimeoutError"',
    ]


def test_the_script_prints_them_and_never_changes_the_runs_status(tmp_path: pathlib.Path) -> None:
    report = tmp_path / "junit.xml"
    report.write_text(REPORT)
    run = subprocess.run(
        [sys.executable, str(helpers.ROOT / "hack/test_failures.py"), str(report)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 0
    assert run.stdout.splitlines()[0] == "2 failed test(s):"
    missing = subprocess.run(
        [sys.executable, str(helpers.ROOT / "hack/test_failures.py"), str(tmp_path / "none.xml")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert missing.returncode == 0
    assert "no report" in missing.stdout
