"""Repeat a failed test run's failures at the very end of ``make test``'s output.

``python hack/test_failures.py build/junit.xml`` reads pytest's JUnit XML and prints
one line per failed or erroring test (its node id and the first line of the reason),
then exits 0. CI keeps only the tail of a run's output, which is the coverage table;
without this, a red run says that it failed but not what failed.
"""

import pathlib
import sys
import xml.etree.ElementTree as ElementTree


def failures(report: pathlib.Path) -> list[str]:
    """``"<file>::<test>: <reason>"`` for every failed or erroring test case."""
    lines = []
    for case in ElementTree.parse(report).getroot().iter("testcase"):
        for outcome in ("failure", "error"):
            found = case.find(outcome)
            if found is None:
                continue
            reason = (found.get("message") or found.text or "").strip().splitlines()
            where = case.get("file") or case.get("classname", "").replace(".", "/") + ".py"
            first = reason[0][:200] if reason else ""
            lines.append(f"{outcome.upper()} {where}::{case.get('name')}: {first}")
    return lines


def main(argv: list[str]) -> int:
    report = pathlib.Path(argv[1])
    if not report.exists():
        print(f"test_failures: no report at {report} (pytest did not get far enough)")
        return 0
    found = failures(report)
    print(f"{len(found)} failed test(s):" if found else "no failed tests in the report")
    for line in found:
        print(f"  {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
