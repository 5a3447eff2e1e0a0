"""What the benchmarks in ``hack/bench/`` share: where the control-plane binaries are, an
operator as a child process (:class:`Manager`: ``/readyz``, ``/metrics``, CPU and peak
RSS), reading a Prometheus text exposition, progress lines on stderr (:func:`logger`),
the time of an API timestamp (:func:`moment`) and the end every benchmark shares
(:func:`finish`: its one JSON object as the last line of stdout, whatever happened).

**CPU**, in every benchmark and the tables of docs/operator/performance.md, is
:meth:`runtime.testing.process.ChildProcess.cpu_seconds`: user + system seconds of the
operator's process and of the children it waited for, over its whole life.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import os
import pathlib
import re
import subprocess
import sys
import time
import traceback
import urllib.error
import urllib.request
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import Any

from runtime import clock
from runtime.testing import controlplane, process

__all__ = [
    "ROOT",
    "BenchError",
    "Child",
    "Manager",
    "bin_dir",
    "finish",
    "logger",
    "make_namespaces",
    "moment",
    "parse_metrics",
    "profile_top",
]  # fmt: skip

ROOT = pathlib.Path(__file__).resolve().parents[2]


def bin_dir(given: pathlib.Path | None = None) -> pathlib.Path:
    """``given``, else ``$CONTROLPLANE_BIN_DIR``, else what ``hack/controlplane/build.sh``
    builds (or finds cached) and prints."""
    if given is not None:
        return given
    if env := controlplane.default_bin_dir():
        return env
    done = subprocess.run(
        [str(ROOT / "hack/controlplane/build.sh")], capture_output=True, text=True, check=True
    )
    return pathlib.Path(done.stdout.strip().splitlines()[-1])


class BenchError(RuntimeError):
    """A benchmark could not finish; the message says why."""


def logger(name: str = "", *, clock_time: bool = False) -> Callable[[str], None]:
    """A benchmark's ``log(message)``: one line on stderr, flushed, as ``[name] message``
    (``[name HH:MM:SS] message`` with ``clock_time``; the message alone without a name).

    >>> import contextlib, io
    >>> with contextlib.redirect_stderr(io.StringIO()) as err:
    ...     logger("bench x")("started")
    ...     logger()("plain")
    >>> err.getvalue()
    '[bench x] started\\nplain\\n'
    """

    def log(message: str) -> None:
        stamp = f" {time.strftime('%H:%M:%S')}" if clock_time else ""
        prefix = f"[{name}{stamp}] " if name else ""
        print(f"{prefix}{message}", file=sys.stderr, flush=True)

    return log


def finish(
    run: Coroutine[Any, Any, None],
    result: dict[str, Any],
    *,
    headline: Sequence[str] = (),
    expected: tuple[type[BaseException], ...] = (),
    log: Callable[[str], None] = print,
) -> int:
    """Run a benchmark's coroutine, which fills ``result``; print ``result`` as one JSON
    object, the last line of stdout, its ``headline`` keys first; 0, or 1 after an error.

    An ``expected`` error (a :class:`BenchError`, a control plane that does not start) is
    logged as one line, anything else with its traceback; either way ``result["error"]``
    is its first line, so a caller reading the last line sees what went wrong.

    >>> async def fails() -> None:
    ...     raise BenchError("no manager")
    >>> finish(fails(), {"bench": "x"}, headline=["bench"], expected=(BenchError,),
    ...        log=lambda _: None)
    {"bench": "x", "error": "no manager"}
    1
    """
    status = 0
    try:
        asyncio.run(run)
    except expected as exc:
        log(f"error: {exc}")
        result["error"] = str(exc).splitlines()[0]
        status = 1
    except Exception as exc:  # anything else: still one JSON line last, the traceback above
        traceback.print_exc()
        result["error"] = f"{type(exc).__name__}: {exc}".splitlines()[0]
        status = 1
    first = {key: result.pop(key) for key in headline if key in result}
    print(json.dumps({**first, **result}))
    return status


def moment(text: object) -> datetime.datetime:
    """The time an RFC 3339 timestamp of the API names (:func:`runtime.clock.parse_rfc3339`),
    ValueError when it is absent or garbled.

    >>> moment("2026-12-02T13:40:00Z").isoformat()
    '2026-12-02T13:40:00+00:00'
    """
    parsed = clock.parse_rfc3339(str(text) if text else None)
    if parsed is None:
        raise ValueError(f"not an RFC 3339 time: {text!r}")
    return parsed


_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_metrics(text: str) -> list[tuple[str, dict[str, str], float]]:
    """Samples of a Prometheus text exposition: ``(name, labels, value)``.

    >>> parse_metrics('# HELP x y\\nrest_client_requests_total{code="201",method="POST"} 3.0')
    [('rest_client_requests_total', {'code': '201', 'method': 'POST'}, 3.0)]
    """
    samples = []
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if match is None or line.startswith("#"):
            continue
        name, labels, value = match.groups()
        samples.append((name, dict(_LABEL.findall(labels or "")), float(value)))
    return samples


class Child(process.ChildProcess):
    """A child process whose exit is a :class:`BenchError`."""

    def check_alive(self) -> None:
        try:
            super().check_alive()
        except process.ChildExited as exc:
            raise BenchError(str(exc)) from None


_PROFILED = (
    "import cProfile, sys, controllers.main as m; out = sys.argv.pop(1); "
    "p = cProfile.Profile(); code = p.runcall(m.main); p.dump_stats(out); sys.exit(code)"
)
"""``python -c`` running ``rayservice-manager`` under cProfile (the output path first)."""


class Manager(Child):
    """An operator as a child process serving ``/readyz`` on ``probe_port`` and
    ``/metrics`` on ``metrics_port``; :meth:`ours` starts ``rayservice-manager``."""

    def __init__(
        self,
        command: Sequence[str],
        *,
        log_path: pathlib.Path,
        metrics_port: int,
        probe_port: int,
        name: str = "the manager",
        cwd: pathlib.Path | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.metrics_port, self.probe_port = metrics_port, probe_port
        super().__init__(command, log_path=log_path, name=name, cwd=cwd or ROOT, env=env)

    @classmethod
    def ours(
        cls,
        kubeconfig: pathlib.Path,
        workdir: pathlib.Path,
        args: list[str],
        profile: pathlib.Path | None = None,
    ) -> Manager:
        """``rayservice-manager`` against ``kubeconfig`` with ``args``, running the code of
        the checkout this file is in (:data:`ROOT` first on its ``PYTHONPATH``: an editable
        install elsewhere, e.g. of another git worktree, does not take over); under
        ``python -m cProfile -o profile`` when ``profile`` is given (written when it stops)."""
        metrics_port, probe_port = controlplane.free_ports(2)
        script = pathlib.Path(sys.executable).with_name("rayservice-manager")
        command = [str(script)] if script.exists() else [sys.executable, "-m", "controllers.main"]
        if profile is not None:  # not ``-m cProfile -m``: pydantic needs the real module
            command = [sys.executable, "-c", _PROFILED, str(profile)]
        command += [
            "--kubeconfig", str(kubeconfig),
            "--metrics-bind-address", f"127.0.0.1:{metrics_port}",
            "--health-probe-bind-address", f"127.0.0.1:{probe_port}",
            *args,
        ]  # fmt: skip
        path = [str(ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
        return cls(
            command,
            log_path=workdir / "manager.log",
            metrics_port=metrics_port,
            probe_port=probe_port,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(path)},
        )

    def _get(self, port: int, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
                return int(answer.status), answer.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode(errors="replace")

    async def wait_ready(self, within: float) -> float:
        """Seconds until ``/readyz`` answers 200; :class:`BenchError` after ``within``."""
        started = time.monotonic()
        last = ""
        while time.monotonic() - started < within:
            self.check_alive()
            with contextlib.suppress(OSError):
                status, last = await asyncio.to_thread(self._get, self.probe_port, "/readyz")
                if status == 200:
                    return time.monotonic() - started
            await asyncio.sleep(0.2)
        raise BenchError(
            f"{self.name}'s /readyz not ok within {within} s ({last!r}):\n{self.tail()}"
        )

    def metrics(self) -> list[tuple[str, dict[str, str], float]]:
        """Its ``/metrics``, parsed (:func:`parse_metrics`)."""
        self.check_alive()
        status, text = self._get(self.metrics_port, "/metrics")
        if status != 200:
            raise BenchError(f"{self.name}'s /metrics answered {status}")
        return parse_metrics(text)


def profile_top(path: pathlib.Path, limit: int = 25, sort: str = "tottime") -> list[str]:
    """The ``limit`` functions first by ``sort`` in a cProfile output, as text lines."""
    import io
    import pstats

    out = io.StringIO()
    pstats.Stats(str(path), stream=out).sort_stats(sort).print_stats(limit)
    lines = out.getvalue().splitlines()
    start = next((i for i, line in enumerate(lines) if line.lstrip().startswith("ncalls")), 0)
    return [line.strip() for line in lines[start:] if line.strip()]


async def make_namespaces(cp: controlplane.ControlPlane, namespaces: Sequence[str]) -> None:
    """Create ``namespaces`` and wait (60 s at most) until kube-controller-manager has made
    each one's default ServiceAccount, which pods need."""
    for namespace in namespaces:
        body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
        cp.request("POST", "/api/v1/namespaces", body)
    deadline = time.monotonic() + 60
    for namespace in namespaces:  # kube-controller-manager makes the default accounts
        while True:
            try:
                cp.request("GET", f"/api/v1/namespaces/{namespace}/serviceaccounts/default")
                break
            except controlplane.ApiError as exc:
                if exc.status != 404 or time.monotonic() > deadline:
                    raise BenchError(f"no default ServiceAccount in {namespace}") from exc
                await asyncio.sleep(0.1)
