"""Check per-package branch-coverage floors against ``coverage json`` output.

``python hack/coverage_floor.py build/coverage/coverage.json`` sums each floor's files
(a directory prefix such as ``runtime/``, or one file) the way ``coverage report`` does
(covered statements and branches over all statements and branches), prints one line per
floor, and exits 1 if any is below its floor. The total's floor is ``fail_under`` in
pyproject.toml. Floors only go up: when a measurement is a whole point above its floor,
the line says so; raise the floor in the same change that raised the coverage.
"""

import json
import math
import pathlib
import sys

# path prefix (relative to the repository root) -> lowest acceptable percentage
# Set a point or two below what was measured (runtime/ 95.1%, main.py 97.2%): a few
# branches depend on timing (retries, races the tests provoke), and a floor must not flake.
FLOORS: dict[str, int] = {
    "runtime/": 96,  # measured 96.7% when raised (issue 24: webhooks, secure metrics, kit)
    "controllers/main.py": 98,  # measured 99.4% when raised (issue 24)
    "controllers/raycluster/": 95,  # measured 95.9% when raised (issue 38)
    "controllers/rayjob/": 93,  # measured 94.6% when set (issue 38)
    "controllers/raycronjob/": 92,  # measured 93.3% when set (issue 38)
    "controllers/rayservice/": 96,  # measured 97.7% when raised (observe -> plan -> act)
    "controllers/ray/": 97,  # measured 98.4% when raised (issue 14)
}


def percent(files: dict[str, dict[str, dict[str, int]]], prefix: str) -> float | None:
    """Branch coverage (0-100) of the files under ``prefix``; None if there are none."""
    covered = total = 0
    for name, data in files.items():
        if name == prefix or (prefix.endswith("/") and name.startswith(prefix)):
            summary = data["summary"]
            covered += summary["covered_lines"] + summary.get("covered_branches", 0)
            total += summary["num_statements"] + summary.get("num_branches", 0)
    if total == 0:
        return None
    return 100.0 * covered / total


def main(argv: list[str]) -> int:
    report = json.loads(pathlib.Path(argv[1]).read_text())
    files = {name.replace("\\", "/"): data for name, data in report["files"].items()}
    failed = False
    for prefix, floor in FLOORS.items():
        value = percent(files, prefix)
        if value is None:
            print(f"coverage floor {prefix}: no measured files", file=sys.stderr)
            failed = True
            continue
        verdict = "ok" if value >= floor else "BELOW THE FLOOR"
        hint = f"; raise the floor to {math.floor(value)}" if math.floor(value) > floor else ""
        print(f"coverage of {prefix}: {value:.1f}% (floor {floor}%): {verdict}{hint}")
        failed |= value < floor
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
