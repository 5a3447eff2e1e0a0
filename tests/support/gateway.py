"""A real Gateway API implementation for tests: Traefik, run as a host process against the
harness's control plane.

:func:`running` (``with gateway.running(control_plane, tmp_dir) as traefik:``):

1. installs the Gateway API standard-channel CRDs (``hack/gatewayapi/install.sh``, v1.4.1)
   with :meth:`ControlPlane.install_crds <runtime.testing.controlplane.ControlPlane.install_crds>`
   and creates the GatewayClass :data:`GATEWAY_CLASS` (controller :data:`CONTROLLER_NAME`)
   unless it exists;
2. starts Traefik (``hack/traefik/install.sh``, v3.6.12, built once from its Go module) with
   its Kubernetes Gateway provider, authenticated by the harness's admin kubeconfig (passed as
   ``$KUBECONFIG``, which Traefik prefers to endpoint/token flags; it carries a client
   certificate, which those flags cannot give);
3. waits until Traefik answers its ping and has accepted the GatewayClass, and stops it
   (its own process group) on exit.

Listener ports: Traefik gives a Gateway listener the entry point whose address ends in
``:<listener port>``. The operator's Gateways listen on port 80, so the ``web`` entry point
binds port 80 - on a loopback address of its own, the first of ``127.0.0.2`` ...
``127.0.0.254`` where port 80 is free (the whole of ``127.0.0.0/8`` is local on Linux;
binding port 80 needs root, as the pod network does). :attr:`Traefik.url` is that entry point;
Gateways get it as their status address (``statusaddress.ip``), so they turn Programmed.
A second entry point, ``ping``, on a free ``127.0.0.1`` port serves only ``/ping``; no API,
dashboard or metrics are enabled. Anonymous usage reports and version checks are off.

Backends: Traefik sends traffic for a Service ``backendRef`` to the ready addresses of its
EndpointSlices (kube-controller-manager keeps them; pod IPs live in the pod network, which
the host routes into its namespace), never to the ClusterIP, as long as
``nativeLBByDefault`` stays off (it is passed explicitly) and no Service carries Traefik's
``traefik.io/service.nativelb`` annotation. Its access log (JSON) records every upstream it
dialled: :meth:`Traefik.upstreams` reads them, and on a clean exit :func:`running` fails if
any lies outside the pod network (the network rule: tests reach 127.0.0.0/8 and pod IPs only).
Traefik's environment is built from scratch (``PATH``, ``HOME``, ``KUBECONFIG``), so no
``*_PROXY`` variable can send its traffic elsewhere.

Logs go to ``traefik.log`` and ``access.log`` in the directory given. A missing binary or CRD
is a test failure that names the installer (``tests.support.tools.built``), never a skip.

One Traefik per control plane and GatewayClass at a time: two would both program every
Gateway of the class. :func:`conditions` and :func:`parent_conditions` read the statuses
tests wait for.
"""

from __future__ import annotations

import contextlib
import errno
import ipaddress
import json
import os
import pathlib
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from typing import Any

from runtime.testing import controlplane, process
from tests.support import tools

__all__ = [
    "CONTROLLER_NAME",
    "GATEWAY_CLASS",
    "GatewayError",
    "Traefik",
    "conditions",
    "crd_dir",
    "ensure_gateway_class",
    "parent_conditions",
    "running",
    "traefik_binary",
]

GATEWAY_CLASS = "traefik"
"""The GatewayClass :func:`running` creates (and tests' Gateways name)."""

CONTROLLER_NAME = "traefik.io/gateway-controller"
"""Traefik's controller name: it serves GatewayClasses with this ``spec.controllerName``."""

LISTENER_PORT = 80
"""The Gateway listener port the ``web`` entry point serves (the operator's Gateways use 80)."""

_GATEWAY_CLASSES = "/apis/gateway.networking.k8s.io/v1/gatewayclasses"


class GatewayError(RuntimeError):
    """Traefik did not start or become ready, or dialled an address it must not."""


def traefik_binary() -> pathlib.Path:
    """Build (or reuse) Traefik; fail the calling test with the installer's output if it fails."""
    return tools.built("hack/traefik/install.sh")


def crd_dir() -> pathlib.Path:
    """Fetch (or reuse) the Gateway API standard-channel CRDs; fail the test if that fails."""
    return tools.built("hack/gatewayapi/install.sh")


def conditions(status: Mapping[str, Any] | None) -> dict[str, str]:
    """``{type: status}`` of a status's ``conditions`` (a Gateway's, a GatewayClass's).

    >>> conditions({"conditions": [{"type": "Accepted", "status": "True"},
    ...                            {"type": "Programmed", "status": "False"}]})
    {'Accepted': 'True', 'Programmed': 'False'}
    >>> conditions(None)
    {}
    """
    return {str(c["type"]): str(c["status"]) for c in (status or {}).get("conditions") or []}


