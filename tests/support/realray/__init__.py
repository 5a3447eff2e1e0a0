"""Real Ray from our own pods: run a pod object's Ray container for real, at the pod's IP.

On our machines kwok pods run no containers. This harness runs **selected pods for real**,
the way a kubelet with a CNI plugin would, so a wrong ``ray start`` line, a wrong env var or
a wrong dashboard call fails a test here instead of a user's cluster. Import it as ``from
hack import realray``; Ray comes from a virtualenv of its own (``hack/realray/install.sh``,
``make ray``), never from the project's ``.venv``.

**What** :meth:`Harness.run` **does for a pod** (one that kwok bound and gave an IP from the
pod network of a :class:`runtime.testing.controlplane.ControlPlane`):

1. *Network* (DESIGN.md section 6, "The pod network"): a network namespace of
   the pod's own, ``rsr-<8 hex>``, joined by a veth pair to the harness's shared pod
   namespace. The pod side holds the pod IP as a /32 and routes only the pod CIDR and the
   host's veth address, via the gateway :data:`GATEWAY` (``169.254.1.1``, a link-local
   address on the shared side, as Calico does) ``onlink``: **no default route**. The
   shared side gets ``ip route add <pod IP>/32 dev <veth> table local`` (the shared
   namespace answers the whole CIDR with a ``local`` route in the ``local`` table, which
   is consulted before ``main``; the longer prefix wins there), ``ip_forward=1``, and
   ``proxy_arp=1`` on the pod network's own veth end: the host's route for the CIDR is
   on-link, so the host ARPs for each pod IP, and the shared namespace answers ARP only
   for its local addresses unless it proxies (measured: without it the host's SYN never
   leaves, as the carved-out IP is no longer local there). So
   the host reaches this pod's own listeners at its IP, every other pod IP still reaches
   the shared namespace (the simulator), pods reach each other, and nothing reaches out.
   Before returning, the harness checks with ``ip route get`` that the pod IP goes into
   the pod network's veth on the host and into the pod's veth in the shared namespace,
   and that ``1.1.1.1`` is unreachable from the pod: fail closed.
2. *Names*: ``/etc/netns/<netns>/hosts`` (bind-mounted over ``/etc/hosts`` by ``ip netns
   exec``; the machine's own resolver and hosts file are never touched) is the kubelet's
   hosts file (``<pod IP> <hostname>``) plus, standing in for cluster DNS, the head
   service's names (``<cluster>-head-svc``, ``...<ns>``, ``...<ns>.svc``,
   ``...<ns>.svc.<domain>``) -> the head pod's IP, so a worker's ``--address`` and its
   ``wait-gcs-ready`` init container resolve. Every process runs in a UTS namespace of
   its own whose hostname is the pod's (``unshare --uts``), as in a pod. This matters:
   KubeRay's ``ray start`` has no ``--node-ip-address``; Ray finds its IP by routing
   towards ``8.8.8.8``, which fails without a default route, and then falls back to
   resolving its hostname, which the hosts file maps to the pod IP (measured, Ray 2.60).
3. *Process*: each init container to completion (bounded by ``Options.init_timeout``),
   then the **first** container: its own ``command`` + ``args`` and its own environment
   (``env``/``envFrom`` with the downward API and ``$(VAR)`` expansion resolved as the
   kubelet does: :mod:`tests.support.realray.podspec`), run by ``ip netns exec`` in its own
   process group, with these additions, and nothing in the pod spec changed:

   - ``PATH`` starts with the Ray venv's ``bin`` (where the image would have ``ray``);
   - ``RAY_TMPDIR`` and ``TMPDIR`` name a private directory per pod: Ray's default
     ``/tmp/ray`` is machine-wide here (a container has a private ``/tmp``), and two heads
     sharing it would share ``session_latest``, the address file and socket paths. The
     env var is used rather than appending ``--temp-dir`` so the command line stays the
     pod's (Ray 2.60 takes ``$RAY_TMPDIR/ray`` as its temp dir);
   - ``RAY_USAGE_STATS_ENABLED=0`` (``--disable-usage-stats``: nothing phones home; there
     is no route out anyway);
   - ``PYTHONPATH`` starts with ``Options.pythonpath`` (local application modules a
     Serve config imports, as an image would bake them in);
   - ``HOME`` is a private directory, ``HOSTNAME`` the pod's hostname.

4. *Readiness* (``Options.readiness``, default on): kwok marks a pod Running and Ready
   the moment it gets its IP, before anything runs. The harness takes the pod's
   readiness over when it starts it: it patches ``Ready``/``ContainersReady`` to
   ``False`` at once, then runs the container's own ``readinessProbe`` (``exec``, or
   ``httpGet`` - what KubeRay v1.7.0 gives Ray 2.53 and later - as ``wget`` of
   ``http://<pod IP>:<port><path>`` inside the pod's namespaces, the kubelet's request;
   ``initialDelaySeconds``, ``periodSeconds``, ``timeoutSeconds``, ``successThreshold``,
   ``failureThreshold`` as the kubelet reads them) inside the pod's namespaces and
   patches ``Ready=True`` only when it passes, ``False`` again after
   ``failureThreshold`` failures or when the process exits (container state
   ``terminated``). A container without a readiness probe is Ready once started. Only
   changes are written (``status`` subresource, strategic merge patch). The window
   between kwok's Ready and the harness's ``False`` is short but real: a test that
   needs the truth waits for a transition after :attr:`RealPod.started_at`.
   When the container exits under ``restartPolicy: Never`` (a Job's pod: KubeRay's Redis
   clean-up), the pod's ``phase`` becomes ``Succeeded`` (exit 0) or ``Failed``, as a
   kubelet reports it, so the Job controller sees the Job finish.

Processes in the *shared* pod namespace (the simulator) cannot open connections to a pod
run here: their source address is the gateway's, which the pod does not route back
(only the pod CIDR and the host's veth address). The host, the API server (its
``pods/proxy`` and ``services/proxy``) and other real pods can. The container's
environment is built from the pod spec alone, not from the harness's own environment
(a container does not inherit its node's).

**Names after a head moves** (:meth:`Harness.refresh_names`): the hosts files of running
pods are rewritten in place with the head's new IP (GCS fault tolerance: workers reconnect).

**Stopping** (:meth:`RealPod.stop`, :meth:`Harness.close`): SIGTERM to the container's
process group, then SIGKILL to every process still in the pod's network namespace (all
of them were started by the harness; ``ray stop`` is never used: it kills every Ray
process of the machine by name), then the namespace, its veth (with it), its hosts file,
its temp dir, and ``Ready=False`` on the pod if it still exists. The harness does not
watch the API: deleting the pod object does not stop its processes; stop them.

**Leftovers**: while a pod's namespace exists its harness holds an exclusive ``flock``
on ``/run/rso-realray/<netns>.lock``; the kernel drops it when the process dies.
:meth:`Harness.start` (and ``python -m tests.support.realray reap``) removes every ``rsr-<8 hex>``
namespace whose lock is free: SIGKILL to the processes inside (by pid, from ``ip netns
pids``), then the namespace, hosts file and temp dir. Every process the harness starts
gets SIGKILL if the harness dies (``PR_SET_PDEATHSIG``), but Ray's own daemons are its
grandchildren and outlive it (measured: after a SIGKILL of pytest, a few Ray processes
per head stayed in their namespaces); the next harness, or the reaper, ends them.

**Ray**: :func:`ray_venv` finds the venv: ``$REALRAY_VENV``, else
``~/.cache/rayservice-operator/ray/<version>/venv`` (``$XDG_CACHE_HOME`` honoured; the
version is in ``hack/realray/ray-version``); :class:`RealRayError` says how to install it
when it is missing (tests fail with that message; they never skip).

Usage::

    with realray.running(control_plane, pythonpath=[apps_dir]) as harness:
        head = harness.run(namespace, head_pod_name)
        ...                      # dial head.ip, only after harness.run returned
        head.stop()
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import fcntl
import ipaddress
import json
import os
import pathlib
import re
import secrets
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from runtime.testing import controlplane, process
from tests.support.realray import podspec

__all__ = [
    "GATEWAY",
    "LOCK_DIR",
    "VENV_ENV",
    "Harness",
    "Options",
    "RealPod",
    "RealRayError",
    "install_hint",
    "ray_venv",
    "ray_version",
    "reap",
    "running",
]

ROOT = pathlib.Path(__file__).resolve().parents[3]
HACK = ROOT / "hack" / "realray"
"""Where Ray is installed from (``install.sh``) and its pinned version (``ray-version``)."""
VENV_ENV = "REALRAY_VENV"
"""Environment variable naming the Ray virtualenv (overrides the cached default)."""

GATEWAY = "169.254.1.1"
"""The shared namespace's address on every pod veth: the pods' next hop (link-local)."""

LOCK_DIR = pathlib.Path("/run/rso-realray")
"""Where each live pod namespace's owner holds ``<netns>.lock`` (see the module docstring)."""

