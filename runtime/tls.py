"""Serving certificates: make a self-signed CA and certificates it signs, and serve
certificate files that are reloaded when they change on disk (rotation).

Generation uses the ``openssl`` command (OpenSSL 1.1.1 or newer: ``-addext``), so the
framework needs no cryptography library; :class:`TLSError` says so when it is missing.
Keys made here are ECDSA P-256; :class:`Reloader` serves pairs of any key type.

- :func:`new_ca` writes ``ca.crt`` and ``ca.key`` (a CA certificate: ``CA:TRUE``,
  ``keyCertSign``) into a directory.
- :func:`issue` signs a serving certificate (``serverAuth``) for DNS names and IP
  addresses with a CA and writes it as ``tls.crt``/``tls.key`` (names as
  controller-runtime's defaults). Each file is written to a temporary name and renamed
  over the old one, so a reader sees either the old or the new file, never half of one
  (the two files are still two renames: :class:`Reloader` tolerates a mismatched pair).
- :func:`self_signed` does both into one directory.
- :func:`openssl` runs one ``openssl`` command (the harness in
  :mod:`runtime.testing.controlplane` makes its certificates with it too).
- :class:`Reloader` is an :class:`ssl.SSLContext` for a server whose certificate and key
  are read again from their files when their contents change (:meth:`Reloader.reload`,
  or :meth:`Reloader.watch` polling every ``interval`` seconds): new handshakes get the
  new pair, connections already open keep theirs. A pair that does not load (a half
  rotated pair, a missing file) leaves the previous one in use and is retried at the
  next poll. This works for files replaced in place, by rename, or by the symlink swap
  of a Kubernetes Secret volume (contents are compared, not modification times).

  **Only the newest pair is ever served**, whatever its key type and whatever the
  client offers. An OpenSSL context holds one certificate per key type, so loading each
  rotated pair into the live context would keep the previous pair of the other type:
  after an RSA -> ECDSA rotation a client offering only RSA (or RSA-PSS) signature
  algorithms, or only ``ECDHE-RSA`` suites, would still be served the old RSA
  certificate. Each pair that loads is therefore loaded into a **fresh** context, and
  the context handed to the server (:attr:`Reloader.context`, which a server such as
  asyncio's takes once, at start) holds no certificate of its own: its
  ``sni_callback``, which OpenSSL calls in every handshake (with a server name or
  without), switches the connection to the newest context. The switch is one
  attribute read, so a rotation is atomic for every handshake: old pair or new pair,
  never a mixture. The protocol versions (TLS 1.2 and newer) and cipher suites are
  the outer context's, the certificate and key the newest inner one's. Both servers that
  serve certificate files, the manager's secure ``/metrics`` (:mod:`runtime.manager`)
  and the webhook server (:mod:`runtime.webhook.server`), listen with
  :attr:`Reloader.context`.

>>> import tempfile, pathlib
>>> with tempfile.TemporaryDirectory() as d:
...     pair = self_signed(pathlib.Path(d), ip_addresses=["127.0.0.1"])
...     sorted(p.name for p in pathlib.Path(d).iterdir())
['ca.crt', 'ca.key', 'tls.crt', 'tls.key']
"""

from __future__ import annotations

import asyncio
import dataclasses
import ipaddress
import os
import pathlib
import secrets
import shutil
import ssl
import subprocess
import tempfile
from collections.abc import Sequence

import structlog

__all__ = ["CA", "Pair", "Reloader", "TLSError", "issue", "new_ca", "openssl", "self_signed"]

_EC = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]


def _server_context() -> ssl.SSLContext:
    """A server context accepting TLS 1.2 and newer (Python's default suites)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context


class TLSError(RuntimeError):
    """Generating or loading certificates failed (the message says which step and why)."""


@dataclasses.dataclass(frozen=True)
class CA:
    """A CA's certificate and key files."""

    cert: pathlib.Path
    key: pathlib.Path

    def bundle(self) -> bytes:
        """The PEM certificate, as a ``caBundle`` wants it (before base64)."""
        return self.cert.read_bytes()


@dataclasses.dataclass(frozen=True)
class Pair:
    """A certificate and its key, as files."""

    cert: pathlib.Path
    key: pathlib.Path


def openssl(*args: str, cwd: pathlib.Path) -> None:
    """Run ``openssl *args`` in ``cwd``; :class:`TLSError` when the command is missing
    or fails (the message ends with what it wrote to stderr)."""
    if shutil.which("openssl") is None:
        raise TLSError("the openssl command is not installed (e.g. apt-get install openssl)")
    done = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise TLSError(f"openssl {args[0]} failed: {done.stderr.strip()}")


def _serial() -> str:
    return "0x" + secrets.token_hex(16)


