"""A real Kubernetes control plane on loopback, for integration tests and local runs.

Like controller-runtime's envtest, but complete enough to run an operator end
to end: :class:`ControlPlane` starts, from the binaries in one directory
(:attr:`Options.bin_dir`, else ``$CONTROLPLANE_BIN_DIR``, else envtest's
``$KUBEBUILDER_ASSETS``, else the cache ``python -m runtime.testing.assets`` builds
them into from the Go module proxy: see :func:`default_bin_dir` and
:mod:`runtime.testing.assets`),

- **etcd** (``--unsafe-no-fsync``, data in a temp dir) and **kube-apiserver**
  (TLS on a free ``127.0.0.1`` port, a fresh CA, an admin client certificate in
  ``system:masters``, RBAC, a service-account issuer and signing key, a service
  CIDR nothing connects to, ``--endpoint-reconciler-type=none``) - always;
- **kube-controller-manager** (garbage collector, namespaces, EndpointSlices,
  service accounts, ReplicaSets/Deployments, Jobs) - ``Options.controller_manager``;
- **kube-scheduler** and **kwok** (a fake kubelet: harness-made nodes turn Ready,
  bound pods turn Running with an IP from their node's ``spec.podCIDR``, deleted
  pods go away) - ``Options.scheduler`` / ``Options.kwok``;
- the **pod network** (:class:`PodNetwork`) - ``Options.pod_network``, needs root.

With the default :class:`Options` it runs only etcd and kube-apiserver, which is
what envtest's asset directory holds (``etcd``, ``kube-apiserver``, ``kubectl``):
the API with its validation, defaulting, admission, RBAC, watches and
finalizers, but no garbage collection, no namespace deletion (a deleted
namespace stays ``Terminating``) and no pods that run. Asking for a component
whose binary is not in the directory is a :class:`ControlPlaneError` naming it,
raised before anything starts.

It writes an admin kubeconfig, waits until ``/readyz`` is ok and the
``default`` namespace exists, can install CRDs from a directory (and waits until
they are served), and on :meth:`ControlPlane.stop` - also when start-up fails,
a test fails or the test process is interrupted or killed - stops every
process group it started and removes its temp dir. A component that dies or
hangs during start-up raises :class:`ControlPlaneError` naming it, with the last
lines of its log.

Network safety: the harness itself only ever connects to ``127.0.0.1`` and,
through :meth:`PodNetwork.connect`, to pod IPs inside its own pod CIDR; every
connection it makes is recorded in :attr:`ControlPlane.connections`.

Usage (blocking API; run it in a thread or a session fixture)::

    with ControlPlane(Options(bin_dir=..., controller_manager=True)) as cp:
        print(cp.kubeconfig)            # path of the admin kubeconfig
        cp.request("GET", "/version")   # a small JSON REST helper

``python -m runtime.testing.controlplane up --bin-dir DIR`` keeps one running
for development (see ``make cluster-up`` and ``hack/cluster.sh``); ``... reap``
removes the pod networks of harnesses that were killed before they could.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import dataclasses
import fcntl
import http.client
import ipaddress
import json
import os
import pathlib
import re
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

from runtime import tls
from runtime.testing import assets, process

__all__ = [
    "ApiError",
    "ControlPlane",
    "ControlPlaneError",
    "Options",
    "PodNetwork",
    "PodNetworkError",
    "default_bin_dir",
    "free_ports",
]

BIN_DIR_ENV = "CONTROLPLANE_BIN_DIR"
"""Environment variable naming the directory with the control-plane binaries."""

ENVTEST_ENV = "KUBEBUILDER_ASSETS"
"""envtest's variable: a directory with ``etcd``, ``kube-apiserver`` and ``kubectl``
(what ``setup-envtest use -p path`` prints). Read when :data:`BIN_DIR_ENV` is unset."""

DEFAULT_POD_CIDR = "198.18.0.0/16"
"""Pod addresses come from the range reserved for benchmark networks (RFC 2544)."""

SERVICE_CIDR = "198.19.0.0/20"
"""Service ClusterIPs: allocated by the apiserver, never connected to (4,094 of them:
room for a thousand RayServices' Services, ``hack/bench/compare.py --services 1000``)."""

HOST_VETH_ADDRESS = "198.19.255.254"
"""The host end of the pod-network veth (outside both the pod and service CIDRs)."""

_STAGES = pathlib.Path(__file__).with_name("kwok_stages.yaml")

T = TypeVar("T")


class ControlPlaneError(RuntimeError):
    """A component failed to build, start or answer; names it and shows its log tail."""

    def __init__(self, component: str, message: str, log_tail: str = "") -> None:
        self.component = component
        self.log_tail = log_tail
        text = f"{component}: {message}"
        if log_tail:
            text += f"\n--- last lines of the {component} log ---\n{log_tail}"
        super().__init__(text)


class PodNetworkError(ControlPlaneError):
    """The pod network could not be set up (or its routing is not what it must be)."""

    def __init__(self, message: str) -> None:
        super().__init__("pod-network", message)


class ApiError(RuntimeError):
    """The API server answered with an error status."""

    def __init__(self, status: int, body: Any) -> None:
        self.status = status
        self.body = body
        message = body.get("message", body) if isinstance(body, dict) else body
        super().__init__(f"HTTP {status}: {message}")


def _check_binary(name: str, binary: pathlib.Path) -> None:
    if not os.access(binary, os.X_OK):
        raise ControlPlaneError(
            name,
            f"binary {binary} is missing or not executable; build it with "
            f"`python -m runtime.testing.assets --bin-dir {binary.parent} {name}` "
            "(needs Go >= 1.26), or point Options.bin_dir or "
            f"${BIN_DIR_ENV} at a directory that has it (envtest's ${ENVTEST_ENV} has "
            "etcd, kube-apiserver and kubectl only)",
        )


def default_bin_dir() -> pathlib.Path | None:
    """``$CONTROLPLANE_BIN_DIR`` if set (non-empty), else ``$KUBEBUILDER_ASSETS`` if
    set, else :func:`runtime.testing.assets.cache_bin_dir` (where ``python -m
    runtime.testing.assets`` builds by default) if it holds executable ``etcd`` and
    ``kube-apiserver``, else ``None``. It never builds anything (a test run does not
    compile Kubernetes behind your back)."""
    for variable in (BIN_DIR_ENV, ENVTEST_ENV):
        if value := os.environ.get(variable):
            return pathlib.Path(value)
    cached = assets.cache_bin_dir()
    if all(os.access(cached / name, os.X_OK) for name in ("etcd", "kube-apiserver")):
        return cached
    return None


@dataclasses.dataclass(frozen=True, kw_only=True)
class Options:
    """What to start. Every field states its default."""

    bin_dir: pathlib.Path | None = None
    """Directory with ``etcd``, ``kube-apiserver`` (and the optional binaries).
    Default: :func:`default_bin_dir` (``$CONTROLPLANE_BIN_DIR``, else
    ``$KUBEBUILDER_ASSETS``, else what ``python -m runtime.testing.assets`` built);
    required one way or the other."""

    controller_manager: bool = False
    """Run kube-controller-manager (garbage collection, namespaces, EndpointSlices, Jobs).
    Default off."""

    scheduler: bool = False
    """Run kube-scheduler, so pods get bound to nodes. Default off."""

    kwok: bool = False
    """Run kwok and create ``nodes`` fake nodes that it keeps Ready. Default off."""

    nodes: int = 1
    """Fake nodes to create when ``kwok`` is on; each gets a /24 of the pod CIDR. Default 1."""

    pod_network: bool = False
    """Create the pod network (netns + veth; needs root). Default off."""

    crd_dirs: Sequence[pathlib.Path] = ()
    """Directories whose ``*.yaml``/``*.json`` CRDs are installed at start. Default none."""

    start_timeout: float = 60.0
    """Seconds each component gets to become ready. Default 60 s."""

    uncached_resources: Sequence[str] = ()
    """Resources (``plural.group``, or ``plural`` for the core group) served without the
    apiserver's watch cache, so their watches read etcd directly and
    :meth:`ControlPlane.compact_etcd` makes old resourceVersions answer 410. (With the
    watch cache, as in production, a watch is served from memory while its
    resourceVersion is inside the cache's window, compaction or not.) Default none."""

    extra_apiserver_flags: Sequence[str] = ()
    """Appended to kube-apiserver's command line. Default none."""

    extra_controller_manager_flags: Sequence[str] = ()
    """Appended to kube-controller-manager's command line (e.g. ``--kube-api-qps=200``:
    its default 20 requests a second bound how fast Jobs complete). Default none."""


class _Process:
    """One component: its own process group, its output in a log file."""

    def __init__(self, name: str, args: Sequence[str], log_path: pathlib.Path) -> None:
        self.name = name
        self.args = list(args)
        self.log_path = log_path
        self.popen: subprocess.Popen[bytes] | None = None

    def start(self, env: Mapping[str, str] | None = None) -> None:
        _check_binary(self.name, pathlib.Path(self.args[0]))
        with open(self.log_path, "ab") as log:
            self.popen = subprocess.Popen(
                self.args,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=process.die_with_parent,
                env=dict(env) if env is not None else None,
            )

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def tail(self, lines: int = 25) -> str:
        return process.tail(self.log_path, lines)

    def check_alive(self) -> None:
        if self.popen is not None and self.popen.poll() is not None:
            raise ControlPlaneError(
                self.name, f"exited with code {self.popen.returncode} during start-up", self.tail()
            )

    def stop(self, timeout: float = 10.0) -> None:
        if self.popen is None:
            return
        pgid = self.popen.pid
        for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, sig)
            try:
                self.popen.wait(wait)
                break
            except subprocess.TimeoutExpired:
                continue
        # The group may still hold children that outlived the leader.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)


