"""Secure metrics on the real control plane: ``ManagerOptions(metrics_secure=True)``.

The manager runs in this process as a ServiceAccount ("operator") whose only rights
are ``create`` on ``tokenreviews`` and ``subjectaccessreviews``, and serves ``/metrics``
over HTTPS on loopback with a certificate signed by the control plane's CA. Callers
present bound tokens from the TokenRequest API: "reader" is bound to a ClusterRole
granting ``get`` on the non-resource URL ``/metrics`` (kubebuilder's metrics-reader),
"stranger" to nothing. The reviews are the API server's, so RBAC decides, not a fake.
"""

from __future__ import annotations

import asyncio
import pathlib
import ssl
import subprocess
from collections.abc import AsyncIterator, Iterator

import aiohttp
import pytest
from prometheus_client import parser

from runtime import manager as manager_
from runtime.client import client as client_
from runtime.testing import controlplane

RBAC = "/apis/rbac.authorization.k8s.io/v1"


def _openssl(*args: str, cwd: pathlib.Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def serving_certificate(ca_dir: pathlib.Path, out: pathlib.Path) -> None:
    """``tls.crt``/``tls.key`` for 127.0.0.1 in ``out``, signed by the control plane's CA."""
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    (out / "ext").write_text("subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")
    _openssl("req", *ec, "-keyout", "tls.key", "-out", "tls.csr", "-subj", "/CN=metrics",
             cwd=out)  # fmt: skip
    _openssl(
        "x509", "-req", "-in", "tls.csr", "-CA", str(ca_dir / "ca.crt"),
        "-CAkey", str(ca_dir / "ca.key"), "-CAcreateserial", "-CAserial", "ca.srl",
        "-out", "tls.crt", "-days", "1", "-extfile", "ext", cwd=out,
    )  # fmt: skip


def token_for(control_plane: controlplane.ControlPlane, namespace: str, account: str) -> str:
    answer = control_plane.request(
        "POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
         "spec": {"expirationSeconds": 3600}},
    )  # fmt: skip
    return str(answer["status"]["token"])


def cluster_role(name: str, rules: list[dict[str, object]]) -> dict[str, object]:
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": name}, "rules": rules}  # fmt: skip


def binding(name: str, namespace: str, account: str) -> dict[str, object]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}],
    }  # fmt: skip


@pytest.fixture
def accounts(control_plane: controlplane.ControlPlane, namespace: str) -> Iterator[None]:
    """ServiceAccounts operator, reader, stranger; the operator may review, the reader read."""
    for account in ("operator", "reader", "stranger"):
        control_plane.request("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts",
                              {"apiVersion": "v1", "kind": "ServiceAccount",
                               "metadata": {"name": account}})  # fmt: skip
    roles = {
        f"{namespace}-metrics-auth": ("operator", [
            {"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"],
             "verbs": ["create"]},
            {"apiGroups": ["authorization.k8s.io"], "resources": ["subjectaccessreviews"],
             "verbs": ["create"]},
        ]),
        f"{namespace}-metrics-reader": ("reader", [
            {"nonResourceURLs": ["/metrics"], "verbs": ["get"]},
        ]),
    }  # fmt: skip
    for name, (account, rules) in roles.items():
        control_plane.request("POST", f"{RBAC}/clusterroles", cluster_role(name, rules))
        control_plane.request(
            "POST", f"{RBAC}/clusterrolebindings", binding(name, namespace, account)
        )
    yield
    for name in roles:
        control_plane.request("DELETE", f"{RBAC}/clusterrolebindings/{name}")
        control_plane.request("DELETE", f"{RBAC}/clusterroles/{name}")