def parent_conditions(route: Mapping[str, Any], gateway: str) -> dict[str, str]:
    """``{type: status}`` of a route's ``status.parents`` entry for the Gateway named ``gateway``
    (empty while no controller has written one).

    >>> route = {"status": {"parents": [{"parentRef": {"name": "gw"},
    ...     "controllerName": CONTROLLER_NAME,
    ...     "conditions": [{"type": "ResolvedRefs", "status": "True"}]}]}}
    >>> parent_conditions(route, "gw"), parent_conditions(route, "other")
    ({'ResolvedRefs': 'True'}, {})
    """
    for parent in (route.get("status") or {}).get("parents") or []:
        if (parent.get("parentRef") or {}).get("name") == gateway:
            return conditions(parent)
    return {}


def _free_loopback(port: int, skip: set[str]) -> str:
    """The first ``127.0.0.x`` (x = 2 ... 254, not in ``skip``) where ``port`` can be bound now."""
    for last in range(2, 255):
        address = f"127.0.0.{last}"
        if address in skip:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            # As Go's listeners do: a closed connection's TIME_WAIT does not hold the port.
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind((address, port))
            except OSError as exc:
                if exc.errno in (errno.EADDRINUSE, errno.EADDRNOTAVAIL):
                    continue
                raise GatewayError(f"cannot bind {address}:{port}: {exc} (root is needed)") from exc
            return address
    raise GatewayError(f"port {port} is taken on every address 127.0.0.2-254")


class Traefik:
    """One Traefik process serving the Gateway API (see the module docstring)."""

    def __init__(
        self,
        control_plane: controlplane.ControlPlane,
        directory: pathlib.Path,
        *,
        binary: pathlib.Path,
        gateway_class: str = GATEWAY_CLASS,
        log_level: str = "INFO",
        start_timeout: float = 60.0,
    ) -> None:
        if control_plane.kubeconfig is None:
            raise GatewayError("the control plane is not running (no kubeconfig)")
        if not os.access(binary, os.X_OK):
            raise GatewayError(f"traefik binary {binary} is missing; run hack/traefik/install.sh")
        self.control_plane = control_plane
        self.directory = pathlib.Path(directory)
        self.binary = pathlib.Path(binary)
        self.gateway_class = gateway_class
        self.log_level = log_level
        self.start_timeout = start_timeout
        self.address = ""
        """The loopback address of the ``web`` entry point (and of every Gateway's status)."""
        self.ping_port = 0
        self.log_path = self.directory / "traefik.log"
        self.access_log_path = self.directory / "access.log"
        self.child: process.ChildProcess | None = None

    @property
    def url(self) -> str:
        """``http://<address>`` of the ``web`` entry point (port :data:`LISTENER_PORT`)."""
        return f"http://{self.address}:{LISTENER_PORT}"

    def flags(self) -> list[str]:
        """Traefik's command-line flags (for :attr:`address` and :attr:`ping_port`)."""
        return [
            f"--entrypoints.web.address={self.address}:{LISTENER_PORT}",
            f"--entrypoints.ping.address=127.0.0.1:{self.ping_port}",
            # Stopping waits this long for open connections (default 10 s).
            "--entrypoints.web.transport.lifecycle.gracetimeout=1s",
            "--entrypoints.ping.transport.lifecycle.gracetimeout=1s",
            "--ping=true",
            "--ping.entrypoint=ping",
            "--providers.kubernetesgateway=true",
            f"--providers.kubernetesgateway.statusaddress.ip={self.address}",
            "--providers.kubernetesgateway.nativelbbydefault=false",
            "--global.checknewversion=false",
            "--global.sendanonymoususage=false",
            f"--log.level={self.log_level}",
            f"--log.filepath={self.log_path}",
            "--log.noColor=true",
            "--accesslog=true",
            f"--accesslog.filepath={self.access_log_path}",
            "--accesslog.format=json",
        ]

    def start(self, attempts: int = 3) -> Traefik:
        """Start Traefik and wait until it is ready; on a lost race for port 80, try another
        address. Stops it again if it does not become ready."""
        self.directory.mkdir(parents=True, exist_ok=True)
        tried: set[str] = set()
        for attempt in range(1, attempts + 1):
            self.address = _free_loopback(LISTENER_PORT, tried)
            tried.add(self.address)
            [self.ping_port] = controlplane.free_ports(1)
            env = {
                "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                "HOME": os.environ.get("HOME", "/root"),
                "KUBECONFIG": str(self.control_plane.kubeconfig),
            }
            self.child = process.ChildProcess(
                [str(self.binary), *self.flags()],
                log_path=self.directory / "traefik.out", name="traefik", env=env,
            )  # fmt: skip
            try:
                self._wait_ready()
                return self
            except GatewayError:
                self.stop()
                if "address already in use" not in self.log_tail() or attempt == attempts:
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.start_timeout
        what = "its /ping"
        while True:
            assert self.child is not None
            if self.child.popen.poll() is not None:
                raise GatewayError(
                    f"traefik exited with code {self.child.popen.returncode}; "
                    f"last lines of {self.log_path}:\n{self.log_tail()}"
                )
            if self._pinged():
                what = f"GatewayClass {self.gateway_class} Accepted"
                if self._class_accepted():
                    return
            if time.monotonic() > deadline:
                raise GatewayError(
                    f"traefik: {what} not ready after {self.start_timeout} s; "
                    f"last lines of {self.log_path}:\n{self.log_tail()}"
                )
            time.sleep(0.2)

    def _pinged(self) -> bool:
        try:
            url = f"http://127.0.0.1:{self.ping_port}/ping"
            with urllib.request.urlopen(url, timeout=2) as answer:
                return bool(answer.status == 200)
        except (OSError, urllib.error.URLError):
            return False

    def _class_accepted(self) -> bool:
        found = self.control_plane.request("GET", f"{_GATEWAY_CLASSES}/{self.gateway_class}")
        return conditions(found.get("status")).get("Accepted") == "True"

    def log_tail(self, lines: int = 30) -> str:
        """The last ``lines`` of Traefik's log (and of its stdout/stderr, where start-up
        errors go before the log file is open)."""
        early = process.tail(self.directory / "traefik.out", lines)
        return "\n".join(filter(None, [early, process.tail(self.log_path, lines)]))

    def upstreams(self) -> list[str]:
        """The upstream ``host:port`` of every request in the access log, in order (requests
        Traefik answered itself, e.g. 404 for no route, have none)."""
        found = []
        try:
            lines = self.access_log_path.read_text(errors="replace").splitlines()
        except FileNotFoundError:
            return []
        for line in lines:
            with contextlib.suppress(ValueError):
                address = json.loads(line).get("ServiceAddr")
                if address:
                    found.append(str(address))
        return found

    def check_upstreams(self, cidr: str) -> None:
        """:class:`GatewayError` if Traefik dialled any upstream outside ``cidr``."""
        network = ipaddress.ip_network(cidr)
        outside = {
            u for u in self.upstreams() if ipaddress.ip_address(u.rsplit(":", 1)[0]) not in network
        }
        if outside:
            raise GatewayError(f"traefik dialled upstreams outside {cidr}: {sorted(outside)}")

    def stop(self) -> None:
        """SIGTERM (then SIGKILL) to Traefik's process group."""
        child, self.child = self.child, None
        if child is not None:
            child.stop(timeout=10.0)


