#!/usr/bin/env python3
"""``make bench-compare``: both side-by-side comparisons in one run, written down.

Runs, one after the other (never two at once; each on fresh control planes):

1. ``hack/bench/compare.py --services N`` for each ``N`` of ``--services`` (default
   ``1,200,1000``; from ``--head-only-from`` on, default 1,000, head-only RayServices):
   our operator and KubeRay ``--kuberay-version`` (default v1.7.0, built once from the
   checkout ``$KUBERAY_SOURCE`` names; v1.5.0 from its Go module) on the same
   RayService workload;
2. ``hack/bench/realray.py --rounds R`` (``--realray-rounds``, default 1; 0 skips): one
   RayService on a real Ray 2.60 head, both operators (Ray from ``make ray``);
3. ``hack/bench/frameworks.py --objects M`` (default 2000): the same small controller on
   our framework and on Kopf (installed by ``hack/peers/kopf.sh``, cached).

It keeps each benchmark's last JSON line and writes ``--out`` (default
``hack/bench/results/<UTC date>.json``)::

    {"scenarios": {"n1": {"ours": F, "kuberay": F}, "n200": ..., "n1000": ...},
     "realray": {"ours": R, "kuberay": R}, "frameworks": {"ours": G, "kopf": G},
     "run": {"command": ..., "steady_seconds": ..., "rounds": ..., "kuberay_version": ...,
             "head_only_from": ..., "started": ...}}

where ``F`` holds exactly :data:`SCENARIO_FIGURES` (medians over ``--rounds``) and ``G``
exactly :data:`FRAMEWORK_FIGURES`, ``R`` exactly :data:`REALRAY_FIGURES`. It prints the
Markdown table (:func:`table`) and, with ``--docs``, puts it into the docs' performance
page (:data:`PAGE`) between the ``bench-compare`` markers. A benchmark that fails leaves its
entry out and the run exits 1 (after writing what it has).

Progress goes to stderr; the last stdout line is the results as one JSON object.
"""

from __future__ import annotations

import argparse
import datetime
import json
import pathlib
import shlex
import subprocess
import sys
from collections.abc import Mapping, Sequence
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCENARIO_FIGURES = (
    "init_status_writes_per_svc",
    "steady_status_writes_per_svc",
    "upgrade_status_writes_per_svc",
    "steady_nonwatch_requests_per_min",
    "dashboard_requests_per_min_per_svc",
    "conflicts_per_svc",
    "time_to_ready_s",
    "time_to_upgraded_s",
    "writes_per_svc",
    "time_to_deleted_s",
    "peak_rss_mib",
    "cpu_s",
)
FRAMEWORK_FIGURES = ("converge_s", "cpu_s", "peak_rss_mib", "api_requests")
REALRAY_FIGURES = (
    "time_to_ready_s", "ready_after_head_s", "time_to_upgraded_s", "switched_after_head_s",
    "status_writes", "conflicts", "steady_proxy_requests_per_min", "writes_all",
    "peak_rss_mib", "cpu_s",
)  # fmt: skip
"""``hack/bench/realray.py``'s figures in the table (one real Ray head, one RayService)."""
BEGIN, END = "<!-- bench-compare:begin -->", "<!-- bench-compare:end -->"
PAGE = ROOT / "docs" / "operator" / "performance.md"
"""The page whose table ``--docs`` rewrites: the one place these figures live."""
LABELS = {
    "init_status_writes_per_svc": "status writes / service, start-up",
    "steady_status_writes_per_svc": "status writes / service, steady",
    "upgrade_status_writes_per_svc": "status writes / service, upgrade",
    "steady_nonwatch_requests_per_min": "API requests / min, steady (non-watch, no proxy)",
    "dashboard_requests_per_min_per_svc": "data-plane requests / min / service, steady",
    "conflicts_per_svc": "409 conflicts / service",
    "time_to_ready_s": "time to all Ready (s)",
    "time_to_upgraded_s": "time to all upgraded (s)",
    "writes_per_svc": "operator writes / service, create -> Ready -> upgrade -> delete",
    "time_to_deleted_s": "time to all deleted (s)",
    "peak_rss_mib": "peak RSS (MiB)",
    "cpu_s": "CPU (s), operator process + its children",
    "converge_s": "converge after the last update (s)",
    "ready_after_head_s": "head Ready -> RayService Ready (s)",
    "switched_after_head_s": "upgrade: new head Ready -> traffic switched (s)",
    "status_writes": "status writes, whole run",
    "conflicts": "409 conflicts, whole run",
    "steady_proxy_requests_per_min": "dashboard requests through the proxy / min, steady",
    "writes_all": "operator writes, create -> Ready -> upgrade -> delete",
    "api_requests": "API requests",
}