_NAME = re.compile(r"rsr-[0-9a-f]{8}")
_STD_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_SET_HOSTNAME = 'hostname "$0" && exec "$@"'


class RealRayError(RuntimeError):
    """The harness cannot run a pod (Ray missing, no pod network, a bad pod, ...)."""


# -- the Ray install ---------------------------------------------------------------------------


def ray_version() -> str:
    """The pinned Ray version (``hack/realray/ray-version``)."""
    return (HACK / "ray-version").read_text().strip()


def _default_venv() -> pathlib.Path:
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return pathlib.Path(cache) / "rayservice-operator" / "ray" / ray_version() / "venv"


def install_hint() -> str:
    return (
        f"install it with `make ray` (or hack/realray/install.sh: ray[serve]=={ray_version()} "
        f"from PyPI into {_default_venv()}, ~100 s), or point ${VENV_ENV} at a venv that has it"
    )


def ray_venv() -> pathlib.Path:
    """The Ray virtualenv to use; :class:`RealRayError` (with how to install) if absent."""
    venv = pathlib.Path(os.environ.get(VENV_ENV) or _default_venv())
    if not os.access(venv / "bin" / "ray", os.X_OK):
        raise RealRayError(f"no Ray at {venv} (no executable bin/ray): {install_hint()}")
    return venv


