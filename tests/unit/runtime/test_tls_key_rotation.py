"""A rotation that changes the key type (RSA -> ECDSA -> RSA) serves only the newest pair:
:class:`runtime.tls.Reloader` on a live asyncio server, the manager's secure ``/metrics``
and the webhook server, each asked by clients that prefer ECDSA, prefer RSA/RSA-PSS, or
offer only one of the two (TLS 1.3 signature algorithms through ``openssl s_client
-sigalgs``; TLS 1.2 cipher suites through :meth:`ssl.SSLContext.set_ciphers`).

An OpenSSL context keeps one certificate per key type: loading each rotated pair into the
same context left the previous pair of the other type in it, served to a client whose
offer favours that type. A client offering the newest pair's type must get the newest
pair; one that offers only the other type must get no certificate at all."""

from __future__ import annotations

import asyncio
import pathlib
import re
import ssl
import subprocess
from collections.abc import Awaitable, Callable

import pytest

from runtime import manager, tls
from runtime.testing import fake
from runtime.webhook import server
from tests.unit import helpers

ECDSA_FIRST = "ecdsa_secp256r1_sha256:rsa_pss_rsae_sha256:rsa_pkcs1_sha256"
RSA_FIRST = "rsa_pss_rsae_sha256:rsa_pkcs1_sha256:ecdsa_secp256r1_sha256"
RSA_ONLY = "rsa_pss_rsae_sha256:rsa_pkcs1_sha256"
ECDSA_ONLY = "ecdsa_secp256r1_sha256"
TLS12_RSA = "ECDHE-RSA-AES128-GCM-SHA256"
TLS12_ECDSA = "ECDHE-ECDSA-AES128-GCM-SHA256"

_PEM = re.compile(r"-----BEGIN CERTIFICATE-----.+?-----END CERTIFICATE-----\n?", re.S)


def rsa_pair(ca: tls.CA, directory: pathlib.Path, work: pathlib.Path) -> tls.Pair:
    """An RSA serving certificate for 127.0.0.1 signed by ``ca``, written over
    ``directory``'s ``tls.crt``/``tls.key`` (key first, each by rename, as
    :func:`runtime.tls.issue` writes an ECDSA one)."""
    work.mkdir(parents=True, exist_ok=True)
    (work / "ext").write_text(
        "keyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n"
        "subjectAltName=IP:127.0.0.1\n"
    )
    tls.openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "tls.key", "-out", "tls.csr",
                "-subj", "/CN=127.0.0.1", cwd=work)  # fmt: skip
    tls.openssl(
        "x509", "-req", "-in", "tls.csr", "-CA", str(ca.cert.resolve()),
        "-CAkey", str(ca.key.resolve()), "-set_serial", "0x" + work.name.encode().hex(),
        "-days", "1", "-extfile", "ext", "-out", "tls.crt",
        cwd=work,
    )  # fmt: skip
    pair = tls.Pair(directory / "tls.crt", directory / "tls.key")
    for name, target in (("tls.key", pair.key), ("tls.crt", pair.cert)):
        staged = directory / f".{name}.new"
        staged.write_bytes((work / name).read_bytes())
        staged.replace(target)
    return pair


def der(pem_text: str) -> bytes:
    return ssl.PEM_cert_to_DER_cert(pem_text)


def der_of(cert: pathlib.Path) -> bytes:
    return der(cert.read_text())


def sigalgs_client(port: int, sigalgs: str) -> bytes | None:
    """The certificate (DER) a TLS 1.3 client offering ``sigalgs``, in that order, is
    served at ``127.0.0.1:port``; None when the handshake fails."""
    done = subprocess.run(
        ["openssl", "s_client", "-connect", f"127.0.0.1:{port}", "-tls1_3",
         "-sigalgs", sigalgs],
        input="", capture_output=True, text=True, timeout=20, check=False,
    )  # fmt: skip
    found = _PEM.search(done.stdout)
    return der(found.group(0)) if found else None


def cipher_client(port: int, ciphers: str) -> bytes | None:
    """The certificate (DER) a TLS 1.2 client offering only ``ciphers`` is served; None
    when the handshake fails."""
    import socket

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.maximum_version = ssl.TLSVersion.TLSv1_2
    context.set_ciphers(ciphers)
    try:
        with (
            socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
            context.wrap_socket(raw) as conn,
        ):
            return conn.getpeercert(binary_form=True)
    except (ssl.SSLError, ConnectionError):
        return None


CLIENTS: dict[str, tuple[Callable[[int, str], bytes | None], str, str]] = {
    # name: (client, its offer, the key type it needs the server to have: any/rsa/ecdsa)
    "tls1.3 ecdsa first": (sigalgs_client, ECDSA_FIRST, "any"),
    "tls1.3 rsa-pss first": (sigalgs_client, RSA_FIRST, "any"),
    "tls1.3 rsa only": (sigalgs_client, RSA_ONLY, "rsa"),
    "tls1.3 ecdsa only": (sigalgs_client, ECDSA_ONLY, "ecdsa"),
    "tls1.2 rsa suites": (cipher_client, TLS12_RSA, "rsa"),
    "tls1.2 ecdsa suites": (cipher_client, TLS12_ECDSA, "ecdsa"),
}