def _replace(source: pathlib.Path, target: pathlib.Path, mode: int) -> None:
    """Copy ``source`` next to ``target`` and rename it over ``target`` (atomic)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    staged = target.with_name(f".{target.name}.{secrets.token_hex(4)}")
    staged.write_bytes(source.read_bytes())
    staged.chmod(mode)
    os.replace(staged, target)


def new_ca(
    directory: pathlib.Path,
    *,
    common_name: str = "webhook-ca",
    days: int = 365,
    cert_name: str = "ca.crt",
    key_name: str = "ca.key",
) -> CA:
    """A new self-signed CA written to ``directory/cert_name`` and ``directory/key_name``."""
    directory = pathlib.Path(directory)
    with tempfile.TemporaryDirectory() as tmp:
        work = pathlib.Path(tmp)
        openssl(
            "req", "-x509", *_EC, "-keyout", "ca.key", "-out", "ca.crt", "-days", str(days),
            "-set_serial", _serial(), "-subj", f"/CN={common_name}",
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign",
            cwd=work,
        )  # fmt: skip
        ca = CA(directory / cert_name, directory / key_name)
        _replace(work / "ca.key", ca.key, 0o600)
        _replace(work / "ca.crt", ca.cert, 0o644)
    return ca


def issue(
    ca: CA,
    directory: pathlib.Path,
    *,
    dns_names: Sequence[str] = (),
    ip_addresses: Sequence[str] = (),
    days: int = 365,
    cert_name: str = "tls.crt",
    key_name: str = "tls.key",
) -> Pair:
    """A serving certificate for ``dns_names`` and ``ip_addresses`` signed by ``ca``,
    written to ``directory/cert_name`` and ``directory/key_name`` (key first)."""
    if not dns_names and not ip_addresses:
        raise ValueError("a serving certificate needs at least one DNS name or IP address")
    sans = [f"DNS:{name}" for name in dns_names]
    sans += [f"IP:{ipaddress.ip_address(ip)}" for ip in ip_addresses]
    subject = dns_names[0] if dns_names else str(ip_addresses[0])
    directory = pathlib.Path(directory)
    with tempfile.TemporaryDirectory() as tmp:
        work = pathlib.Path(tmp)
        (work / "ext").write_text(
            "basicConstraints=critical,CA:FALSE\n"
            "keyUsage=critical,digitalSignature\n"
            "extendedKeyUsage=serverAuth\n"
            f"subjectAltName={','.join(sans)}\n"
        )
        openssl("req", *_EC, "-keyout", "tls.key", "-out", "tls.csr", "-subj", f"/CN={subject}",
                cwd=work)  # fmt: skip
        openssl(
            "x509", "-req", "-in", "tls.csr", "-CA", str(ca.cert.resolve()),
            "-CAkey", str(ca.key.resolve()), "-set_serial", _serial(), "-days", str(days),
            "-extfile", "ext", "-out", "tls.crt",
            cwd=work,
        )  # fmt: skip
        pair = Pair(directory / cert_name, directory / key_name)
        _replace(work / "tls.key", pair.key, 0o600)
        _replace(work / "tls.crt", pair.cert, 0o644)
    return pair


def self_signed(
    directory: pathlib.Path,
    *,
    dns_names: Sequence[str] = (),
    ip_addresses: Sequence[str] = (),
    days: int = 365,
) -> tuple[CA, Pair]:
    """:func:`new_ca` and :func:`issue` into ``directory`` (``ca.*`` and ``tls.*``)."""
    ca = new_ca(directory, days=days)
    return ca, issue(ca, directory, dns_names=dns_names, ip_addresses=ip_addresses, days=days)


class Reloader:
    """A server :class:`ssl.SSLContext` that follows its certificate files (module docstring).

    Hand :attr:`context` to the server once: it stays the same object across rotations,
    while each pair that loads goes into a fresh context (:attr:`current`) which
    :attr:`context`'s ``sni_callback`` puts on every new connection. Any key type, and
    changes of key type, rotate cleanly.
    """

    def __init__(self, cert: pathlib.Path, key: pathlib.Path) -> None:
        self.cert = pathlib.Path(cert)
        self.key = pathlib.Path(key)
        self.context = _server_context()
        """What the server listens with: no certificate of its own, its ``sni_callback``
        switching each handshake to :attr:`current`."""
        self.current = self.context
        """The context holding the newest pair that loaded (a new object per rotation)."""
        self._loaded: tuple[bytes, bytes] | None = None
        self.reloads = 0
        """How many times a changed pair was loaded after the first."""
        self.log = structlog.get_logger("runtime.tls").bind(cert=str(self.cert))
        if not self.reload():
            raise TLSError(f"cannot load the certificate {self.cert} and key {self.key}")
        self.context.sni_callback = self._switch

    def _switch(
        self, connection: ssl.SSLObject | ssl.SSLSocket, server_name: str | None,
        context: ssl.SSLContext,
    ) -> None:  # fmt: skip
        """In a handshake (OpenSSL's servername callback): present the newest pair."""
        connection.context = self.current

    def reload(self) -> bool:
        """Load the files if their contents changed; False if they do not load (the
        previous pair stays in use), True otherwise."""
        try:
            current = (self.cert.read_bytes(), self.key.read_bytes())
        except OSError as exc:
            self.log.warning("certificate files unreadable; keeping the loaded pair",
                             error=str(exc))  # fmt: skip
            return False
        if current == self._loaded:
            return True
        # Load the bytes just read, from private copies (the files may change again
        # meanwhile), into a fresh context: a pair that fails halfway never reaches a
        # handshake, and no older pair of another key type lingers beside the new one.
        try:
            with tempfile.TemporaryDirectory() as tmp:
                cert, key = pathlib.Path(tmp, "tls.crt"), pathlib.Path(tmp, "tls.key")
                cert.write_bytes(current[0])
                key.touch(mode=0o600)
                key.write_bytes(current[1])
                fresh = _server_context()
                fresh.load_cert_chain(cert, key)
        except (ssl.SSLError, OSError) as exc:
            self.log.warning("certificate pair does not load; keeping the loaded one",
                             error=str(exc))  # fmt: skip
            return False
        self.current = fresh  # one assignment: each handshake sees the old or the new
        if self._loaded is not None:
            self.reloads += 1
            self.log.info("certificate reloaded")
        self._loaded = current
        return True

    async def watch(self, stop: asyncio.Event, interval: float = 10.0) -> None:
        """:meth:`reload` every ``interval`` seconds until ``stop`` is set."""
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), interval)
            except TimeoutError:
                self.reload()