# -- small process and ip helpers --------------------------------------------------------------


def _ip(*args: str) -> str:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RealRayError(f"`ip {' '.join(args)}` failed: {done.stderr.strip()}")
    return done.stdout


def _netns_pids(name: str) -> list[int]:
    done = subprocess.run(["ip", "netns", "pids", name], capture_output=True, text=True,
                          check=False)  # fmt: skip
    return [int(p) for p in done.stdout.split() if p.isdigit()]


def _kill_netns(name: str, timeout: float) -> list[int]:
    """SIGKILL every process in namespace ``name`` until none is left (or ``timeout``);
    the pids still there."""
    deadline = time.monotonic() + timeout
    while True:
        pids = _netns_pids(name)
        if not pids or time.monotonic() > deadline:
            return pids
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# -- leftovers ---------------------------------------------------------------------------------


def _claim(name: str, directory: pathlib.Path) -> int:
    LOCK_DIR.mkdir(parents=True, exist_ok=True)
    fd = os.open(LOCK_DIR / f"{name}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise RealRayError(f"the name {name} is already claimed") from None
    os.write(fd, json.dumps({"pid": os.getpid(), "dir": str(directory)}).encode())
    return fd


def _remove_leftovers(name: str, directory: str | None) -> None:
    subprocess.run(["ip", "netns", "del", name], capture_output=True, check=False)
    shutil.rmtree(pathlib.Path("/etc/netns") / name, ignore_errors=True)
    if directory and pathlib.Path(directory).name == name:
        shutil.rmtree(directory, ignore_errors=True)


def reap() -> list[str]:
    """Remove every ``rsr-<8 hex>`` pod namespace whose harness is gone (its lock is free):
    kill its processes by pid, delete it, its hosts file and its temp dir. One line per
    thing done or left. Needs root."""
    report: list[str] = []
    done = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False)
    names = {line.split()[0] for line in done.stdout.splitlines() if line.strip()}
    locks = {p.name.removesuffix(".lock") for p in LOCK_DIR.glob("rsr-*.lock")}
    for name in sorted(names | locks):
        if not _NAME.fullmatch(name):
            continue
        path = LOCK_DIR / f"{name}.lock"
        try:
            fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        except FileNotFoundError:
            report.append(f"left {name}: no owner lock, so not ours to judge")
            continue
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                continue  # a live harness owns it
            try:
                directory = json.loads(os.read(fd, 4096) or b"{}").get("dir")
            except ValueError:
                directory = None
            if name in names:
                left = _kill_netns(name, 10.0)
                if left:
                    report.append(f"left {name}: processes {left} would not die")
                    continue
            _remove_leftovers(name, directory)
            path.unlink(missing_ok=True)
            report.append(f"removed stale pod namespace {name}")
        finally:
            os.close(fd)
    return report