@pytest.fixture
async def secure_manager(
    control_plane: controlplane.ControlPlane, namespace: str, accounts: None,
    tmp_path: pathlib.Path,
) -> AsyncIterator[manager_.Manager]:  # fmt: skip
    assert control_plane.dir is not None
    serving_certificate(control_plane.dir / "certs", tmp_path)
    client = await client_.Client.from_kubeconfig(
        control_plane.service_account_kubeconfig(namespace, "operator")
    )
    mgr = manager_.Manager(client, manager_.Options(
        name="metrics-test", namespace=namespace, metrics_bind_address="127.0.0.1:0",
        health_probe_bind_address="0",
        metrics_secure=True, metrics_cert_dir=str(tmp_path), graceful_shutdown_timeout=5.0,
    ))  # fmt: skip
    stop = asyncio.Event()
    task = asyncio.create_task(mgr.start(stop))
    try:
        async with asyncio.timeout(30):
            while mgr.metrics_address is None:
                assert not task.done(), task
                await asyncio.sleep(0.05)
        yield mgr
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)
        await client.close()


def trusting(control_plane: controlplane.ControlPlane) -> ssl.SSLContext:
    assert control_plane.dir is not None
    return ssl.create_default_context(cafile=str(control_plane.dir / "certs" / "ca.crt"))


async def scrape(mgr: manager_.Manager, tls: ssl.SSLContext, token: str | None) -> tuple[int, str]:
    assert mgr.metrics_address is not None
    host, port = mgr.metrics_address
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=15)) as session,
        session.get(f"https://{host}:{port}/metrics", headers=headers, ssl=tls) as response,
    ):
        return response.status, await response.text()


def reviews(control_plane: controlplane.ControlPlane) -> tuple[float, float]:
    """TokenReviews and SubjectAccessReviews the API server has answered so far."""
    counts = control_plane.request_counts()
    return (
        sum(n for (_, res, _), n in counts.items() if res == "tokenreviews"),
        sum(n for (_, res, _), n in counts.items() if res == "subjectaccessreviews"),
    )


async def test_a_bound_service_account_reads_the_metrics_and_reviews_are_cached(
    control_plane: controlplane.ControlPlane, namespace: str, secure_manager: manager_.Manager
) -> None:
    tls = trusting(control_plane)
    token = token_for(control_plane, namespace, "reader")
    before = reviews(control_plane)
    status, text = await scrape(secure_manager, tls, token)
    assert status == 200, text
    families = {f.name for f in parser.text_string_to_metric_families(text)}
    assert {"python_info", "process_cpu_seconds"} <= families
    for _ in range(3):
        assert (await scrape(secure_manager, tls, token))[0] == 200
    after = reviews(control_plane)
    assert (after[0] - before[0], after[1] - before[1]) == (1, 1)  # 4 scrapes, 2 reviews


async def test_a_service_account_without_the_reader_role_is_refused_403(
    control_plane: controlplane.ControlPlane, namespace: str, secure_manager: manager_.Manager
) -> None:
    token = token_for(control_plane, namespace, "stranger")
    status, text = await scrape(secure_manager, trusting(control_plane), token)
    assert status == 403
    assert text == f"Authorization denied for user system:serviceaccount:{namespace}:stranger\n"


@pytest.mark.parametrize("token", [None, "garbage", "eyJhbGciOiJSUzI1NiJ9.e30.c2ln"])
async def test_no_token_or_one_the_api_server_rejects_is_401(
    control_plane: controlplane.ControlPlane, secure_manager: manager_.Manager,
    token: str | None,
) -> None:  # fmt: skip
    status, text = await scrape(secure_manager, trusting(control_plane), token)
    assert (status, text) == (401, "Unauthorized\n")


async def test_plain_http_is_refused_and_so_is_an_untrusted_certificate(
    control_plane: controlplane.ControlPlane, namespace: str, secure_manager: manager_.Manager
) -> None:
    assert secure_manager.metrics_address is not None
    host, port = secure_manager.metrics_address
    token = token_for(control_plane, namespace, "reader")
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=15)) as session:
        with pytest.raises(aiohttp.ClientError):
            async with session.get(
                f"http://{host}:{port}/metrics", headers={"Authorization": f"Bearer {token}"}
            ) as response:
                await response.read()
        with pytest.raises(aiohttp.ClientConnectorCertificateError):
            async with session.get(f"https://{host}:{port}/metrics") as response:
                await response.read()