def ensure_gateway_class(control_plane: controlplane.ControlPlane, name: str) -> None:
    """Create the GatewayClass ``name`` for :data:`CONTROLLER_NAME` unless it exists (one
    that exists for another controller is an error: Traefik would ignore it)."""
    body = {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "GatewayClass",
        "metadata": {"name": name},
        "spec": {"controllerName": CONTROLLER_NAME},
    }
    try:
        control_plane.request("POST", _GATEWAY_CLASSES, body)
    except controlplane.ApiError as exc:
        if exc.status != 409:
            raise
        found = control_plane.request("GET", f"{_GATEWAY_CLASSES}/{name}")
        if found["spec"]["controllerName"] != CONTROLLER_NAME:
            raise GatewayError(
                f"GatewayClass {name} exists for {found['spec']['controllerName']}"
            ) from exc


@contextlib.contextmanager
def running(
    control_plane: controlplane.ControlPlane,
    directory: pathlib.Path,
    *,
    gateway_class: str = GATEWAY_CLASS,
    binary: pathlib.Path | None = None,
    crds: pathlib.Path | None = None,
    log_level: str = "INFO",
) -> Iterator[Traefik]:
    """CRDs, GatewayClass, Traefik started and ready; Traefik stopped on exit (the CRDs and
    the GatewayClass stay: other tests of the session may use them). ``binary`` and ``crds``
    default to what the installers give."""
    control_plane.install_crds(crds or crd_dir())
    ensure_gateway_class(control_plane, gateway_class)
    traefik = Traefik(
        control_plane, directory, binary=binary or traefik_binary(),
        gateway_class=gateway_class, log_level=log_level,
    )  # fmt: skip
    traefik.start()
    try:
        yield traefik
    finally:
        traefik.stop()
    network = control_plane.pod_network
    traefik.check_upstreams(network.cidr if network else controlplane.DEFAULT_POD_CIDR)