# -- the harness -------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, kw_only=True)
class Options:
    """How the harness runs pods. Every field states its default."""

    venv: pathlib.Path | None = None
    """The Ray virtualenv. Default: :func:`ray_venv`."""

    pythonpath: Sequence[pathlib.Path] = ()
    """Directories put first on the pods' ``PYTHONPATH`` (application modules). Default none."""

    cluster_domain: str = "cluster.local"
    """The cluster DNS domain in the head service's FQDN. Default ``cluster.local``."""

    readiness: bool = True
    """Own the pods' ``Ready`` condition (see the module docstring). Default on."""

    init_timeout: float = 180.0
    """Seconds an init container may run. Default 180."""

    stop_timeout: float = 10.0
    """Seconds from SIGTERM to SIGKILL when a pod stops. Default 10."""


class Harness:
    """Runs pods of ``control_plane`` for real; see the module docstring."""

    def __init__(self, control_plane: controlplane.ControlPlane, options: Options | None = None):
        self.cp = control_plane
        self.options = options or Options()
        self.venv: pathlib.Path | None = None
        self.pods: list[RealPod] = []
        self._lock = threading.Lock()

    @property
    def network(self) -> controlplane.PodNetwork:
        network = self.cp.pod_network
        if network is None or not network.cidr:
            raise RealRayError("the control plane has no pod network (Options(pod_network=True))")
        return network

    def start(self) -> Harness:
        """Check what the harness needs (root, the pod network, Ray); reap leftovers."""
        if os.geteuid() != 0:
            raise RealRayError("running pods needs root (ip netns add); run as root")
        self.venv = self.options.venv or ray_venv()
        if not os.access(self.venv / "bin" / "ray", os.X_OK):
            raise RealRayError(f"no Ray at {self.venv}: {install_hint()}")
        self.network.verify()
        reap()
        network = self.network
        _ip("netns", "exec", network.namespace, "sysctl", "-qw", "net.ipv4.ip_forward=1",
            f"net.ipv4.conf.{network.pod_veth}.proxy_arp=1")  # fmt: skip
        return self

    def close(self) -> None:
        """Stop every pod this harness runs."""
        with self._lock:
            pods, self.pods = list(self.pods), []
        errors = []
        for pod in reversed(pods):
            try:
                pod.stop()
            except Exception as exc:
                errors.append(exc)
        if errors:
            raise errors[0]

    def __enter__(self) -> Harness:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- API helpers ---------------------------------------------------------------------------

    def get(self, path: str) -> Any:
        return self.cp.request("GET", path)

    def _lookup(self, namespace: str) -> podspec.Lookup:
        def lookup(kind: str, name: str) -> Mapping[str, str] | None:
            try:
                obj = self.get(f"/api/v1/namespaces/{namespace}/{kind}/{name}")
            except controlplane.ApiError as exc:
                if exc.status == 404:
                    return None
                raise
            if kind == "secrets":
                return podspec.decode_secret(obj.get("data"))
            return {str(k): str(v) for k, v in (obj.get("data") or {}).items()}

        return lookup

    def _names(self, pod: Mapping[str, Any]) -> dict[str, str]:
        """The head service's names -> the head pod's IP, for a pod of a Ray cluster."""
        metadata = pod["metadata"]
        cluster = (metadata.get("labels") or {}).get("ray.io/cluster")
        if not cluster:
            return {}
        namespace = metadata["namespace"]
        service = f"{cluster}-head-svc"
        with contextlib.suppress(controlplane.ApiError):
            rc = self.get(f"/apis/ray.io/v1/namespaces/{namespace}/rayclusters/{cluster}")
            service = ((rc.get("status") or {}).get("head") or {}).get("serviceName") or service
        heads = self.get(
            f"/api/v1/namespaces/{namespace}/pods?labelSelector=ray.io/cluster%3D{cluster},"
            "ray.io/node-type%3Dhead"
        )["items"]
        ips = [
            p["status"]["podIP"]
            for p in heads
            if (p.get("status") or {}).get("podIP") and not p["metadata"].get("deletionTimestamp")
        ]
        if not ips:
            if (metadata.get("labels") or {}).get("ray.io/node-type") == "worker":
                raise RealRayError(
                    f"{namespace}/{metadata['name']}: the head of {cluster} has no IP yet, so "
                    f"{service} would not resolve; run the head first"
                )
            return {}
        names = podspec.service_names(service, namespace, self.options.cluster_domain)
        return dict.fromkeys(reversed(names), ips[0])

    # -- running a pod -------------------------------------------------------------------------

    def refresh_names(self) -> list[RealPod]:
        """Point the head service's names at the head's current IP in the hosts file of every
        pod still running (cluster DNS follows the head Service's endpoints the same way):
        after a head pod is replaced, its workers' GCS client reconnects to the new one. The
        file is rewritten in place, so the processes see it through their bind mount.
        Returns the pods whose file changed."""
        changed = []
        with self._lock:
            running = [p for p in self.pods if p._created and not p._stop.is_set()]
        for real in running:
            try:
                names = self._names(real.pod)
            except RealRayError:
                continue  # no head with an IP right now: keep the old names
            if names and names != real.names:
                real.names = names
                hosts = pathlib.Path("/etc/netns") / real.netns / "hosts"
                with open(hosts, "r+") as file:  # same inode: the bind mounts see it
                    file.truncate(0)
                    file.write(podspec.hosts_file(real.pod, names))
                changed.append(real)
        return changed

    def run(self, namespace: str, name: str) -> RealPod:
        """Start pod ``namespace/name`` for real (see the module docstring); returns once its
        network is in place and verified; init containers and the container start in a
        thread of the returned :class:`RealPod`."""
        if self.venv is None:
            raise RealRayError("Harness.start() first")
        pod = self.get(f"/api/v1/namespaces/{namespace}/pods/{name}")
        ip = (pod.get("status") or {}).get("podIP")
        if not ip:
            raise RealRayError(f"pod {namespace}/{name} has no IP yet")
        network = self.network
        if ipaddress.ip_address(ip) not in ipaddress.ip_network(network.cidr):
            raise RealRayError(f"pod IP {ip} is outside the pod network {network.cidr}")
        real = RealPod(self, pod, self._names(pod))
        with self._lock:
            self.pods.append(real)
        try:
            real._create_network()
            real._start()
        except BaseException:
            real.stop()
            raise
        return real