__all__ = ["FRAMEWORK_FIGURES", "REALRAY_FIGURES", "SCENARIO_FIGURES", "collect", "main", "table"]


def log(message: str) -> None:
    print(f"[bench-compare] {message}", file=sys.stderr, flush=True)


def last_json(stdout: str) -> dict[str, Any]:
    """The last line of a benchmark's stdout, parsed (each prints one JSON object last).

    >>> last_json('progress\\n{"bench": "x", "ours": {}}\\n')
    {'bench': 'x', 'ours': {}}
    """
    lines = [line for line in stdout.splitlines() if line.strip()]
    if not lines:
        raise ValueError("no output")
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def pick(figures: Mapping[str, Any], keys: Sequence[str]) -> dict[str, Any]:
    """Exactly ``keys`` from ``figures`` (a missing one is an error, not a silent gap).

    >>> pick({"a": 1, "b": 2, "c": 3}, ("a", "b"))
    {'a': 1, 'b': 2}
    """
    missing = [k for k in keys if k not in figures]
    if missing:
        raise KeyError(f"missing figures: {missing}")
    return {k: figures[k] for k in keys}


def collect(
    summary: Mapping[str, Any], peers: Sequence[str], keys: Sequence[str]
) -> dict[str, Any]:
    """``{peer: exactly keys}`` from a benchmark's summary line; raises on an ``error``."""
    if "error" in summary:
        raise RuntimeError(str(summary["error"]))
    return {peer: pick(summary[peer], keys) for peer in peers}


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 100 else f"{value:.0f}"
    return str(value)


def table(results: Mapping[str, Any]) -> str:
    """The results as a Markdown table: one row per figure, a column pair per scenario.

    >>> f = {k: 1.0 for k in SCENARIO_FIGURES}
    >>> results = {"scenarios": {"n1": {"ours": f, "kuberay": f}}, "frameworks": {}}
    >>> print(table(results).splitlines()[0])
    | RayService figure | ours, N=1 | KubeRay, N=1 |
    """
    scenarios: Mapping[str, Any] = results.get("scenarios") or {}
    lines = []
    if scenarios:
        head = ["RayService figure"]
        peer = "KubeRay " + str((results.get("run") or {}).get("kuberay_version") or "")
        for name in scenarios:
            head += [f"ours, N={name[1:]}", f"{peer.strip()}, N={name[1:]}"]
        lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for key in SCENARIO_FIGURES:
            row = [LABELS[key]]
            for pair in scenarios.values():
                row += [_cell(pair["ours"][key]), _cell(pair["kuberay"][key])]
            lines.append("| " + " | ".join(row) + " |")
    realray: Mapping[str, Any] = results.get("realray") or {}
    if realray:
        if lines:
            lines.append("")
        lines += ["| real Ray, one RayService | ours | KubeRay |", "|---|---|---|"]
        for key in REALRAY_FIGURES:
            lines.append(
                f"| {LABELS[key]} | {_cell(realray['ours'][key])} | "
                f"{_cell(realray['kuberay'][key])} |"
            )
    frameworks: Mapping[str, Any] = results.get("frameworks") or {}
    if frameworks:
        if lines:
            lines.append("")
        lines += ["| framework figure | ours | Kopf |", "|---|---|---|"]
        for key in FRAMEWORK_FIGURES:
            lines.append(
                f"| {LABELS[key]} | {_cell(frameworks['ours'][key])} | "
                f"{_cell(frameworks['kopf'][key])} |"
            )
    return "\n".join(lines)


