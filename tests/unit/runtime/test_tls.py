"""``runtime/tls.py``: a self-signed CA and the serving certificates it signs (made with
the ``openssl`` command), and :class:`tls.Reloader`, a server context that follows its
certificate files and keeps the last pair that loaded."""

from __future__ import annotations

import asyncio
import doctest
import pathlib
import ssl
import subprocess
from typing import Any

import pytest

from runtime import tls


def text_of(cert: pathlib.Path) -> str:
    done = subprocess.run(["openssl", "x509", "-in", str(cert), "-noout", "-text"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    return done.stdout


def handshake(server: ssl.SSLContext, ca: pathlib.Path, hostname: str) -> dict[str, Any]:
    """One TLS handshake in memory: the certificate ``server`` presents, as a client
    trusting only ``ca`` and checking ``hostname`` sees it (ssl.SSLError otherwise)."""
    client = ssl.create_default_context(cafile=str(ca))
    c_in, c_out, s_in, s_out = ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO()
    c = client.wrap_bio(c_in, c_out, server_hostname=hostname)
    s = server.wrap_bio(s_in, s_out, server_side=True)
    done = {"c": False, "s": False}
    for _ in range(20):
        for name, side in (("c", c), ("s", s)):
            if not done[name]:
                try:
                    side.do_handshake()
                    done[name] = True
                except ssl.SSLWantReadError:
                    pass
        s_in.write(c_out.read())
        c_in.write(s_out.read())
        if all(done.values()):
            peer = c.getpeercert()
            assert peer is not None
            return peer
    raise AssertionError("the handshake did not finish")


def test_the_modules_doctests_pass() -> None:
    result = doctest.testmod(tls)
    assert result.attempted > 0, "tls.py lost its examples"
    assert result.failed == 0


def test_a_new_ca_is_a_ca_with_a_private_key(tmp_path: pathlib.Path) -> None:
    ca = tls.new_ca(tmp_path, common_name="my-ca")
    assert (ca.cert, ca.key) == (tmp_path / "ca.crt", tmp_path / "ca.key")
    assert ca.key.stat().st_mode & 0o777 == 0o600
    assert ca.cert.stat().st_mode & 0o777 == 0o644
    assert ca.bundle() == ca.cert.read_bytes()
    assert ca.bundle().startswith(b"-----BEGIN CERTIFICATE-----")
    text = text_of(ca.cert)
    assert "CN = my-ca" in text or "CN=my-ca" in text
    assert "CA:TRUE" in text
    assert "Certificate Sign" in text
    assert "prime256v1" in text or "P-256" in text  # ECDSA P-256
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ca.crt", "ca.key"]  # no leftovers


def test_an_issued_certificate_serves_its_names_and_only_those(tmp_path: pathlib.Path) -> None:
    ca = tls.new_ca(tmp_path / "ca")
    pair = tls.issue(ca, tmp_path / "serving", dns_names=["webhook.ns.svc"],
                     ip_addresses=["127.0.0.1", "::1"])  # fmt: skip
    assert (pair.cert, pair.key) == (tmp_path / "serving/tls.crt", tmp_path / "serving/tls.key")
    assert pair.key.stat().st_mode & 0o777 == 0o600
    text = text_of(pair.cert)
    assert "CA:FALSE" in text
    assert "TLS Web Server Authentication" in text
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(pair.cert, pair.key)
    peer = handshake(server, ca.cert, "webhook.ns.svc")
    assert set(peer["subjectAltName"]) == {
        ("DNS", "webhook.ns.svc"), ("IP Address", "127.0.0.1"), ("IP Address", "0:0:0:0:0:0:0:1")
    }  # fmt: skip
    with pytest.raises(ssl.SSLCertVerificationError):
        handshake(server, ca.cert, "other.ns.svc")
    with pytest.raises(ssl.SSLCertVerificationError):  # a client trusting another CA
        handshake(server, tls.new_ca(tmp_path / "other").cert, "webhook.ns.svc")


def test_issue_needs_a_name_and_checks_addresses(tmp_path: pathlib.Path) -> None:
    ca = tls.new_ca(tmp_path)
    with pytest.raises(ValueError, match="at least one DNS name or IP address"):
        tls.issue(ca, tmp_path)
    with pytest.raises(ValueError, match="does not appear to be an IPv4 or IPv6 address"):
        tls.issue(ca, tmp_path, ip_addresses=["not-an-ip"])
    assert not (tmp_path / "tls.crt").exists()


def test_self_signed_writes_both_pairs_into_one_directory(tmp_path: pathlib.Path) -> None:
    ca, pair = tls.self_signed(tmp_path, ip_addresses=["127.0.0.1"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ca.crt", "ca.key", "tls.crt", "tls.key"]
    assert (ca.cert.parent, pair.cert.parent) == (tmp_path, tmp_path)
    reloader = tls.Reloader(pair.cert, pair.key)
    peer = handshake(reloader.context, ca.cert, "127.0.0.1")
    assert peer["subjectAltName"] == (("IP Address", "127.0.0.1"),)


def test_openssl_errors_are_tls_errors(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(tls.TLSError, match=r"openssl x509 failed: .+"):
        tls.openssl("x509", "-in", "missing.crt", cwd=tmp_path)
    monkeypatch.setattr("shutil.which", lambda _name: None)
    with pytest.raises(tls.TLSError, match="openssl command is not installed"):
        tls.new_ca(tmp_path)


def serial(reloader: tls.Reloader, ca: pathlib.Path) -> str:
    return str(handshake(reloader.context, ca, "127.0.0.1")["serialNumber"])


def test_the_reloader_follows_its_files_and_keeps_the_last_good_pair(
    tmp_path: pathlib.Path,
) -> None:
    ca, pair = tls.self_signed(tmp_path, ip_addresses=["127.0.0.1"])
    reloader = tls.Reloader(pair.cert, pair.key)
    assert reloader.context.minimum_version >= ssl.TLSVersion.TLSv1_2
    first = serial(reloader, ca.cert)
    assert reloader.reload()  # unchanged files: nothing to load
    assert reloader.reloads == 0
    # half a rotation: a key that does not match the certificate
    good_key = pair.key.read_bytes()
    pair.key.write_bytes(tls.issue(ca, tmp_path / "x", ip_addresses=["127.0.0.1"]).key.read_bytes())
    assert not reloader.reload()
    assert serial(reloader, ca.cert) == first
    pair.key.unlink()  # a missing file: the same
    assert not reloader.reload()
    assert serial(reloader, ca.cert) == first
    pair.key.write_bytes(good_key)
    assert reloader.reload()
    assert reloader.reloads == 0, "the first pair again is no reload"
    tls.issue(ca, tmp_path, ip_addresses=["127.0.0.1"])  # the whole rotation
    assert reloader.reload()
    assert reloader.reloads == 1
    assert serial(reloader, ca.cert) != first


def test_a_reloader_needs_a_pair_that_loads(tmp_path: pathlib.Path) -> None:
    with pytest.raises(tls.TLSError, match="cannot load the certificate"):
        tls.Reloader(tmp_path / "tls.crt", tmp_path / "tls.key")


async def test_watch_reloads_every_interval_until_stopped(tmp_path: pathlib.Path) -> None:
    ca, pair = tls.self_signed(tmp_path, ip_addresses=["127.0.0.1"])
    reloader = tls.Reloader(pair.cert, pair.key)
    stop = asyncio.Event()
    task = asyncio.create_task(reloader.watch(stop, interval=0.01))
    await asyncio.to_thread(tls.issue, ca, tmp_path, ip_addresses=["127.0.0.1"])
    for _ in range(500):
        if reloader.reloads:
            break
        await asyncio.sleep(0.01)
    assert reloader.reloads == 1
    stop.set()
    await asyncio.wait_for(task, 2)
    assert task.done()