class RealPod:
    """One pod run for real: its namespace, processes and readiness (see the module
    docstring). Made by :meth:`Harness.run`."""

    def __init__(self, harness: Harness, pod: Mapping[str, Any], names: Mapping[str, str]):
        self.harness = harness
        self.pod = pod
        self.namespace = str(pod["metadata"]["namespace"])
        self.name = str(pod["metadata"]["name"])
        self.ip = str(pod["status"]["podIP"])
        self.hostname = podspec.hostname(pod)
        self.names = dict(names)
        suffix = secrets.token_hex(4)
        self.netns = f"rsr-{suffix}"
        self.shared_veth = f"rsrh{suffix}"
        self.pod_veth = f"rsrp{suffix}"
        self.directory = pathlib.Path(tempfile.gettempdir()) / self.netns
        self.log_path = self.directory / "container.log"
        self.started_at: float | None = None
        """``time.time()`` when the container's process started."""
        self.ready = False
        """The readiness the harness last wrote (or would have, with readiness off)."""
        self.exit_code: int | None = None
        self.error: BaseException | None = None
        """What stopped the pod thread, if it failed (an init container, a bad spec)."""
        self.probes: list[tuple[float, bool]] = []
        """Every readiness probe run: (``time.time()`` at its end, passed)."""
        self._popen: subprocess.Popen[bytes] | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock_fd: int | None = None
        self._created = False
        self._env: dict[str, str] = {}
        self._path = f"/api/v1/namespaces/{self.namespace}/pods/{self.name}"

    def __repr__(self) -> str:
        return f"RealPod({self.namespace}/{self.name} at {self.ip} in {self.netns})"

    # -- network -------------------------------------------------------------------------------

    def _create_network(self) -> None:
        network = self.harness.network
        shared = network.namespace
        self.directory.mkdir(mode=0o700)
        self._lock_fd = _claim(self.netns, self.directory)
        self._created = True
        _ip("netns", "add", self.netns)
        hosts = pathlib.Path("/etc/netns") / self.netns
        hosts.mkdir(parents=True, exist_ok=True)
        (hosts / "hosts").write_text(podspec.hosts_file(self.pod, self.names))
        _ip("link", "add", self.shared_veth, "netns", shared, "type", "veth",
            "peer", "name", self.pod_veth, "netns", self.netns)  # fmt: skip
        _ip("-n", shared, "addr", "add", f"{GATEWAY}/32", "dev", self.shared_veth)
        _ip("-n", shared, "link", "set", self.shared_veth, "up")
        _ip("-n", shared, "route", "add", f"{self.ip}/32", "dev", self.shared_veth,
            "table", "local")  # fmt: skip
        inside = ["-n", self.netns]
        _ip(*inside, "link", "set", "lo", "up")
        _ip(*inside, "addr", "add", f"{self.ip}/32", "dev", self.pod_veth)
        _ip(*inside, "link", "set", self.pod_veth, "up")
        for destination in (network.cidr, f"{controlplane.HOST_VETH_ADDRESS}/32"):
            _ip(*inside, "route", "add", destination, "via", GATEWAY, "dev", self.pod_veth,
                "onlink")  # fmt: skip
        self.verify()

    def verify(self) -> None:
        """Refuse (:class:`RealRayError`) unless the pod IP routes from the host into the pod
        network's veth and from there into this pod's, and the pod cannot reach outside."""
        network = self.harness.network
        network.verify()
        checks = (
            ((), network.host_veth),
            (("-n", network.namespace), self.shared_veth),
        )
        for where, device in checks:
            route = _ip(*where, "route", "get", self.ip)
            if f"dev {device}" not in route:
                raise RealRayError(f"{self.ip} does not route into {device}: {route!r}")
        done = subprocess.run(["ip", "-n", self.netns, "route", "get", "1.1.1.1"],
                              capture_output=True, text=True, check=False)  # fmt: skip
        if done.returncode == 0:
            raise RealRayError(f"namespace {self.netns} can reach outside: {done.stdout!r}")

    # -- processes -----------------------------------------------------------------------------

    def _environment(self, container: Mapping[str, Any]) -> dict[str, str]:
        venv = self.harness.venv
        assert venv is not None
        env = podspec.environment(self.pod, container, self.harness._lookup(self.namespace))
        tmp = self.directory / "tmp"
        home = self.directory / "home"
        tmp.mkdir(exist_ok=True)
        home.mkdir(exist_ok=True)
        pythonpath = [str(p) for p in self.harness.options.pythonpath]
        if env.get("PYTHONPATH"):
            pythonpath.append(env["PYTHONPATH"])
        return {
            "HOSTNAME": self.hostname,
            "HOME": str(home),
            "LANG": "C.UTF-8",
            **env,
            "PATH": f"{venv / 'bin'}:{env.get('PATH') or _STD_PATH}",
            "RAY_TMPDIR": str(tmp),
            "TMPDIR": str(tmp),
            "RAY_USAGE_STATS_ENABLED": "0",
            "PYTHONPATH": os.pathsep.join(pythonpath),
        }

    def _argv(self, argv: Sequence[str]) -> list[str]:
        ip = shutil.which("ip") or "/usr/sbin/ip"
        unshare = shutil.which("unshare") or "/usr/bin/unshare"
        return [ip, "netns", "exec", self.netns, unshare, "--uts", "--",
                "/bin/sh", "-c", _SET_HOSTNAME, self.hostname, *argv]  # fmt: skip

    def _spawn(
        self, argv: Sequence[str], env: Mapping[str, str], log: Any
    ) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            self._argv(argv), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True, preexec_fn=process.die_with_parent, env=dict(env),
            cwd=self.directory,
        )  # fmt: skip

    def _run_bounded(self, argv: Sequence[str], env: Mapping[str, str], timeout: float,
                     log: Any) -> int | None:  # fmt: skip
        """Run to completion; the exit code, or ``None`` if it timed out or we are stopping."""
        proc = self._spawn(argv, env, log)
        deadline = time.monotonic() + timeout
        try:
            while True:
                try:
                    return proc.wait(0.2)
                except subprocess.TimeoutExpired:
                    if self._stop.is_set() or time.monotonic() > deadline:
                        return None
        finally:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()

    def _start(self) -> None:
        spec = self.pod.get("spec") or {}
        containers = spec.get("containers") or []
        if not containers:
            raise RealRayError(f"pod {self.namespace}/{self.name} has no containers")
        # Resolve everything before anything runs: a bad spec fails run(), not the thread.
        plan = [
            (c, self._environment(c)) for c in [*(spec.get("initContainers") or ()), containers[0]]
        ]
        argvs = [podspec.command(c, env) for c, env in plan]
        self._env = plan[-1][1]
        if self.harness.options.readiness:
            self._write_ready(False, "ContainersNotReady", "started by hack/realray")
        self._thread = threading.Thread(
            target=self._main, args=(plan, argvs), name=f"realray-{self.name}", daemon=True
        )
        self._thread.start()

    def _main(self, plan: list[tuple[Mapping[str, Any], dict[str, str]]],
              argvs: list[list[str]]) -> None:  # fmt: skip
        try:
            with open(self.log_path, "ab") as log:
                for (container, env), argv in zip(plan[:-1], argvs[:-1], strict=True):
                    log.write(f"--- init container {container.get('name')}\n".encode())
                    log.flush()
                    code = self._run_bounded(argv, env, self.harness.options.init_timeout, log)
                    if self._stop.is_set():
                        return
                    if code != 0:
                        raise RealRayError(
                            f"init container {container.get('name')} of {self.name} "
                            f"{'timed out' if code is None else f'exited {code}'}"
                        )
                if self._stop.is_set():
                    return
                log.write(f"--- container {plan[-1][0].get('name')}\n".encode())
                log.flush()
                self._popen = self._spawn(argvs[-1], plan[-1][1], log)
            self.started_at = time.time()
            self._readiness(plan[-1][0])
        except BaseException as exc:
            self.error = exc

    def _readiness(self, container: Mapping[str, Any]) -> None:
        """The probe loop (see the module docstring); returns when stopping or on exit."""
        probe = container.get("readinessProbe") or {}
        command = (probe.get("exec") or {}).get("command")
        delay = float(probe.get("initialDelaySeconds") or 0)
        period = float(probe.get("periodSeconds") or 10)
        timeout = float(probe.get("timeoutSeconds") or 1)
        http = probe.get("httpGet")
        if not command and isinstance(http, Mapping) and http.get("port"):
            path = str(http.get("path") or "/")
            url = f"http://{self.ip}:{http['port']}{path if path.startswith('/') else '/' + path}"
            command = ["wget", "--tries", "1", "-T", str(max(int(timeout), 1)), "-q",
                       "-O", "/dev/null", url]  # fmt: skip
        to_pass = int(probe.get("successThreshold") or 1)
        to_fail = int(probe.get("failureThreshold") or 3)
        passes = fails = 0
        if not command:
            self._set_ready(True)
        wait = delay
        while not self._stop.wait(wait):
            wait = period
            if self._popen is not None and self._popen.poll() is not None:
                self.exit_code = self._popen.returncode
                self._set_ready(False, "ContainersNotReady", f"exited {self.exit_code}")
                return
            if not command:
                continue
            with open(os.devnull, "wb") as sink:
                ok = self._run_bounded(command, self._env, timeout, sink) == 0
            self.probes.append((time.time(), ok))
            passes, fails = (passes + 1, 0) if ok else (0, fails + 1)
            if ok and passes >= to_pass:
                self._set_ready(True)
            elif not ok and fails >= to_fail:
                self._set_ready(False, "ContainersNotReady", "readiness probe failed")

    def _set_ready(self, ready: bool, reason: str = "", message: str = "") -> None:
        if ready == self.ready:
            return
        if self.harness.options.readiness:
            try:
                self._write_ready(ready, reason, message)
            except controlplane.ApiError:
                return  # e.g. the pod is gone; tried again on the next probe
        self.ready = ready

    def _write_ready(self, ready: bool, reason: str = "", message: str = "") -> None:
        pod = self.harness.get(self._path)
        status = "True" if ready else "False"
        conditions = []
        for kind in ("Ready", "ContainersReady"):
            condition = {"type": kind, "status": status, "lastTransitionTime": _now()}
            if not ready:
                condition |= {"reason": reason, "message": message}
            conditions.append(condition)
        first = ((pod.get("spec") or {}).get("containers") or [{}])[0].get("name")
        statuses = []
        for entry in (pod.get("status") or {}).get("containerStatuses") or []:
            entry = dict(entry)
            if entry.get("name") == first:
                entry["ready"] = ready
                if self.exit_code is not None:
                    entry["state"] = {"terminated": {"exitCode": self.exit_code,
                                                     "finishedAt": _now()}}  # fmt: skip
            statuses.append(entry)
        patch: dict[str, Any] = {"conditions": conditions, "containerStatuses": statuses}
        if self.exit_code is not None and (pod.get("spec") or {}).get("restartPolicy") == "Never":
            patch["phase"] = "Succeeded" if self.exit_code == 0 else "Failed"
        self.harness.cp.request(
            "PATCH", self._path + "/status",
            {"status": patch},
            content_type="application/strategic-merge-patch+json",
        )  # fmt: skip

    # -- inspection and stop -------------------------------------------------------------------

    def pids(self) -> list[int]:
        """The processes in the pod's network namespace."""
        return _netns_pids(self.netns) if self._created else []

    def alive(self) -> bool:
        return self._popen is not None and self._popen.poll() is None

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        """Stop the processes and remove the namespace (see the module docstring);
        idempotent."""
        self._stop.set()
        if self._popen is not None and self._popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._popen.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._popen.wait(self.harness.options.stop_timeout)
        if self._thread is not None:
            self._thread.join(30)
        left: list[int] = []
        if self._created:
            left = _kill_netns(self.netns, 10.0)
        if self._popen is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._popen.pid, signal.SIGKILL)
            self._popen.wait(5)
        if self.harness.options.readiness and self.ready:
            with contextlib.suppress(controlplane.ApiError):
                self._write_ready(False, "ContainersNotReady", "stopped by hack/realray")
        self.ready = False
        if left:
            raise RealRayError(f"{self}: processes {left} would not die; namespace kept")
        if self._created:
            _remove_leftovers(self.netns, str(self.directory))
            self._created = False
        if self._lock_fd is not None:
            (LOCK_DIR / f"{self.netns}.lock").unlink(missing_ok=True)
            os.close(self._lock_fd)
            self._lock_fd = None
        with self.harness._lock:
            if self in self.harness.pods:
                self.harness.pods.remove(self)


@contextlib.contextmanager
def running(control_plane: controlplane.ControlPlane, **options: Any) -> Iterator[Harness]:
    """``with running(cp, pythonpath=[...]) as harness:``; every pod stopped on exit."""
    harness = Harness(control_plane, Options(**options))
    with harness:
        yield harness