def put_in_page(page: pathlib.Path, text: str) -> None:
    """Replace what is between the markers in ``page`` with ``text``."""
    content = page.read_text()
    start, end = content.find(BEGIN), content.find(END)
    if start < 0 or end < start:
        raise ValueError(f"{page} has no {BEGIN} ... {END} section")
    page.write_text(content[: start + len(BEGIN)] + "\n" + text + "\n" + content[end:])


def run_bench(script: str, args: Sequence[str]) -> dict[str, Any]:
    command = [sys.executable, str(ROOT / "hack" / "bench" / script), *args]
    log("running " + shlex.join(command[1:]))
    done = subprocess.run(command, cwd=ROOT, stdout=subprocess.PIPE, text=True, check=False)
    summary = last_json(done.stdout)
    if done.returncode != 0 and "error" not in summary:
        summary["error"] = f"{script} exited with {done.returncode}"
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--services", default="1,200,1000", help="comma-separated N (1,200,1000)")
    parser.add_argument(
        "--head-only-from",
        type=int,
        default=1000,
        help="from this N on, head-only RayServices (the pod network's 15 nodes; default 1000)",
    )
    parser.add_argument(
        "--kuberay-version",
        default="v1.7.0",
        help="the KubeRay peer (v1.7.0 needs $KUBERAY_SOURCE, a KubeRay checkout, to build)",
    )
    parser.add_argument("--steady-seconds", type=float, default=900.0)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--objects", type=int, default=2000, help="frameworks.py; 0: skip")
    parser.add_argument(
        "--realray-rounds", type=int, default=1, help="realray.py (real Ray 2.60); 0: skip"
    )
    parser.add_argument("--out", type=pathlib.Path, default=None)
    parser.add_argument(
        "--docs", action="store_true", help=f"put the table into {PAGE.relative_to(ROOT)}"
    )
    args = parser.parse_args(argv)
    sizes = [int(n) for n in args.services.split(",") if n.strip()]
    started = datetime.datetime.now(datetime.UTC)
    out = args.out or ROOT / "hack" / "bench" / "results" / f"{started:%Y-%m-%d}.json"
    results: dict[str, Any] = {"scenarios": {}, "realray": {}, "frameworks": {}, "run": {
        "command": shlex.join(["python", "hack/bench/results.py", *sys.argv[1:]]),
        "steady_seconds": args.steady_seconds, "rounds": args.rounds,
        "kuberay_version": args.kuberay_version, "head_only_from": args.head_only_from,
        "started": started.isoformat(timespec="seconds"),
    }}  # fmt: skip
    failed = []
    for n in sizes:
        summary = run_bench("compare.py", [
            "--services", str(n), "--steady-seconds", str(args.steady_seconds),
            "--rounds", str(args.rounds), "--kuberay-version", args.kuberay_version,
            *(["--head-only"] if n >= args.head_only_from else []),
        ])  # fmt: skip
        try:
            results["scenarios"][f"n{n}"] = collect(summary, ("ours", "kuberay"), SCENARIO_FIGURES)
        except (RuntimeError, KeyError) as exc:
            failed.append(f"n{n}: {exc}")
    if args.realray_rounds:
        summary = run_bench("realray.py", [
            "--rounds", str(args.realray_rounds), "--steady-seconds", str(args.steady_seconds),
        ])  # fmt: skip
        try:
            results["realray"] = collect(summary, ("ours", "kuberay"), REALRAY_FIGURES)
        except (RuntimeError, KeyError) as exc:
            failed.append(f"realray: {exc}")
    if args.objects:
        summary = run_bench("frameworks.py", ["--objects", str(args.objects)])
        try:
            results["frameworks"] = collect(summary, ("ours", "kopf"), FRAMEWORK_FIGURES)
        except (RuntimeError, KeyError) as exc:
            failed.append(f"frameworks: {exc}")
    if failed:
        results["run"]["failed"] = failed
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    log(f"wrote {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out}")
    text = table(results)
    print(text, file=sys.stderr)
    if args.docs:
        put_in_page(PAGE, text + f"\n\nReproduced with `{results['run']['command']}`.")
    print(json.dumps(results), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
