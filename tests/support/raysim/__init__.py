"""A Ray data-plane simulator: something answers at every head pod's IP the way a Ray head would.

On our machines kwok pods run no containers. The simulator stands in for their Ray
heads: for tests, benchmarks with hundreds of heads, and ``make run``. It has two
processes:

- :mod:`tests.support.raysim.host` (``python -m tests.support.raysim``) runs on the host: it
  refuses to start unless the pod CIDR routes into the pod-network namespace, watches head pods
  through the API server, tells the inside part which pod IPs are live heads, and serves
  fault switches on ``127.0.0.1``;
- :mod:`tests.support.raysim.inside` runs inside the pod-network namespace and answers on
  ``:8265``, ``:8000`` and ``:52365`` of every live head IP (dispatching on the local
  address; other IPs get their connections reset) with
- :mod:`tests.support.raysim.serve`, Ray Serve's REST subset and lifecycle, pure, and
- :mod:`tests.support.raysim.jobs`, the Ray Jobs API and its jobs' lifecycle, pure.

A simulated job's timing and outcome: ``Simulator(job_pending_s=, job_run_s=,
job_outcome=)`` are every job's defaults (1 s ``PENDING``, 3 s ``RUNNING``, then
``succeed``; ``fail`` ends ``FAILED``, ``forever`` runs until stopped); a job overrides
them with ``raysim.<key>=<value>`` words in its entrypoint (``python x.py
raysim.outcome=fail raysim.run_s=2 'raysim.message=out of memory'``) or, winning over
those, ``raysim.<key>`` metadata keys (a RayJob's ``spec.metadata``): ``outcome``,
``pending_s``, ``run_s``, ``message``. :meth:`Simulator.job_requests` counts the Jobs API
requests per job.

:class:`Simulator` (``with raysim.running(control_plane) as sim:``) starts the host part
(which starts the inside part) and stops both, by their own process group only. Its
:meth:`Simulator.fault` flips the fault switches. Import it as ``from tests.support import
raysim`` (the repository root is on ``sys.path``; ``tests`` is a namespace package).
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

__all__ = ["Simulator", "SimulatorError", "running"]

ROOT = pathlib.Path(__file__).resolve().parents[3]


class SimulatorError(RuntimeError):
    """The simulator did not start (its log's tail is in the message)."""


class Simulator:
    """The host part as a child process (its own process group), and its admin API."""

    def __init__(
        self,
        kubeconfig: str | os.PathLike[str],
        netns: str,
        *,
        host_veth: str | None = None,
        pod_cidr: str | None = None,
        deploy_delay: float = 3.0,
        delete_delay: float = 0.0,
        unimportable: tuple[str, ...] = (),
        job_pending_s: float = 1.0,
        job_run_s: float = 3.0,
        job_outcome: str = "succeed",
        log_path: pathlib.Path | None = None,
        start_timeout: float = 60.0,
    ) -> None:
        self.args = [
            sys.executable, "-m", "tests.support.raysim", "--kubeconfig", str(kubeconfig),
            "--netns", netns, "--deploy-delay", str(deploy_delay),
            "--delete-delay", str(delete_delay), "--unimportable", ",".join(unimportable),
            "--job-pending-s", str(job_pending_s), "--job-run-s", str(job_run_s),
            "--job-outcome", job_outcome,
        ]  # fmt: skip
        if host_veth:
            self.args += ["--host-veth", host_veth]
        if pod_cidr:
            self.args += ["--pod-cidr", pod_cidr]
        self.log_path = log_path or pathlib.Path(
            tempfile.mkstemp(prefix="raysim-", suffix=".log")[1]
        )
        self.start_timeout = start_timeout
        self.proc: subprocess.Popen[bytes] | None = None
        self.info: dict[str, Any] = {}

    def start(self) -> Simulator:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                self.args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log,
                cwd=str(ROOT), env=env, start_new_session=True,
            )  # fmt: skip
        line: list[bytes] = []
        assert self.proc.stdout is not None
        reader = threading.Thread(target=lambda: line.append(self.proc.stdout.readline()))  # type: ignore[union-attr]
        reader.start()
        reader.join(self.start_timeout)
        if not line or not line[0]:
            self.stop()
            tail = "\n".join(self.log_path.read_text(errors="replace").splitlines()[-20:])
            raise SimulatorError(f"the Ray simulator did not start:\n{tail}")
        self.info = json.loads(line[0])
        return self

    @property
    def admin(self) -> str:
        return str(self.info["admin"])

    def pids(self) -> list[int]:
        """The host part's and the inside part's process ids."""
        return [int(self.info["pid"]), int(self.info["inside_pid"])]

    def _call(self, method: str, path: str, body: Any = None) -> dict[str, Any]:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.admin + path, data=data, method=method)
        request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                result: dict[str, Any] = json.loads(response.read())
        except urllib.error.HTTPError as exc:
            result = json.loads(exc.read())
        return result

    def state(self) -> dict[str, Any]:
        """``{"ips": [...live heads inside...], "host_rss_kib": ..., "inside_rss_kib": ...}``."""
        return self._call("GET", "/state")

    def requests(self) -> dict[tuple[str, str, str, str], int]:
        """Requests the heads got since the simulator started, by (pod IP, port name,
        method, path): port names ``dashboard``, ``serve``, ``agent``; a connection reset
        before any request (no live head there, dashboard down, no Serve yet) has method
        and path ``""``. Counted inside, so requests through the API server's pod and
        service proxies are here too (:func:`tests.integration.rayservice_harness.serve_puts`
        and ``hack/bench/rayservice.py`` count with it)."""
        return {
            (str(ip), str(port), str(method), str(path)): int(count)
            for ip, port, method, path, count in self.state().get("requests", [])
        }

    def job_requests(self) -> dict[tuple[str, str, str, str], int]:
        """Jobs API requests the heads got since the simulator started, by (pod IP,
        submission id, method, route): the route with ``{id}`` for the id
        (``/api/jobs/{id}/stop``); a submission is counted under the id it submitted (the
        one Ray made when it had none), a list (``GET /api/jobs/``) under ``""``. The
        requests about one job: ``sum(n for (_, job, _, _), n in ... if job == id)``."""
        return {
            (str(ip), str(job), str(method), str(route)): int(count)
            for ip, job, method, route, count in self.state().get("job_requests", [])
        }

    def fault(self, ip: str, **switches: Any) -> dict[str, Any]:
        """Flip fault switches of the head at ``ip``: ``dashboard_down=True``,
        ``slow_s=0.5``, ``unhealthy="<app>"``, ``healthy="<app>"`` (undoes ``unhealthy``),
        ``restart=True`` (the head forgets its applications and jobs)."""
        return self._call("POST", "/fault", {"ip": ip, **switches})

    def wait_for_ips(self, ips: set[str], *, present: bool = True, within: float = 60.0) -> None:
        """Wait until every IP of ``ips`` is (or, ``present=False``, none is) a live head inside."""
        deadline = time.monotonic() + within
        while True:
            live = set(self.state().get("ips", []))
            if (ips <= live) if present else not (ips & live):
                return
            if time.monotonic() > deadline:
                raise SimulatorError(f"heads {sorted(ips)} present={present}: live {sorted(live)}")
            time.sleep(0.1)

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        for sig, wait in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, sig)
            try:
                proc.wait(wait)
                break
            except subprocess.TimeoutExpired:
                continue
        inside = self.info.get("inside_pid")
        if inside and _is_inside_part(int(inside)):
            # The host part stops it; this catches a host part that was killed first.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(int(inside), signal.SIGKILL)
        if proc.stdout is not None:
            proc.stdout.close()

    def __enter__(self) -> Simulator:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _is_inside_part(pid: int) -> bool:
    """Whether ``pid`` is still our inside part (not a process that reused its id)."""
    try:
        cmdline = pathlib.Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return b"tests.support.raysim.inside" in cmdline


@contextlib.contextmanager
def running(control_plane: Any, **options: Any) -> Iterator[Simulator]:
    """Start a simulator for a :class:`runtime.testing.controlplane.ControlPlane` with a
    pod network; stop it on exit. ``options`` are :class:`Simulator`'s keywords."""
    network = control_plane.pod_network
    if network is None:
        raise SimulatorError("the control plane has no pod network (Options(pod_network=True))")
    simulator = Simulator(
        control_plane.kubeconfig, network.namespace, host_veth=network.host_veth,
        pod_cidr=network.cidr, **options,
    )  # fmt: skip
    with simulator:
        yield simulator
