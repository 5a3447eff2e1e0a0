"""hack/bench/results.py (``make bench-compare``): the results file has exactly the
issue's shape, a failed benchmark is reported rather than papered over, and the table of
docs/operator/performance.md is replaced between its markers only."""

from __future__ import annotations

import json
import pathlib
from typing import Any

import pytest

from tests.unit import helpers

results = helpers.load_script("hack/bench/results.py")


def figures(keys: tuple[str, ...], value: float) -> dict[str, Any]:
    return {k: value for k in keys} | {"extra_detail": 99}


def fake_runs(
    monkeypatch: pytest.MonkeyPatch, fail: frozenset[str] = frozenset()
) -> list[list[str]]:
    calls: list[list[str]] = []

    def run_bench(script: str, args: list[str]) -> dict[str, Any]:
        calls.append([script, *args])
        if script in fail:
            return {"bench": script, "error": "it broke"}
        if script == "compare.py":
            n = float(args[args.index("--services") + 1])
            return {"ours": figures(results.SCENARIO_FIGURES, n),
                    "kuberay": figures(results.SCENARIO_FIGURES, 2 * n), "ratios": {}}  # fmt: skip
        if script == "realray.py":
            return {"ours": figures(results.REALRAY_FIGURES, 1.0),
                    "kuberay": figures(results.REALRAY_FIGURES, 2.0), "ratios": {}}  # fmt: skip
        return {"ours": figures(results.FRAMEWORK_FIGURES, 1.0),
                "kopf": figures(results.FRAMEWORK_FIGURES, 3.0)}  # fmt: skip

    monkeypatch.setattr(results, "run_bench", run_bench)
    return calls


def test_the_results_file_has_exactly_the_issues_shape(
    monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path
) -> None:
    calls = fake_runs(monkeypatch)
    out = tmp_path / "r.json"
    code = results.main(["--services", "1,50", "--steady-seconds", "60", "--objects", "20",
                         "--out", str(out)])  # fmt: skip
    assert code == 0
    written = json.loads(out.read_text())
    assert set(written) == {"scenarios", "realray", "frameworks", "run"}
    assert set(written["scenarios"]) == {"n1", "n50"}
    for pair in written["scenarios"].values():
        assert set(pair) == {"ours", "kuberay"}
        assert all(tuple(f) == results.SCENARIO_FIGURES for f in pair.values())
    assert written["scenarios"]["n50"]["kuberay"]["cpu_s"] == 100.0
    assert set(written["frameworks"]) == {"ours", "kopf"}
    assert tuple(written["frameworks"]["kopf"]) == results.FRAMEWORK_FIGURES
    assert calls[0] == ["compare.py", "--services", "1", "--steady-seconds", "60.0",
                        "--rounds", "1", "--kuberay-version", "v1.7.0"]  # fmt: skip
    assert calls[-2] == ["realray.py", "--rounds", "1", "--steady-seconds", "60.0"]
    assert tuple(written["realray"]["kuberay"]) == results.REALRAY_FIGURES
    assert "| real Ray, one RayService | ours | KubeRay |" in results.table(written)
    assert calls[-1] == ["frameworks.py", "--objects", "20"]


def test_a_failed_benchmark_is_left_out_named_and_fails_the_run(
    monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path
) -> None:
    fake_runs(monkeypatch, fail=frozenset({"frameworks.py"}))
    out = tmp_path / "r.json"
    assert results.main(["--services", "1", "--out", str(out)]) == 1
    written = json.loads(out.read_text())
    assert written["frameworks"] == {}
    assert written["run"]["failed"] == ["frameworks: it broke"]
    assert set(written["scenarios"]) == {"n1"}


def test_a_missing_figure_is_an_error_not_a_gap() -> None:
    with pytest.raises(KeyError, match="cpu_s"):
        results.pick({"converge_s": 1}, results.FRAMEWORK_FIGURES)


def test_the_docs_table_replaces_only_the_marked_section(tmp_path: pathlib.Path) -> None:
    readme = tmp_path / "performance.md"
    readme.write_text(f"before\n{results.BEGIN}\nold\n{results.END}\nafter\n")
    f = figures(results.SCENARIO_FIGURES, 1.5)
    frameworks = {"ours": figures(results.FRAMEWORK_FIGURES, 2.0),
                  "kopf": figures(results.FRAMEWORK_FIGURES, 4.0)}  # fmt: skip
    text = results.table({"scenarios": {"n1": {"ours": f, "kuberay": f}}, "frameworks": frameworks})
    results.put_in_page(readme, text)
    content = readme.read_text()
    assert content.startswith("before\n")
    assert content.endswith(f"{results.END}\nafter\n")
    assert "old" not in content
    assert "| 409 conflicts / service | 1.5 | 1.5 |" in content
    assert "| API requests | 2 | 4 |" in content
    unmarked = tmp_path / "other.md"
    unmarked.write_text("no markers here\n")
    with pytest.raises(ValueError, match="bench-compare"):
        results.put_in_page(unmarked, text)
    assert unmarked.read_text() == "no markers here\n"


def test_the_performance_page_has_the_markers() -> None:
    content = results.PAGE.read_text()
    assert content.index(results.BEGIN) < content.index(results.END)


def test_large_n_runs_head_only_against_the_peer_asked_for(
    monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path
) -> None:
    calls = fake_runs(monkeypatch)
    code = results.main(["--services", "1,1000", "--objects", "0", "--realray-rounds", "0",
                         "--kuberay-version", "v1.5.0",
                         "--out", str(tmp_path / "r.json")])  # fmt: skip
    assert code == 0
    assert [c[c.index("--kuberay-version") + 1] for c in calls] == ["v1.5.0", "v1.5.0"]
    assert ["--head-only" in c for c in calls] == [False, True]
    written = json.loads((tmp_path / "r.json").read_text())
    assert written["run"]["kuberay_version"] == "v1.5.0"
    assert "KubeRay v1.5.0, N=1000" in results.table(written).splitlines()[0]
