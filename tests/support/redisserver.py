"""A real Redis for GCS fault tolerance tests: ``redis-server`` 6.2 from
``hack/redis/install.sh`` (``make redis``: cached under the user's cache directory), run
inside the harness's pod network, listening at one pod-network IP only.

:func:`running` starts it in the shared pod namespace (:meth:`PodNetwork.spawn
<runtime.testing.controlplane.PodNetwork.spawn>`), bound to :func:`address_for` (an IP
of the pod CIDR's last /24, which no fake node allocates from; nodes take /24s from the
second one on) on :data:`PORT` (not 6379: the Ray simulator's listeners sit on
``0.0.0.0`` of that namespace). Pods run for real reach it through their gateway (the
shared namespace answers the whole CIDR); the test process reaches it only through
:meth:`PodNetwork.connect` (which refuses anything outside the CIDR). No persistence, no
protected mode, no password (the namespace has no route out and nothing but the pods and
the host can reach it).

:meth:`Redis.keys` and :meth:`Redis.count_by_namespace` read what Ray's GCS wrote: Ray
2.60 keeps each table in a hash named ``RAY<storage namespace>@<TABLE>`` (measured:
``RAY<ns>@NODE``, ``RAY<ns>@KV``, ...), which ``cleanup_redis_storage`` deletes.

``REDIS_SERVER=<path>`` uses another binary. One that cannot be installed is a failure
with the installer's output, never a skip.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from typing import Any

from runtime.testing import controlplane
from tests.support import tools

__all__ = ["PORT", "Redis", "RedisError", "address_for", "running"]

PORT = 6380
"""The port Redis listens on."""


class RedisError(RuntimeError):
    """Redis could not be started, or answered an error."""


def address_for(network: controlplane.PodNetwork) -> str:
    """An IP of ``network`` no pod gets: .200 of the CIDR's last /24.

    >>> class Net:
    ...     cidr = "198.18.16.0/20"
    >>> address_for(Net())  # type: ignore[arg-type]
    '198.18.31.200'
    """
    cidr = ipaddress.ip_network(network.cidr)
    return str(cidr.broadcast_address - 55)


class Redis:
    """One ``redis-server`` in the pod network (see the module docstring)."""

    def __init__(self, network: controlplane.PodNetwork, ip: str, port: int = PORT) -> None:
        self.network = network
        self.ip = ip
        self.port = port
        self._popen: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        """``<ip>:<port>``, as ``gcsFaultToleranceOptions.redisAddress`` takes it."""
        return f"{self.ip}:{self.port}"

    def start(self, timeout: float = 20.0) -> Redis:
        binary = os.environ.get("REDIS_SERVER") or str(tools.built("hack/redis/install.sh"))
        self._popen = self.network.spawn(
            [binary, "--bind", self.ip, "--port", str(self.port), "--save", "",
             "--appendonly", "no", "--protected-mode", "no", "--daemonize", "no"],
            log_path=self.network.directory / f"redis-{self.port}.log",
        )  # fmt: skip
        deadline = time.monotonic() + timeout
        while True:
            try:
                if self.command("PING") == "PONG":
                    return self
            except OSError:
                pass
            if self._popen.poll() is not None or time.monotonic() > deadline:
                raise RedisError(f"redis-server at {self.address} did not answer PING")
            time.sleep(0.2)

    def stop(self) -> None:
        """SIGKILL to the server (its own process group, started here)."""
        if self._popen is not None and self._popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._popen.pid, signal.SIGKILL)
            self._popen.wait(10)

    def alive(self) -> bool:
        return self._popen is not None and self._popen.poll() is None

    def command(self, *args: str) -> Any:
        """One command over RESP; its answer (str, int, list or None)."""
        with self.network.connect(self.ip, self.port) as sock:
            request = f"*{len(args)}\r\n" + "".join(f"${len(a.encode())}\r\n{a}\r\n" for a in args)
            sock.sendall(request.encode())
            return _read(sock.makefile("rb"))

    def keys(self) -> list[str]:
        answer = self.command("KEYS", "*")
        return sorted(str(k) for k in answer or [])

    def count_by_namespace(self) -> dict[str, int]:
        """Keys per Ray storage namespace (``RAY<ns>@<TABLE>``); others under ``""``."""
        counts: dict[str, int] = {}
        for key in self.keys():
            namespace = key[3:].rsplit("@", 1)[0] if key.startswith("RAY") and "@" in key else ""
            counts[namespace] = counts.get(namespace, 0) + 1
        return counts


def _read(stream: Any) -> Any:
    line = stream.readline()
    if not line:
        raise OSError("redis closed the connection")
    kind, rest = line[:1], line[1:].rstrip(b"\r\n").decode()
    if kind == b"+":
        return rest
    if kind == b"-":
        raise RedisError(rest)
    if kind == b":":
        return int(rest)
    if kind == b"$":
        size = int(rest)
        if size < 0:
            return None
        data = stream.read(size + 2)[:size]
        return data.decode()
    if kind == b"*":
        size = int(rest)
        return None if size < 0 else [_read(stream) for _ in range(size)]
    raise RedisError(f"unexpected answer {line!r}")


@contextlib.contextmanager
def running(cp: controlplane.ControlPlane, port: int = PORT) -> Iterator[Redis]:
    """A started :class:`Redis` in ``cp``'s pod network, stopped afterwards."""
    network = cp.pod_network
    if network is None:
        raise RedisError("the control plane has no pod network (Options.pod_network)")
    server = Redis(network, address_for(network), port).start()
    try:
        yield server
    finally:
        server.stop()
