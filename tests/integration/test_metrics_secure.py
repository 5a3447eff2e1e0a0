"""Secure metrics on the real control plane: ``ManagerOptions(metrics_secure=True)``.

The manager runs in this process as a ServiceAccount ("operator") whose only rights
are ``create`` on ``tokenreviews`` and ``subjectaccessreviews``, and serves ``/metrics``
over HTTPS on loopback with a certificate signed by the control plane's CA. Callers
present bound tokens from the TokenRequest API: "reader" is bound to a ClusterRole
granting ``get`` on the non-resource URL ``/metrics`` (kubebuilder's metrics-reader),
"stranger" to nothing. The reviews are the API server's, so RBAC decides, not a fake.
A flood of junk tokens is answered within the reviews' own budget: past the cap in
flight with 429, and without slowing the manager's own client.
"""

from __future__ import annotations

import asyncio
import contextlib
import pathlib
import ssl
import subprocess
from collections.abc import AsyncIterator, Iterator

import aiohttp
import pytest
from prometheus_client import parser

from runtime import delegatedauth
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


@contextlib.asynccontextmanager
async def serving(
    control_plane: controlplane.ControlPlane, namespace: str, certs: pathlib.Path,
    client_options: client_.Options | None = None,
    auth: delegatedauth.Options | None = None,
) -> AsyncIterator[manager_.Manager]:  # fmt: skip
    """A manager as the "operator" ServiceAccount serving secure metrics, until exit."""
    assert control_plane.dir is not None
    serving_certificate(control_plane.dir / "certs", certs)
    client = await client_.Client.from_kubeconfig(
        control_plane.service_account_kubeconfig(namespace, "operator"), options=client_options
    )
    mgr = manager_.Manager(client, manager_.Options(
        name="metrics-test", namespace=namespace, metrics_bind_address="127.0.0.1:0",
        health_probe_bind_address="0", metrics_auth=auth or delegatedauth.Options(),
        metrics_secure=True, metrics_cert_dir=str(certs), graceful_shutdown_timeout=5.0,
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


@pytest.fixture
async def secure_manager(
    control_plane: controlplane.ControlPlane, namespace: str, accounts: None,
    tmp_path: pathlib.Path,
) -> AsyncIterator[manager_.Manager]:  # fmt: skip
    async with serving(control_plane, namespace, tmp_path) as mgr:
        yield mgr


def trusting(control_plane: controlplane.ControlPlane) -> ssl.SSLContext:
    assert control_plane.dir is not None
    return ssl.create_default_context(cafile=str(control_plane.dir / "certs" / "ca.crt"))


async def scrape(mgr: manager_.Manager, tls: ssl.SSLContext, token: str | None) -> tuple[int, str]:
    status, text, _ = await scrape_with_headers(mgr, tls, token)
    return status, text


async def scrape_with_headers(
    mgr: manager_.Manager, tls: ssl.SSLContext, token: str | None
) -> tuple[int, str, dict[str, str]]:
    assert mgr.metrics_address is not None
    host, port = mgr.metrics_address
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=15)) as session,
        session.get(f"https://{host}:{port}/metrics", headers=headers, ssl=tls) as response,
    ):
        return response.status, await response.text(), dict(response.headers)


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


async def test_a_flood_of_junk_tokens_gets_429s_past_the_cap_and_spares_the_managers_client(
    control_plane: controlplane.ControlPlane, namespace: str, accounts: None,
    tmp_path: pathlib.Path,
) -> None:  # fmt: skip
    """The manager's client may make one request a second (burst 2); 60 junk tokens at
    once are reviewed by the reviews' own client, at most 4 at a time: the others are
    429s, and a request of the manager's own client meanwhile is not delayed."""
    slow = client_.Options(qps=1, burst=2)
    auth = delegatedauth.Options(max_reviews_in_flight=4, review_qps=20, review_burst=4)
    async with serving(control_plane, namespace, tmp_path, slow, auth) as mgr:
        tls = trusting(control_plane)
        reader = token_for(control_plane, namespace, "reader")
        assert (await scrape(mgr, tls, reader))[0] == 200
        before = reviews(control_plane)
        flood = [
            asyncio.create_task(scrape_with_headers(mgr, tls, f"junk-{i:03d}.{'x' * 600}"))
            for i in range(60)
        ]
        await asyncio.sleep(0.2)  # the flood is under way
        loop = asyncio.get_running_loop()
        began = loop.time()
        async with asyncio.timeout(10):
            await mgr.client.request("GET", "/version")
        took = loop.time() - began
        answers = await asyncio.gather(*flood)
        assert (await scrape(mgr, tls, reader))[0] == 200  # cached: the flood cost it nothing
        after = reviews(control_plane)
    statuses = [status for status, _, _ in answers]
    assert set(statuses) <= {401, 429}, statuses
    assert statuses.count(429) > 0, statuses
    assert {h.get("Retry-After") for s, _, h in answers if s == 429} == {"1"}
    # Every 401 cost exactly one TokenReview, every 429 none; no access review was made.
    assert after[0] - before[0] == statuses.count(401)
    assert after[1] - before[1] == 0
    assert took < 1.0, f"the manager's GET waited {took:.2f} s behind the reviews"