async def served(port: int) -> dict[str, bytes | None]:
    """What each of :data:`CLIENTS` is served now."""
    seen = {}
    for name, (client, offer, _) in CLIENTS.items():
        seen[name] = await asyncio.to_thread(client, port, offer)
    return seen


async def rotate_through_key_types(
    directory: pathlib.Path, port: int, reload: Callable[[], Awaitable[None]]
) -> None:
    """With an ECDSA pair (``tls.crt``/``tls.key``, CA ``ca.crt``/``ca.key``) in
    ``directory`` being served at ``port``: rotate RSA -> ECDSA -> RSA, ``reload()``
    after each rotation, and check what every client is served: the newest pair when it
    offers its key type, else nothing (never an older pair)."""
    ca = tls.CA(directory / "ca.crt", directory / "ca.key")
    steps: list[tuple[str, Callable[[], tls.Pair]]] = [
        ("rsa-1", lambda: rsa_pair(ca, directory, directory / "work-rsa-1")),
        ("ecdsa-2", lambda: tls.issue(ca, directory, ip_addresses=["127.0.0.1"])),
        ("rsa-3", lambda: rsa_pair(ca, directory, directory / "work-rsa-2")),
    ]
    names = {await asyncio.to_thread(der_of, directory / "tls.crt"): "ecdsa-0"}
    for step, make in steps:
        pair = await asyncio.to_thread(make)
        names[await asyncio.to_thread(der_of, pair.cert)] = step
        await reload()
        seen = {
            client: "nothing" if cert is None else names.get(cert, "an unknown certificate")
            for client, cert in (await served(port)).items()
        }
        kind = step.partition("-")[0]
        expected = {
            client: step if needs in ("any", kind) else "nothing"
            for client, (_, _, needs) in CLIENTS.items()
        }
        assert (step, seen) == (step, expected)


async def test_the_reloader_serves_only_the_newest_pair_across_key_types(
    tmp_path: pathlib.Path,
) -> None:
    _, pair = await asyncio.to_thread(tls.self_signed, tmp_path, ip_addresses=["127.0.0.1"])
    reloader = tls.Reloader(pair.cert, pair.key)

    async def close_at_once(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.close()

    listening = await asyncio.start_server(close_at_once, "127.0.0.1", 0, ssl=reloader.context)
    port = listening.sockets[0].getsockname()[1]

    async def reload() -> None:
        assert await asyncio.to_thread(reloader.reload)

    try:
        await rotate_through_key_types(tmp_path, port, reload)
    finally:
        listening.close()
        await listening.wait_closed()
    assert reloader.reloads == 3


async def until_served(port: int, cert: pathlib.Path) -> None:
    """Until a client offering both key types is served ``cert`` (a polled reload)."""

    def now() -> bool:
        return sigalgs_client(port, ECDSA_FIRST) == der_of(cert)

    for _ in range(200):
        if await asyncio.to_thread(now):
            return
        await asyncio.sleep(0.05)
    pytest.fail(f"{cert} was never served")


async def test_the_metrics_server_serves_only_the_newest_pair_across_key_types(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    await asyncio.to_thread(tls.self_signed, tmp_path, ip_addresses=["127.0.0.1"])
    monkeypatch.setattr(manager, "_CERT_POLL", 0.05)
    mgr = manager.Manager(fake.FakeClient(), manager.Options(  # type: ignore[arg-type]
        name="t", metrics_bind_address="127.0.0.1:0", health_probe_bind_address="0",
        metrics_secure=True, metrics_cert_dir=str(tmp_path)))  # fmt: skip
    stop = asyncio.Event()
    task = asyncio.create_task(mgr.start(stop))
    try:
        _, port = await helpers.eventually(lambda: mgr.metrics_address, what="serving")
        await rotate_through_key_types(
            tmp_path, port, lambda: until_served(port, tmp_path / "tls.crt")
        )
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)


async def test_the_webhook_server_serves_only_the_newest_pair_across_key_types(
    tmp_path: pathlib.Path,
) -> None:
    srv = server.Server(server.Options(
        bind_address="127.0.0.1:0", cert_dir=tmp_path, reload_interval=0.05,
        self_signed=server.SelfSigned(ip_addresses=["127.0.0.1"]),
    ))  # fmt: skip
    stop = asyncio.Event()
    task = asyncio.create_task(srv.start(stop))
    try:
        _, port = await helpers.eventually(lambda: srv.address, what="serving")
        await rotate_through_key_types(
            tmp_path, port, lambda: until_served(port, tmp_path / "tls.crt")
        )
        assert await srv.serving()
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)