def free_ports(count: int) -> list[int]:
    """``count`` distinct free loopback ports (all held open while choosing, so none repeats).

    Another process may still take one before our component binds it; :meth:`ControlPlane._launch`
    retries a component that fails with "address already in use".
    """
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sockets.append(sock)
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def _wait(
    what: str,
    check: Callable[[], T | None],
    timeout: float,
    procs: Sequence[_Process] = (),
    interval: float = 0.05,
) -> T:
    """Poll ``check`` until it returns a value; fail early if a process died."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while True:
        for proc in procs:
            proc.check_alive()
        try:
            value = check()
            if value is not None:
                return value
        except (OSError, ApiError, http.client.HTTPException, ValueError) as exc:
            last_error = exc
        if time.monotonic() > deadline:
            tail = procs[-1].tail() if procs else ""
            component = procs[-1].name if procs else "control-plane"
            hint = f" (last error: {last_error})" if last_error else ""
            raise ControlPlaneError(component, f"{what} not ready after {timeout} s{hint}", tail)
        time.sleep(interval)


def _openssl(*args: str, cwd: pathlib.Path) -> None:
    """:func:`runtime.tls.openssl`, failing as a :class:`ControlPlaneError` of ``certificates``."""
    try:
        tls.openssl(*args, cwd=cwd)
    except tls.TLSError as exc:
        raise ControlPlaneError("certificates", str(exc)) from exc


def _make_certificates(directory: pathlib.Path) -> None:
    """A CA, a serving cert for 127.0.0.1, an admin client cert and a service-account key."""
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    _openssl(
        "req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "30",
        "-subj", "/CN=runtime.testing control-plane CA", cwd=directory,
    )  # fmt: skip
    leaves = {
        "apiserver": (
            "/CN=kube-apiserver",
            "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n",
        ),
        "admin": ("/O=system:masters/CN=admin", "extendedKeyUsage=clientAuth\n"),
    }
    for name, (subject, extensions) in leaves.items():
        (directory / f"{name}.ext").write_text(extensions)
        _openssl("req", *ec, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", subject,
                 cwd=directory)  # fmt: skip
        _openssl(
            "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", f"{name}.crt", "-days", "30", "-extfile", f"{name}.ext",
            cwd=directory,
        )  # fmt: skip
    _openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", "sa.key", cwd=directory)
    _openssl("ec", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=directory)


def _b64(path: pathlib.Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


class ControlPlane:
    """etcd + kube-apiserver (+ optional components) on loopback; see the module docstring."""

    def __init__(self, options: Options | None = None) -> None:
        self.options = options or Options()
        bin_dir = self.options.bin_dir or default_bin_dir()
        if bin_dir is None:
            raise ControlPlaneError(
                "control-plane",
                "no binaries: build them with `python -m runtime.testing.assets` (needs "
                f"Go >= 1.26; they go to {assets.cache_bin_dir()}, found there from then "
                f"on), or pass Options(bin_dir=...), or set ${BIN_DIR_ENV} or envtest's "
                f"${ENVTEST_ENV}",
            )
        self.bin_dir = pathlib.Path(bin_dir)
        self.dir: pathlib.Path | None = None
        self.kubeconfig: pathlib.Path | None = None
        self.api_port = 0
        self.etcd_port = 0
        self.pod_network: PodNetwork | None = None
        self.connections: list[tuple[str, int]] = []
        """Every (host, port) this harness connected to, in order."""
        self._procs: list[_Process] = []
        self._ssl: ssl.SSLContext | None = None
        self._lock = threading.Lock()

    # -- lifecycle ---------------------------------------------------------------------------

    def __enter__(self) -> ControlPlane:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def api_url(self) -> str:
        return f"https://127.0.0.1:{self.api_port}"

    def pids(self) -> dict[str, int]:
        """The running components' process ids by name (``etcd``, ``kube-apiserver``,
        ``kube-controller-manager`` ...): for reading their CPU and memory in ``/proc``."""
        with self._lock:
            return {
                proc.name: proc.popen.pid
                for proc in self._procs
                if proc.popen is not None and proc.alive()
            }

    def start(self) -> ControlPlane:
        """Start every component and wait until each is ready; stop all on failure."""
        if self.dir is not None:
            raise RuntimeError("control plane already started")
        self.dir = pathlib.Path(tempfile.mkdtemp(prefix="rso-controlplane-"))
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self) -> None:
        assert self.dir is not None
        opts = self.options
        wanted = {
            "etcd": True,
            "kube-apiserver": True,
            "kube-controller-manager": opts.controller_manager,
            "kube-scheduler": opts.scheduler,
            "kwok": opts.kwok,
        }
        for name in (name for name, on in wanted.items() if on):
            _check_binary(name, self.bin_dir / name)  # before anything starts
        timeout = opts.start_timeout
        if opts.pod_network:
            self.pod_network = PodNetwork(self.dir / "podnet", connections=self.connections)
            self.pod_network.create()
        certs = self.dir / "certs"
        certs.mkdir()
        _make_certificates(certs)
        self._ssl = ssl.create_default_context(cafile=str(certs / "ca.crt"))
        self._ssl.load_cert_chain(str(certs / "admin.crt"), str(certs / "admin.key"))

        data_dir = self.dir / "etcd"

        def etcd_flags(ports: list[int]) -> list[str]:
            self.etcd_port, peer = ports
            shutil.rmtree(data_dir, ignore_errors=True)  # a failed attempt may have left one
            return [
                "--name=default",
                f"--data-dir={data_dir}",
                f"--listen-client-urls=http://127.0.0.1:{self.etcd_port}",
                f"--advertise-client-urls=http://127.0.0.1:{self.etcd_port}",
                f"--listen-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-cluster=default=http://127.0.0.1:{peer}",
                "--unsafe-no-fsync=true",
                "--log-level=warn",
            ]

        etcd = self._launch(
            "etcd", 2, etcd_flags,
            lambda proc, _: _wait("etcd /health", self._etcd_healthy, timeout, [proc]),
        )  # fmt: skip

        def apiserver_flags(ports: list[int]) -> list[str]:
            [self.api_port] = ports
            uncached = [f"{r}#0" for r in opts.uncached_resources]
            return [
                f"--etcd-servers=http://127.0.0.1:{self.etcd_port}",
                f"--cert-dir={certs}",
                f"--tls-cert-file={certs / 'apiserver.crt'}",
                f"--tls-private-key-file={certs / 'apiserver.key'}",
                f"--client-ca-file={certs / 'ca.crt'}",
                f"--secure-port={self.api_port}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--endpoint-reconciler-type=none",
                "--allow-privileged=true",
                "--authorization-mode=RBAC",
                # No kubelet registers our nodes, so nothing would lift the not-ready
                # taint that TaintNodesByCondition puts on new nodes.
                "--disable-admission-plugins=ServiceAccount,TaintNodesByCondition",
                f"--service-account-issuer=https://127.0.0.1:{self.api_port}",
                f"--service-account-key-file={certs / 'sa.pub'}",
                f"--service-account-signing-key-file={certs / 'sa.key'}",
                *([f"--watch-cache-sizes={','.join(uncached)}"] if uncached else []),
                *opts.extra_apiserver_flags,
            ]

        def apiserver_ready(proc: _Process, _: list[int]) -> None:
            self.kubeconfig = self._write_kubeconfig(certs)
            _wait("kube-apiserver /readyz", self._apiserver_ready, timeout, [etcd, proc])
            _wait(
                "the default namespace",
                lambda: self.request("GET", "/api/v1/namespaces/default"),
                timeout,
                [etcd, proc],
            )

        apiserver = self._launch("kube-apiserver", 1, apiserver_flags, apiserver_ready)
        base = [etcd, apiserver]

        def healthz_ready(what: str) -> Callable[[_Process, list[int]], None]:
            def ready(proc: _Process, ports: list[int]) -> None:
                _wait(f"{what} /healthz", lambda: self._healthz(ports[0]), timeout, [*base, proc])

            return ready

        if opts.controller_manager:
            base.append(
                self._launch(
                    "kube-controller-manager",
                    1,
                    lambda ports: [
                        f"--kubeconfig={self.kubeconfig}",
                        f"--service-account-private-key-file={certs / 'sa.key'}",
                        f"--root-ca-file={certs / 'ca.crt'}",
                        "--leader-elect=false",
                        "--controllers=garbagecollector,namespace,endpointslice,endpoint,"
                        "serviceaccount,serviceaccount-token,replicaset,deployment,job",
                        f"--secure-port={ports[0]}",
                        "--bind-address=127.0.0.1",
                        "--concurrent-gc-syncs=5",
                        *opts.extra_controller_manager_flags,
                    ],
                    healthz_ready("kube-controller-manager"),
                )
            )
        if opts.scheduler:
            base.append(
                self._launch(
                    "kube-scheduler",
                    1,
                    lambda ports: [
                        f"--kubeconfig={self.kubeconfig}",
                        "--leader-elect=false",
                        f"--secure-port={ports[0]}",
                        "--bind-address=127.0.0.1",
                    ],
                    healthz_ready("kube-scheduler"),
                )
            )
        if opts.kwok:
            self._start_kwok(base, timeout)
        for crd_dir in opts.crd_dirs:
            self.install_crds(crd_dir)

    def _start_kwok(self, base: list[_Process], timeout: float) -> None:
        pod_cidr = ipaddress.ip_network(
            self.pod_network.cidr if self.pod_network else DEFAULT_POD_CIDR
        )
        subnets = pod_cidr.subnets(new_prefix=24)
        next(subnets)  # leave the first /24 unused: x.x.0.0 reads like a network address
        kwok = self._spawn(
            "kwok",
            [
                f"--kubeconfig={self.kubeconfig}",
                f"--config={_STAGES}",
                "--manage-all-nodes=false",
                "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
                f"--server-address=127.0.0.1:{free_ports(1)[0]}",
                f"--node-ip={HOST_VETH_ADDRESS}",
                f"--cidr={next(pod_cidr.subnets(new_prefix=24))}",
            ],
        )
        names = []
        for i in range(self.options.nodes):
            cidr = str(next(subnets))
            name = f"kwok-node-{i}"
            self.request(
                "POST",
                "/api/v1/nodes",
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "metadata": {
                        "name": name,
                        "annotations": {"kwok.x-k8s.io/node": "fake"},
                        "labels": {"type": "kwok", "kubernetes.io/hostname": name},
                    },
                    "spec": {"podCIDR": cidr, "podCIDRs": [cidr]},
                },
            )
            names.append(name)

        def all_ready() -> bool | None:
            for name in names:
                node = self.request("GET", f"/api/v1/nodes/{name}")
                conditions = node.get("status", {}).get("conditions", [])
                if not any(c["type"] == "Ready" and c["status"] == "True" for c in conditions):
                    return None
            return True

        _wait("kwok nodes Ready", all_ready, timeout, [*base, kwok], interval=0.1)

    def stop(self) -> None:
        """Stop every process (reverse start order), remove the pod network and temp dir."""
        with self._lock:
            for proc in reversed(self._procs):
                proc.stop()
            self._procs.clear()
            if self.pod_network is not None:
                self.pod_network.destroy()
                self.pod_network = None
            if self.dir is not None and not os.environ.get("CONTROLPLANE_KEEP_DIR"):
                shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

    def restart(self, component: str, down_for: float = 0.0) -> None:
        """Stop ``component`` (``"kube-apiserver"``, ``"etcd"``, ...), wait ``down_for`` s,
        and start it again with the same command line - the same ports and, for etcd,
        the same data - then wait until it is ready again. What a rolling restart or a
        crash of one control-plane member looks like to its clients: their connections
        drop, requests fail for a while, then the same address answers again.

        Call it from a thread that lives as long as the control plane (the one that
        started it): a component gets SIGKILL when the thread that started it ends
        (``PR_SET_PDEATHSIG`` is per thread), so a restart from, say, a short-lived
        ``asyncio.to_thread`` worker dies with that worker."""
        with self._lock:
            proc = next((p for p in self._procs if p.name == component), None)
            if proc is None:
                raise KeyError(component)
            proc.stop()
            time.sleep(down_for)
            proc.start()
        timeout = self.options.start_timeout
        if component == "etcd":
            _wait("etcd /health", self._etcd_healthy, timeout, [proc])
            _wait("kube-apiserver /readyz", self._apiserver_ready, timeout, self._procs[:2])
        elif component == "kube-apiserver":
            _wait("kube-apiserver /readyz", self._apiserver_ready, timeout, self._procs[:2])

    def service_account_kubeconfig(
        self, namespace: str, name: str, *, expiration_seconds: int = 24 * 3600
    ) -> pathlib.Path:
        """A kubeconfig that authenticates as service account ``namespace/name``.

        The token comes from the TokenRequest API (``serviceaccounts/<name>/token``), as a
        kubelet mounts one into a pod, so a process run with this kubeconfig has exactly
        the permissions its RBAC bindings give that account - a missing rule fails as it
        would in a cluster. The account must exist."""
        assert self.dir is not None
        assert self.kubeconfig is not None
        answer = self.request(
            "POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
             "spec": {"expirationSeconds": expiration_seconds}},
        )  # fmt: skip
        config = json.loads(self.kubeconfig.read_text())
        user = f"system:serviceaccount:{namespace}:{name}"
        config["users"] = [{"name": user, "user": {"token": answer["status"]["token"]}}]
        config["contexts"] = [{"name": user, "context": {"cluster": "controlplane", "user": user}}]
        config["current-context"] = user
        path = self.dir / f"kubeconfig-sa-{namespace}-{name}"
        path.write_text(json.dumps(config, indent=2))
        path.chmod(0o600)
        return path

    def _launch(
        self,
        name: str,
        ports: int,
        flags: Callable[[list[int]], list[str]],
        ready: Callable[[_Process, list[int]], object],
        attempts: int = 3,
    ) -> _Process:
        """Start a component on fresh ports and wait until ``ready``; if it lost a race for a
        port ("address already in use"), try again with new ones."""
        for attempt in range(1, attempts + 1):
            chosen = free_ports(ports)
            proc = self._spawn(name, flags(chosen))
            try:
                ready(proc, chosen)
                return proc
            except ControlPlaneError as exc:
                if "address already in use" not in exc.log_tail or attempt == attempts:
                    raise
                proc.stop()
                self._procs.remove(proc)
                proc.log_path.unlink(missing_ok=True)
        raise AssertionError("unreachable")  # pragma: no cover

    def _spawn(self, name: str, flags: Sequence[str]) -> _Process:
        assert self.dir is not None
        proc = _Process(name, [str(self.bin_dir / name), *flags], self.dir / f"{name}.log")
        self._procs.append(proc)
        proc.start()
        return proc

    def logs(self, component: str, lines: int = 50) -> str:
        """The last ``lines`` of a component's log (``"kube-apiserver"``, ``"etcd"``, ...)."""
        for proc in self._procs:
            if proc.name == component:
                return proc.tail(lines)
        raise KeyError(component)

    # -- readiness ---------------------------------------------------------------------------

    def _etcd_healthy(self) -> bool | None:
        status, body = self._http("GET", "127.0.0.1", self.etcd_port, "/health", tls=None)
        return True if status == 200 and json.loads(body).get("health") == "true" else None

    def _apiserver_ready(self) -> bool | None:
        status, _ = self._http("GET", "127.0.0.1", self.api_port, "/readyz", tls=self._ssl)
        return True if status == 200 else None

    def _healthz(self, port: int) -> bool | None:
        insecure = ssl.create_default_context()
        insecure.check_hostname = False
        insecure.verify_mode = ssl.CERT_NONE
        status, _ = self._http("GET", "127.0.0.1", port, "/healthz", tls=insecure)
        return True if status == 200 else None

    # -- API access --------------------------------------------------------------------------

    def _http(
        self,
        method: str,
        host: str,
        port: int,
        path: str,
        *,
        tls: ssl.SSLContext | None,
        body: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: float = 10.0,
    ) -> tuple[int, bytes]:
        _check_loopback(host)
        self.connections.append((host, port))
        conn: http.client.HTTPConnection
        if tls is None:
            conn = http.client.HTTPConnection(host, port, timeout=timeout)
        else:
            conn = http.client.HTTPSConnection(host, port, timeout=timeout, context=tls)
        try:
            conn.request(method, path, body=body, headers=dict(headers or {}))
            response = conn.getresponse()
            return response.status, response.read()
        finally:
            conn.close()

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str = "application/json",
        timeout: float = 10.0,
    ) -> Any:
        """A JSON request to the API server as the admin user; raises :class:`ApiError`."""
        payload = None if body is None else json.dumps(body).encode()
        headers = {"Accept": "application/json"}
        if payload is not None:
            headers["Content-Type"] = content_type
        status, raw = self._http(
            method, "127.0.0.1", self.api_port, path, tls=self._ssl, body=payload,
            headers=headers, timeout=timeout,
        )  # fmt: skip
        try:
            decoded = json.loads(raw) if raw else None
        except ValueError:
            decoded = raw.decode(errors="replace")
        if status >= 400:
            raise ApiError(status, decoded)
        return decoded

    def metrics(self) -> str:
        """kube-apiserver's own ``/metrics`` text (what benchmarks count API traffic from)."""
        status, raw = self._http("GET", "127.0.0.1", self.api_port, "/metrics", tls=self._ssl)
        if status != 200:
            raise ApiError(status, raw.decode(errors="replace"))
        return raw.decode()

    def request_counts(self) -> dict[tuple[str, str, str], float]:
        """``apiserver_request_total`` summed by (verb, resource, subresource), from the
        apiserver's own ``/metrics`` - what benchmarks and tests count traffic with."""
        counts: dict[tuple[str, str, str], float] = {}
        for line in self.metrics().splitlines():
            if not line.startswith("apiserver_request_total{"):
                continue
            labels_text, _, value = line[len("apiserver_request_total{") :].rpartition("} ")
            labels = dict(part.split("=", 1) for part in _split_labels(labels_text) if "=" in part)
            verb, resource, sub = (labels.get(k, "").strip('"') for k in _COUNT_LABELS)
            counts[(verb, resource, sub)] = counts.get((verb, resource, sub), 0.0) + float(value)
        return counts

    def _write_kubeconfig(self, certs: pathlib.Path) -> pathlib.Path:
        assert self.dir is not None
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "controlplane",
                    "cluster": {
                        "server": self.api_url,
                        "certificate-authority-data": _b64(certs / "ca.crt"),
                    },
                }
            ],
            "users": [
                {
                    "name": "admin",
                    "user": {
                        "client-certificate-data": _b64(certs / "admin.crt"),
                        "client-key-data": _b64(certs / "admin.key"),
                    },
                }
            ],
            "contexts": [
                {"name": "admin", "context": {"cluster": "controlplane", "user": "admin"}}
            ],
            "current-context": "admin",
        }
        path = self.dir / "kubeconfig"
        path.write_text(json.dumps(config, indent=2))
        path.chmod(0o600)
        return path

    # -- CRDs and etcd -----------------------------------------------------------------------

    def install_crds(
        self,
        source: os.PathLike[str] | str | Mapping[str, Any] | Iterable[Mapping[str, Any]],
        timeout: float = 30.0,
    ) -> list[str]:
        """Create (or replace) each CRD of ``source`` and wait until each is served; their
        names. ``source``: a directory (every ``.yaml``, ``.yml`` and ``.json`` file in it),
        one such file, one CRD as a mapping, or several. Documents of other kinds are
        skipped."""
        import yaml

        docs: list[Any] = []
        if isinstance(source, Mapping):
            docs = [source]
        elif isinstance(source, str | os.PathLike):
            path = pathlib.Path(source)
            files = sorted(path.iterdir()) if path.is_dir() else [path]
            for file in files:
                if file.suffix in (".yaml", ".yml", ".json"):
                    docs.extend(yaml.safe_load_all(file.read_text()))
        else:
            docs = list(source)
        names = []
        for given in docs:
            if not isinstance(given, Mapping) or given.get("kind") != "CustomResourceDefinition":
                continue
            doc = copy.deepcopy(dict(given))
            name = doc["metadata"]["name"]
            base = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
            try:
                self.request("POST", base, doc)
            except ApiError as exc:
                if exc.status != 409:
                    raise
                current = self.request("GET", f"{base}/{name}")
                doc["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
                self.request("PUT", f"{base}/{name}", doc)
            names.append(name)
            self._wait_crd_served(doc, timeout)
        return names

    def _wait_crd_served(self, crd: dict[str, Any], timeout: float) -> None:
        group = crd["spec"]["group"]
        plural = crd["spec"]["names"]["plural"]
        versions = [v["name"] for v in crd["spec"]["versions"] if v.get("served", True)]

        def served() -> bool | None:
            for version in versions:
                resources = self.request("GET", f"/apis/{group}/{version}")
                if not any(r["name"] == plural for r in resources.get("resources", [])):
                    return None
            return True

        _wait(f"CRD {plural}.{group} served", served, timeout, self._procs[:2])

    def etcd_revision(self) -> int:
        """etcd's current revision (the newest resourceVersion)."""
        status, raw = self._http(
            "POST", "127.0.0.1", self.etcd_port, "/v3/kv/range", tls=None,
            body=json.dumps({"key": base64.b64encode(b"/").decode()}).encode(),
        )  # fmt: skip
        if status != 200:
            raise ControlPlaneError("etcd", f"range failed: HTTP {status} {raw!r}")
        return int(json.loads(raw)["header"]["revision"])

    def compact_etcd(self, revision: int | None = None) -> int:
        """Compact etcd up to ``revision`` (default: now).

        Watches from older resourceVersions of ``Options.uncached_resources`` then
        get 410 Gone; cached resources answer from the watch cache's window.
        """
        revision = revision or self.etcd_revision()
        status, raw = self._http(
            "POST", "127.0.0.1", self.etcd_port, "/v3/kv/compaction", tls=None,
            body=json.dumps({"revision": str(revision), "physical": True}).encode(),
        )  # fmt: skip
        if status != 200:
            raise ControlPlaneError("etcd", f"compaction failed: HTTP {status} {raw!r}")
        return revision


_COUNT_LABELS = ("verb", "resource", "subresource")


def _split_labels(text: str) -> list[str]:
    """Split ``a="x",b="y,z"`` on the commas between labels."""
    parts, current, quoted = [], "", False
    for char in text:
        if char == '"':
            quoted = not quoted
        if char == "," and not quoted:
            parts.append(current)
            current = ""
        else:
            current += char
    if current:
        parts.append(current)
    return parts


def _check_loopback(host: str) -> None:
    if not ipaddress.ip_address(host).is_loopback:
        raise PermissionError(f"the harness only talks to loopback, not {host}")


def _ip(*args: str) -> str:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise PodNetworkError(f"`ip {' '.join(args)}` failed: {done.stderr.strip()}")
    return done.stdout


class PodNetwork:
    """A network namespace holding every pod IP of a pod CIDR (docs/architecture.md: "The pod
    network").

    :meth:`create` makes a netns joined to the host by a veth pair, routes a free
    /20 of ``198.18.0.0/16`` into it, gives the namespace a local route for that
    whole range (one listener on ``0.0.0.0`` answers every pod IP) and no default
    route, and verifies with ``ip route get`` that the range goes into its own veth
    before returning (fail closed). :meth:`destroy` removes it all.

    While the namespace exists, its creator holds an exclusive ``flock`` on
    ``/run/rso-controlplane/<name>.lock`` (taken before ``ip netns add``, dropped
    after ``ip netns del``); the kernel drops it when the process dies, however it
    dies, so a namespace whose lock is free outlived its harness and
    ``python -m runtime.testing.controlplane reap`` may remove it.

    :meth:`spawn` runs a process inside; :meth:`publish` sends a JSON message to
    every process connected to the Unix socket at :attr:`socket_path` (the last
    message is replayed to late connections). :meth:`connect` is the only way
    the harness dials a pod IP, and it refuses anything outside the CIDR.
    """

    def __init__(
        self,
        directory: pathlib.Path,
        *,
        parent_cidr: str = DEFAULT_POD_CIDR,
        connections: list[tuple[str, int]] | None = None,
    ) -> None:
        self.directory = pathlib.Path(directory)
        self.parent_cidr = ipaddress.ip_network(parent_cidr)
        self.cidr = ""
        suffix = secrets.token_hex(4)
        self.namespace = f"rso-{suffix}"
        self.host_veth = f"rsoh{suffix}"
        self.pod_veth = f"rsop{suffix}"
        self.socket_path = self.directory / "channel.sock"
        self.connections = connections if connections is not None else []
        self._procs: list[_Process] = []
        self._server: socket.socket | None = None
        self._clients: list[socket.socket] = []
        self._last: bytes | None = None
        self._lock = threading.Lock()
        self._created = False
        self._owner_lock: int | None = None

    def create(self) -> PodNetwork:
        if os.geteuid() != 0:
            raise PodNetworkError("creating the pod network needs root (ip netns add); run as root")
        if shutil.which("ip") is None:
            raise PodNetworkError("the `ip` command (iproute2) is not installed")
        self.directory.mkdir(parents=True, exist_ok=True)
        self.cidr = self._free_cidr()
        self._created = True
        try:
            self._owner_lock = _claim_netns(self.namespace)
            _ip("netns", "add", self.namespace)
            _ip("link", "add", self.host_veth, "type", "veth", "peer", "name", self.pod_veth)
            _ip("link", "set", self.pod_veth, "netns", self.namespace)
            _ip("addr", "add", f"{HOST_VETH_ADDRESS}/32", "dev", self.host_veth)
            _ip("link", "set", self.host_veth, "up")
            _ip("route", "add", self.cidr, "dev", self.host_veth, "src", HOST_VETH_ADDRESS)
            inside = ["-n", self.namespace]
            _ip(*inside, "link", "set", "lo", "up")
            _ip(*inside, "link", "set", self.pod_veth, "up")
            _ip(*inside, "route", "add", f"{HOST_VETH_ADDRESS}/32", "dev", self.pod_veth)
            _ip(*inside, "route", "add", "local", self.cidr, "dev", "lo")
            self.verify()
            self._serve_channel()
        except BaseException:
            self.destroy()
            raise
        return self

    def _free_cidr(self) -> str:
        for candidate in self.parent_cidr.subnets(new_prefix=20):
            probe = str(candidate[1])
            if "dev rsoh" not in _ip("route", "get", probe):
                return str(candidate)
        raise PodNetworkError(f"every /20 of {self.parent_cidr} is taken by another pod network")

    def pod_ip(self, index: int = 1) -> str:
        """The ``index``-th address of the pod CIDR (for listeners and tests)."""
        return str(ipaddress.ip_network(self.cidr)[index])

    def verify(self) -> None:
        """Refuse to go on unless pod IPs route into our veth (and stay off everything else)."""
        network = ipaddress.ip_network(self.cidr)
        for probe in (network[1], network[network.num_addresses // 2], network[-2]):
            route = _ip("route", "get", str(probe))
            if f"dev {self.host_veth}" not in route:
                raise PodNetworkError(f"{probe} does not route into {self.host_veth}: {route!r}")
        done = subprocess.run(
            ["ip", "-n", self.namespace, "route", "get", "1.1.1.1"],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if done.returncode == 0:
            raise PodNetworkError(f"namespace {self.namespace} can reach outside: {done.stdout!r}")

    def spawn(
        self, args: Sequence[str], *, log_path: pathlib.Path | None = None,
        env: Mapping[str, str] | None = None,
    ) -> subprocess.Popen[bytes]:  # fmt: skip
        """Start ``args`` inside the namespace (own process group; stopped on destroy)."""
        name = pathlib.Path(args[0]).name
        log_path = log_path or self.directory / f"{name}-{len(self._procs)}.log"
        proc = _Process(name, ["ip", "netns", "exec", self.namespace, *args], log_path)
        proc.args[0] = shutil.which("ip") or "/usr/sbin/ip"
        proc.start(env)
        self._procs.append(proc)
        assert proc.popen is not None
        return proc.popen

    def connect(self, ip: str, port: int, timeout: float = 5.0) -> socket.socket:
        """A TCP connection from the host to a pod IP in this network (nothing else)."""
        if ipaddress.ip_address(ip) not in ipaddress.ip_network(self.cidr):
            raise PermissionError(f"{ip} is not in this pod network ({self.cidr})")
        self.connections.append((ip, port))
        return socket.create_connection((ip, port), timeout=timeout)

    # -- the Unix-socket channel ---------------------------------------------------------------

    def _serve_channel(self) -> None:
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(str(self.socket_path))
        server.listen(16)
        self._server = server
        threading.Thread(target=self._accept, name="podnet-channel", daemon=True).start()

    def _accept(self) -> None:
        server = self._server
        while server is not None:
            try:
                client, _ = server.accept()
            except OSError:
                return
            with self._lock:
                if self._last is not None:
                    with contextlib.suppress(OSError):
                        client.sendall(self._last)
                self._clients.append(client)

    def publish(self, message: Mapping[str, Any]) -> None:
        """Send ``message`` as one JSON line to every connected process."""
        line = (json.dumps(message, sort_keys=True) + "\n").encode()
        with self._lock:
            self._last = line
            for client in list(self._clients):
                try:
                    client.sendall(line)
                except OSError:
                    self._clients.remove(client)
                    client.close()

    def destroy(self) -> None:
        for proc in reversed(self._procs):
            proc.stop(timeout=5.0)
        self._procs.clear()
        server, self._server = self._server, None
        if server is not None:
            with contextlib.suppress(OSError):
                server.shutdown(socket.SHUT_RDWR)
            server.close()
        with self._lock:
            for client in self._clients:
                client.close()
            self._clients.clear()
        if self._created:
            # Deleting the namespace deletes its veth end, which takes the pair and the host route.
            subprocess.run(["ip", "netns", "del", self.namespace], capture_output=True, check=False)
            subprocess.run(["ip", "link", "del", self.host_veth], capture_output=True, check=False)
            self._created = False
        if self._owner_lock is not None:
            _release_netns(self.namespace, self._owner_lock)
            self._owner_lock = None


@contextlib.contextmanager
def running(options: Options) -> Iterator[ControlPlane]:
    """``with running(Options(...)) as cp:`` - start, yield, always stop."""
    cp = ControlPlane(options)
    try:
        yield cp.start()
    finally:
        cp.stop()


# -- stale pod networks ------------------------------------------------------------------------

NETNS_LOCK_DIR = pathlib.Path("/run/rso-controlplane")
"""Where each live :class:`PodNetwork` holds the lock ``<namespace>.lock`` (see its docstring)."""

_NETNS_NAME = re.compile(r"rso-[0-9a-f]{8}")
"""Exactly the namespace names :class:`PodNetwork` makes; nothing else is ever touched."""


def _claim_netns(name: str) -> int:
    """Take the ownership lock of namespace ``name`` (before it exists); return its fd."""
    NETNS_LOCK_DIR.mkdir(parents=True, exist_ok=True)
    fd = os.open(NETNS_LOCK_DIR / f"{name}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise PodNetworkError(
            f"the name {name} is already claimed by another pod network"
        ) from None
    os.write(fd, f"{os.getpid()}\n".encode())
    return fd


def _release_netns(name: str, fd: int) -> None:
    """Give up the ownership lock of ``name`` (after the namespace is deleted)."""
    (NETNS_LOCK_DIR / f"{name}.lock").unlink(missing_ok=True)
    os.close(fd)


def _lock_if_orphaned(name: str) -> int | None:
    """The lock of ``name`` if its lock file exists and no process holds it (caller closes
    the fd), else ``None``: a live harness owns it, or it has no lock file (made by a harness
    that predates the lock, or by something else) and is not ours to judge."""
    try:
        fd = os.open(NETNS_LOCK_DIR / f"{name}.lock", os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def _netns_owner(name: str) -> str:
    """``"live"`` (a running harness holds its lock), ``"gone"`` (lock file, no holder) or
    ``"unknown"`` (no lock file)."""
    if not (NETNS_LOCK_DIR / f"{name}.lock").exists():
        return "unknown"
    fd = _lock_if_orphaned(name)
    if fd is None:
        return "live"
    os.close(fd)
    return "gone"


def _pod_network_names() -> list[str]:
    """The network namespaces named like a :class:`PodNetwork`'s, sorted."""
    done = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False)
    names = (line.split()[0] for line in done.stdout.splitlines() if line.strip())
    return sorted(name for name in names if _NETNS_NAME.fullmatch(name))


def _reap_stale_pod_networks() -> list[str]:
    """Delete every ``rso-<8 hex>`` namespace (with its host veth) whose harness is gone.

    Gone means: its lock file exists and nobody holds the lock; we hold it while
    deleting. A namespace of a live harness, one without a lock file, or one that still
    has processes inside is left alone (and the last two are reported). Lock files left
    without a namespace are removed too. Needs root; returns one line per thing done or
    left.
    """
    report: list[str] = []
    names = _pod_network_names()
    for name in names:
        fd = _lock_if_orphaned(name)
        if fd is None:
            if not (NETNS_LOCK_DIR / f"{name}.lock").exists():
                report.append(
                    f"left pod network {name}: no owner lock, so not ours to judge "
                    f"(`ip netns del {name}` removes it)"
                )
            continue
        try:
            inside = subprocess.run(
                ["ip", "netns", "pids", name], capture_output=True, text=True, check=False
            )
            if inside.returncode != 0 or inside.stdout.split():
                why = (
                    inside.stderr.strip()
                    or f"processes {' '.join(inside.stdout.split())} are in it"
                )
                report.append(f"left pod network {name}: its harness is gone, but {why}")
                continue
            deleted = subprocess.run(
                ["ip", "netns", "del", name], capture_output=True, text=True, check=False
            )
            if deleted.returncode != 0:
                report.append(f"could not remove pod network {name}: {deleted.stderr.strip()}")
                continue
            host_veth = "rsoh" + name.removeprefix("rso-")
            subprocess.run(["ip", "link", "del", host_veth], capture_output=True, check=False)
            (NETNS_LOCK_DIR / f"{name}.lock").unlink(missing_ok=True)
            report.append(f"removed stale pod network {name}")
        finally:
            os.close(fd)
    for lock in sorted(NETNS_LOCK_DIR.glob("rso-*.lock")):
        name = lock.name.removesuffix(".lock")
        if _NETNS_NAME.fullmatch(name) and name not in names:
            fd = _lock_if_orphaned(name)
            if fd is not None:
                lock.unlink(missing_ok=True)
                os.close(fd)
    return report


# -- the command line --------------------------------------------------------------------------


class _Interrupted(BaseException):
    """SIGINT or SIGTERM arrived while the control plane was still starting."""


def _main(argv: Sequence[str] | None = None) -> int:
    """``python -m runtime.testing.controlplane up|reap`` (what ``make cluster-up`` runs).

    ``up`` first removes stale pod networks (as ``reap``), then starts etcd,
    kube-apiserver, kube-controller-manager, kube-scheduler, kwok with ``--nodes``
    fake nodes and the pod network (unless ``--no-pod-network``), prints
    ``control plane <version> up at <url>`` and then ``KUBECONFIG=<path>`` - that
    line means ready - and runs until SIGINT or SIGTERM, then stops it all and exits 0.
    A component that fails to start, or a signal during start-up, stops what was
    started and exits 1 with an ``error:`` line (a failing component's log tail
    included). ``--state-out FILE`` is written before the ``KUBECONFIG=`` line, as
    ``key=value`` lines: ``pid`` (this process), ``pids`` (the components),
    ``netns`` (the pod network's namespace, or empty) and ``workdir`` (the temp dir
    every component's command line names) - what a supervisor needs to clean up after
    a harness it had to SIGKILL (see ``hack/cluster.sh``).

    ``reap`` removes the ``rso-*`` namespaces whose harness died without removing them
    (see :class:`PodNetwork`) and prints what it did; it never touches a namespace a
    live harness holds. Without root it does nothing.
    """
    import argparse

    parser = argparse.ArgumentParser(prog="python -m runtime.testing.controlplane")
    parser.add_argument("command", choices=["up", "reap"])
    parser.add_argument("--bin-dir", type=pathlib.Path, default=default_bin_dir())
    parser.add_argument("--kubeconfig-out", type=pathlib.Path, default=None,
                        help="also copy the kubeconfig here")  # fmt: skip
    parser.add_argument("--state-out", type=pathlib.Path, default=None,
                        help="once up, write pid, pids, netns, workdir here")  # fmt: skip
    parser.add_argument("--nodes", type=int, default=1)
    parser.add_argument("--crd-dir", type=pathlib.Path, action="append", default=[])
    parser.add_argument("--no-pod-network", action="store_true")
    args = parser.parse_args(argv)
    root = os.geteuid() == 0
    if args.command == "reap":
        for line in _reap_stale_pod_networks() if root else []:
            print(line, flush=True)
        return 0
    if args.bin_dir is None:
        parser.error(
            f"--bin-dir is required (or set ${BIN_DIR_ENV} or ${ENVTEST_ENV}, or build "
            "the binaries with `python -m runtime.testing.assets --all`)"
        )

    stop = threading.Event()
    starting = [True]

    def on_signal(signum: int, _frame: object) -> None:
        first = not stop.is_set()
        stop.set()
        if first and starting[0]:
            raise _Interrupted(signal.Signals(signum).name)

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, on_signal)
    options = Options(
        bin_dir=args.bin_dir, controller_manager=True, scheduler=True, kwok=True,
        nodes=args.nodes, pod_network=not args.no_pod_network, crd_dirs=args.crd_dir,
    )  # fmt: skip
    try:
        if root and options.pod_network:
            for line in _reap_stale_pod_networks():
                print(line, flush=True)
        with running(options) as cp:
            assert cp.kubeconfig is not None
            kubeconfig = cp.kubeconfig
            if args.kubeconfig_out:
                args.kubeconfig_out.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(cp.kubeconfig, args.kubeconfig_out)
                kubeconfig = args.kubeconfig_out
            if args.state_out:
                _write_state(args.state_out, cp)
            version = cp.request("GET", "/version")["gitVersion"]
            print(f"control plane {version} up at {cp.api_url}", flush=True)
            print(f"KUBECONFIG={kubeconfig}", flush=True)
            starting[0] = False
            stop.wait()
        print("control plane stopped", flush=True)
    except _Interrupted as exc:
        print(f"error: {exc} during start-up; stopped everything it started", flush=True)
        return 1
    except ControlPlaneError as exc:
        print(f"error: {exc}", flush=True)
        return 1
    finally:
        if args.kubeconfig_out:
            args.kubeconfig_out.unlink(missing_ok=True)
    return 0


def _write_state(path: pathlib.Path, cp: ControlPlane) -> None:
    """``up --state-out``: the ``key=value`` lines described in :func:`_main`, atomically."""
    pids = [str(proc.popen.pid) for proc in cp._procs if proc.popen is not None]
    lines = [
        f"pid={os.getpid()}",
        f"pids={' '.join(pids)}",
        f"netns={cp.pod_network.namespace if cp.pod_network else ''}",
        f"workdir={cp.dir}",
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.write_text("\n".join(lines) + "\n")
    partial.replace(path)


if __name__ == "__main__":
    raise SystemExit(_main())
