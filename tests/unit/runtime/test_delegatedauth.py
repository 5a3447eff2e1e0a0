"""The delegated-auth middleware over real HTTP on loopback, with a fake API server
answering the TokenReviews and SubjectAccessReviews: the status codes, what each review
asks, what is cached and for how long, and that a review that cannot be made never lets
a request through; and the manager serving ``/metrics`` that way with ``metrics_secure``."""

from __future__ import annotations

import asyncio
import pathlib
import ssl
import subprocess
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import test_utils, web
from structlog import testing as log_testing

from runtime import delegatedauth, manager, tls
from runtime.client import client as client_
from runtime.client import errors as client_errors
from runtime.client import resources
from runtime.testing import clock as fake_clock
from runtime.testing import fake
from tests.unit import helpers

ALICE = {"username": "system:serviceaccount:ns:alice", "uid": "u-1",
         "groups": ["system:serviceaccounts", "system:authenticated"],
         "extra": {"authentication.kubernetes.io/pod-name": ["p"]}}  # fmt: skip
BOB = {"username": "system:serviceaccount:ns:bob", "groups": ["system:authenticated"]}
CONFIGMAPS = resources.default_registry.for_kind("v1", "ConfigMap")


class FakeApiServer:
    """Answers reviews: ``tokens`` maps a token to its user; ``allowed`` is the set of
    user names allowed; ``answer`` overrides the SubjectAccessReview status."""

    def __init__(self) -> None:
        self.tokens: dict[str, dict[str, Any]] = {"alice-token": ALICE, "bob-token": BOB}
        self.allowed = {ALICE["username"]}
        self.answer: dict[str, Any] | None = None
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.fail: BaseException | None = None
        self.fail_access: BaseException | None = None
        self.hang = False

    async def request(
        self, method: str, path: str, *, body: Any = None, request_timeout: float | None = None
    ) -> Any:
        assert method == "POST"
        self.calls.append((path, body))
        if self.hang:
            await asyncio.Event().wait()
        if self.fail is not None:
            raise self.fail
        if path == delegatedauth.TOKEN_REVIEWS:
            user = self.tokens.get(body["spec"]["token"])
            if user is None:
                return {**body, "status": {"authenticated": False, "error": "invalid token"}}
            return {**body, "status": {"authenticated": True, "user": user}}
        assert path == delegatedauth.SUBJECT_ACCESS_REVIEWS
        if self.fail_access is not None:
            raise self.fail_access
        if self.answer is not None:
            return {**body, "status": self.answer}
        return {**body, "status": {"allowed": body["spec"]["user"] in self.allowed}}

    def paths(self) -> list[str]:
        return [path for path, _ in self.calls]


class Served:
    def __init__(self, api: FakeApiServer, auth: delegatedauth.DelegatedAuth, client: Any) -> None:
        self.api, self.auth, self.client = api, auth, client

    async def get(
        self, token: str | None = None, *, header: str | None = None, path: str = "/metrics"
    ) -> tuple[int, str, dict[str, str]]:
        headers = {}
        if header is not None:
            headers["Authorization"] = header
        elif token is not None:
            headers["Authorization"] = f"Bearer {token}"
        async with self.client.get(path, headers=headers) as response:
            return response.status, await response.text(), dict(response.headers)


@pytest.fixture
def clock() -> fake_clock.FakeClock:
    return fake_clock.FakeClock()


@pytest.fixture
async def served(clock: fake_clock.FakeClock) -> AsyncIterator[Served]:
    api = FakeApiServer()
    auth = delegatedauth.DelegatedAuth(
        api, delegatedauth.Options(review_timeout=0.5, max_entries=3), clock=clock
    )

    async def metrics(request: web.Request) -> web.Response:
        return web.Response(text="the metrics\n")

    app = web.Application(middlewares=[auth.middleware])
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/other", metrics)
    client = test_utils.TestClient(test_utils.TestServer(app, host="127.0.0.1"))
    await client.start_server()
    try:
        yield Served(api, auth, client)
    finally:
        await client.close()


async def test_an_allowed_user_gets_the_page_after_both_reviews(served: Served) -> None:
    status, text, _ = await served.get("alice-token")
    assert (status, text) == (200, "the metrics\n")
    [(_, token_review), (_, access_review)] = served.api.calls
    assert token_review["kind"] == "TokenReview"
    assert token_review["spec"] == {"token": "alice-token"}
    assert access_review["kind"] == "SubjectAccessReview"
    assert access_review["spec"] == {
        "user": ALICE["username"],
        "uid": "u-1",
        "groups": ALICE["groups"],
        "extra": ALICE["extra"],
        "nonResourceAttributes": {"path": "/metrics", "verb": "get"},
    }


async def test_the_request_path_is_what_is_authorized(served: Served) -> None:
    assert (await served.get("alice-token", path="/other"))[0] == 200
    [(_, access_review)] = [c for c in served.api.calls if c[1]["kind"] == "SubjectAccessReview"]
    assert access_review["spec"]["nonResourceAttributes"] == {"path": "/other", "verb": "get"}


@pytest.mark.parametrize(
    "header", [None, "", "Basic YWxpY2U6cHc=", "Bearer", "Bearer   ", "alice-token"]
)
async def test_no_bearer_token_is_401_without_asking_the_api_server(
    served: Served, header: str | None
) -> None:
    status, text, headers = await served.get(header=header)
    assert (status, text) == (401, "Unauthorized\n")
    assert headers["WWW-Authenticate"] == "Bearer"
    assert served.api.calls == []


async def test_the_bearer_scheme_is_case_insensitive(served: Served) -> None:
    assert (await served.get(header="bearer alice-token"))[0] == 200


async def test_a_token_the_api_server_rejects_is_401_and_never_authorized(
    served: Served,
) -> None:
    status, text, _ = await served.get("forged")
    assert (status, text) == (401, "Unauthorized\n")
    assert served.api.paths() == [delegatedauth.TOKEN_REVIEWS]


async def test_a_user_not_allowed_is_403_naming_the_user(served: Served) -> None:
    status, text, _ = await served.get("bob-token")
    assert (status, text) == (403, f"Authorization denied for user {BOB['username']}\n")


@pytest.mark.parametrize(
    "answer",
    [{}, {"allowed": False}, {"allowed": True, "denied": True}, {"allowed": "true"}],
    ids=["no-opinion", "not-allowed", "allowed-and-denied", "not-a-boolean"],
)
async def test_only_a_plain_allow_lets_a_request_through(
    served: Served, answer: dict[str, Any]
) -> None:
    served.api.answer = answer
    assert (await served.get("alice-token"))[0] == 403


async def test_a_failed_token_review_is_500_and_not_cached(served: Served) -> None:
    served.api.fail = aiohttp.ClientConnectionError("connection refused")
    status, text, _ = await served.get("alice-token")
    assert (status, text) == (500, "Authentication failed\n")
    served.api.fail = None
    assert (await served.get("alice-token"))[0] == 200


async def test_a_failed_access_review_is_500_and_not_cached(served: Served) -> None:
    served.api.fail_access = RuntimeError("boom")
    status, text, _ = await served.get("alice-token")
    assert (status, text) == (500, f"Authorization for user {ALICE['username']} failed\n")
    served.api.fail_access = None
    assert (await served.get("alice-token"))[0] == 200
    assert served.api.paths() == [  # the token's answer was kept, the failure was not
        delegatedauth.TOKEN_REVIEWS,
        delegatedauth.SUBJECT_ACCESS_REVIEWS,
        delegatedauth.SUBJECT_ACCESS_REVIEWS,
    ]


async def test_an_answer_without_a_status_is_500(served: Served) -> None:
    async def no_status(*args: Any, **kwargs: Any) -> Any:
        return {"kind": "Status", "message": "odd"}

    served.api.request = no_status  # type: ignore[method-assign]
    assert (await served.get("alice-token"))[0] == 500


async def test_a_review_that_hangs_is_500_after_the_review_timeout(served: Served) -> None:
    served.api.hang = True
    loop = asyncio.get_running_loop()
    began = loop.time()
    assert (await served.get("alice-token"))[0] == 500
    assert 0.4 < loop.time() - began < 3


async def test_answers_are_cached_for_their_lifetimes(
    served: Served, clock: fake_clock.FakeClock
) -> None:
    for _ in range(3):
        assert (await served.get("alice-token"))[0] == 200
    assert len(served.api.calls) == 2  # one review of each kind for three scrapes
    clock.advance(59)
    assert (await served.get("alice-token"))[0] == 200
    assert len(served.api.calls) == 2
    clock.advance(1)  # both answers are 60 s old: asked again
    assert (await served.get("alice-token"))[0] == 200
    assert served.api.paths()[2:] == [
        delegatedauth.TOKEN_REVIEWS,
        delegatedauth.SUBJECT_ACCESS_REVIEWS,
    ]


async def test_a_denial_is_cached_30_s_so_a_new_binding_takes_effect_then(
    served: Served, clock: fake_clock.FakeClock
) -> None:
    assert (await served.get("bob-token"))[0] == 403
    served.api.allowed.add(BOB["username"])  # bound to the reader role meanwhile
    clock.advance(29)
    assert (await served.get("bob-token"))[0] == 403
    clock.advance(1)
    assert (await served.get("bob-token"))[0] == 200


async def test_a_removed_binding_takes_effect_once_the_allow_expires(
    served: Served, clock: fake_clock.FakeClock
) -> None:
    assert (await served.get("alice-token"))[0] == 200
    served.api.allowed.clear()
    assert (await served.get("alice-token"))[0] == 200
    clock.advance(60)
    assert (await served.get("alice-token"))[0] == 403


async def test_a_rejected_token_is_remembered_too(
    served: Served, clock: fake_clock.FakeClock
) -> None:
    for _ in range(3):
        assert (await served.get("forged"))[0] == 401
    assert len(served.api.calls) == 1
    clock.advance(60)
    assert (await served.get("forged"))[0] == 401
    assert len(served.api.calls) == 2


async def test_the_caches_are_bounded_and_keep_no_token(served: Served) -> None:
    for i in range(5):
        await served.get(f"bad-{i}")
    assert len(served.auth._rejected) == 3
    assert len(served.api.calls) == 5
    await served.get("bad-0")  # dropped as the oldest: reviewed again
    assert len(served.api.calls) == 6
    kept = repr([served.auth._rejected._items, served.auth._tokens._items])
    assert "bad-" not in kept


def test_options_refuse_nonsense() -> None:
    with pytest.raises(ValueError, match="review_timeout"):
        delegatedauth.Options(review_timeout=0)
    with pytest.raises(ValueError, match="lifetimes"):
        delegatedauth.Options(denied_ttl=-1)
    for nonsense in ({"max_reviews_in_flight": 0}, {"review_qps": 0}, {"review_burst": 0}):
        with pytest.raises(ValueError, match="max_reviews_in_flight"):
            delegatedauth.Options(**nonsense)


def test_certificates_need_secure_metrics() -> None:
    assert manager.Options(name="t", metrics_secure=True).metrics_cert_dir is None  # self-signed
    with pytest.raises(ValueError, match="need metrics_secure=True"):
        manager.Options(name="t", metrics_cert_dir="/certs")
    assert manager.Options(name="t", metrics_secure=True, metrics_cert_dir="/certs").metrics_secure


class ReviewingFake(fake.FakeClient):
    """The fake client, answering reviews as :class:`FakeApiServer` does."""

    def __init__(self) -> None:
        super().__init__()
        self.api = FakeApiServer()

    async def request(
        self, method: str, path: str, *, body: Any = None, request_timeout: float | None = None
    ) -> Any:
        return await self.api.request(method, path, body=body, request_timeout=request_timeout)


@pytest.fixture
def self_signed(tmp_path: pathlib.Path) -> pathlib.Path:
    """``tls.crt``/``tls.key`` for 127.0.0.1 in ``tmp_path``."""
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-keyout", "tls.key", "-out", "tls.crt", "-days", "1", "-subj", "/CN=m",
         "-addext", "subjectAltName=IP:127.0.0.1"],
        cwd=tmp_path, check=True, capture_output=True,
    )  # fmt: skip
    return tmp_path


async def test_the_manager_serves_metrics_over_tls_behind_the_reviews(
    self_signed: pathlib.Path,
) -> None:
    tmp_path = self_signed
    server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_tls.load_cert_chain(tmp_path / "tls.crt", tmp_path / "tls.key")
    client = ReviewingFake()
    mgr = manager.Manager(client, manager.Options(  # type: ignore[arg-type]
        name="t", metrics_bind_address="127.0.0.1:0", health_probe_bind_address="0",
        metrics_secure=True, metrics_ssl_context=server_tls))  # fmt: skip
    stop = asyncio.Event()
    task = asyncio.create_task(mgr.start(stop))
    try:
        host, port = await helpers.eventually(lambda: mgr.metrics_address, what="serving")
        trust = ssl.create_default_context(cafile=str(tmp_path / "tls.crt"))
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session:
            for token, expected in (("alice-token", 200), ("bob-token", 403), (None, 401)):
                headers = {"Authorization": f"Bearer {token}"} if token else {}
                url = f"https://{host}:{port}/metrics"
                async with session.get(url, headers=headers, ssl=trust) as response:
                    assert response.status == expected, token
                    if expected == 200:
                        assert "python_info" in await response.text()
            with pytest.raises(aiohttp.ClientError):
                async with session.get(f"http://{host}:{port}/metrics") as response:
                    await response.read()
        assert client.api.paths().count(delegatedauth.SUBJECT_ACCESS_REVIEWS) == 2
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)


def test_a_reviews_user_becomes_a_hashable_user() -> None:
    user = delegatedauth.User.from_review(
        {"username": "u", "groups": None, "extra": {"b": ["2", "1"], "a": None}}
    )
    assert user == delegatedauth.User("u", extra=(("a", ()), ("b", ("2", "1"))))
    assert {user: 1}[
        delegatedauth.User.from_review({"username": "u", "extra": {"a": [], "b": ["2", "1"]}})
    ] == 1


async def served_certificate(host: str, port: int) -> bytes:
    """The DER certificate the server at ``host:port`` presents now (not verified)."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    _, writer = await asyncio.open_connection(host, port, ssl=context)
    try:
        ssl_object = writer.get_extra_info("ssl_object")
        der: bytes = ssl_object.getpeercert(binary_form=True)
        return der
    finally:
        writer.close()
        await writer.wait_closed()


async def test_without_a_certificate_the_manager_serves_a_self_signed_one() -> None:
    mgr = manager.Manager(ReviewingFake(), manager.Options(  # type: ignore[arg-type]
        name="t", metrics_bind_address="127.0.0.1:0", health_probe_bind_address="0",
        metrics_secure=True))  # fmt: skip
    stop = asyncio.Event()
    task = asyncio.create_task(mgr.start(stop))
    try:
        host, port = await helpers.eventually(lambda: mgr.metrics_address, what="serving")
        scratch = pathlib.Path(mgr._scratch[0].name)
        assert await asyncio.to_thread((scratch / "tls.crt").exists)
        insecure = ssl.create_default_context()
        insecure.check_hostname = False
        insecure.verify_mode = ssl.CERT_NONE
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session:
            url = f"https://{host}:{port}/metrics"
            headers = {"Authorization": "Bearer alice-token"}
            async with session.get(url, headers=headers, ssl=insecure) as response:
                assert response.status == 200
            with pytest.raises(aiohttp.ClientConnectorCertificateError):  # not trusted
                async with session.get(url, headers=headers) as response:
                    await response.read()
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)
    assert not await asyncio.to_thread(scratch.exists)  # the key does not outlive the manager


async def test_a_rotated_certificate_directory_is_served_without_a_restart(
    self_signed: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(manager, "_CERT_POLL", 0.05)
    mgr = manager.Manager(ReviewingFake(), manager.Options(  # type: ignore[arg-type]
        name="t", metrics_bind_address="127.0.0.1:0", health_probe_bind_address="0",
        metrics_secure=True, metrics_cert_dir=str(self_signed)))  # fmt: skip
    stop = asyncio.Event()
    task = asyncio.create_task(mgr.start(stop))
    try:
        host, port = await helpers.eventually(lambda: mgr.metrics_address, what="serving")
        first = await served_certificate(host, port)
        assert first == ssl.PEM_cert_to_DER_cert((self_signed / "tls.crt").read_text())
        tls.self_signed(self_signed, ip_addresses=["127.0.0.1"])  # a new pair, same names
        rotated = ssl.PEM_cert_to_DER_cert((self_signed / "tls.crt").read_text())
        assert rotated != first
        for _ in range(100):  # polled every 0.05 s: within 5 s at most
            if await served_certificate(host, port) == rotated:
                break
            await asyncio.sleep(0.05)
        else:
            pytest.fail("the rotated certificate was never served")
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)


async def test_reviews_past_the_cap_in_flight_are_429_and_cached_answers_still_served(
    clock: fake_clock.FakeClock,
) -> None:
    api = FakeApiServer()
    auth = delegatedauth.DelegatedAuth(
        api, delegatedauth.Options(review_timeout=0.5, max_reviews_in_flight=2), clock=clock
    )

    async def metrics(request: web.Request) -> web.Response:
        return web.Response(text="the metrics\n")

    app = web.Application(middlewares=[auth.middleware])
    app.router.add_get("/metrics", metrics)
    async with test_utils.TestClient(test_utils.TestServer(app, host="127.0.0.1")) as client:
        s = Served(api, auth, client)
        assert (await s.get("alice-token"))[0] == 200  # cached before the flood
        api.hang = True
        stuck = [asyncio.create_task(s.get(f"junk-{i}")) for i in range(2)]
        await helpers.eventually(lambda: len(api.calls) == 4, what="two reviews in flight")
        for i in range(5):  # past the cap: answered at once, nothing sent
            status, text, headers = await s.get(f"more-junk-{i}")
            assert (status, text, headers["Retry-After"]) == (429, "Too many requests\n", "1")
        assert len(api.calls) == 4
        assert (await s.get("alice-token"))[0] == 200  # cached: needs no review
        assert [(await t)[0] for t in stuck] == [500, 500]  # the review timeout
        api.hang = False
        assert (await s.get("more-junk-0"))[0] == 401  # the slots are free again
        assert len(api.calls) == 5


async def test_a_flood_of_rejected_tokens_does_not_evict_an_authenticated_one(
    served: Served,
) -> None:
    assert (await served.get("alice-token"))[0] == 200
    for i in range(10):  # max_entries=3: ten rejected tokens, each reviewed once
        assert (await served.get(f"junk-{i}"))[0] == 401
    assert (await served.get("alice-token"))[0] == 200
    assert served.api.paths().count(delegatedauth.TOKEN_REVIEWS) == 11


@pytest.mark.parametrize("echo", ["no-status", "error-answer", "not-a-mapping", "client-error"])
async def test_a_failed_review_is_logged_without_anything_that_can_echo_the_token(
    served: Served, echo: str
) -> None:
    token = "eyJhbGciOiJSUzI1NiJ9.c2VjcmV0LXRva2VuLXRoYXQtbXVzdC1ub3QtbGVhaw.c2ln"

    async def echoing(method: str, path: str, *, body: Any = None, **_: Any) -> Any:
        if echo == "no-status":  # the review sent back, status missing
            return {**body, "metadata": {}}
        if echo == "not-a-mapping":
            return [body["spec"]["token"]]
        if echo == "error-answer":
            raise client_errors.from_status(
                400, {"reason": "BadRequest", "message": f"bad token {body['spec']['token']}"}
            )
        raise ValueError(f"cannot decode {body['spec']['token'][:20]}")

    served.api.request = echoing  # type: ignore[method-assign]
    with log_testing.capture_logs() as logs:
        status, text, _ = await served.get(token)
    assert (status, text) == (500, "Authentication failed\n")
    [event] = [e for e in logs if e["event"] == "authentication failed"]
    assert event["log_level"] == "error"
    everything = repr(logs)
    for piece in (token, token[:20], token.split(".")[1][:12]):
        assert piece not in everything
    assert "TokenReview" in event["error"]


async def test_the_managers_reviews_go_through_a_client_of_their_own() -> None:
    """Junk tokens cost reviews on the reviews' own client and budget: the manager's
    client (one request every 2 s here) is not slowed by them, not even by one."""
    seen: list[tuple[str, str]] = []

    async def api(request: web.Request) -> web.Response:
        seen.append((request.path, request.headers["User-Agent"]))
        if request.path == delegatedauth.TOKEN_REVIEWS:
            body = await request.json()
            return web.json_response({**body, "status": {"authenticated": False}})
        return web.json_response({"apiVersion": "v1", "kind": "ConfigMap",
                                  "metadata": {"name": "c", "namespace": "ns"}})  # fmt: skip

    async with helpers.api_server(api) as plain:
        slow = client_.Client(
            plain.configuration, options=client_.Options(qps=0.5, burst=1, timeout=5)
        )
        mgr = manager.Manager(slow, manager.Options(
            name="t", metrics_bind_address="127.0.0.1:0", health_probe_bind_address="0",
            metrics_secure=True, graceful_shutdown_timeout=5))  # fmt: skip
        stop = asyncio.Event()
        task = asyncio.create_task(mgr.start(stop))
        try:
            host, port = await helpers.eventually(lambda: mgr.metrics_address, what="serving")
            insecure = ssl.create_default_context()
            insecure.check_hostname = False
            insecure.verify_mode = ssl.CERT_NONE
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http:

                async def scrape(token: str) -> int:
                    url = f"https://{host}:{port}/metrics"
                    headers = {"Authorization": f"Bearer {token}"}
                    async with http.get(url, headers=headers, ssl=insecure) as response:
                        return response.status

                statuses = await asyncio.gather(*(scrape(f"junk-{i}") for i in range(5)))
            assert statuses == [401] * 5
            loop = asyncio.get_running_loop()
            began = loop.time()
            await slow.get(CONFIGMAPS, "ns", "c")  # the bucket's one token is still there
            assert loop.time() - began < 1.0
            reviews = [agent for path, agent in seen if path == delegatedauth.TOKEN_REVIEWS]
            assert len(reviews) == 5
            assert set(reviews) == {client_.identity(slow.options)[1]}  # the operator's name
            assert mgr.review_client is not None
            assert mgr.review_client is not slow
            assert mgr.review_client.options.qps == mgr.options.metrics_auth.review_qps == 10
            assert mgr.review_client.options.burst == mgr.options.metrics_auth.review_burst
        finally:
            stop.set()
            await asyncio.wait_for(task, 10)
            await slow.close()
        assert mgr.review_client._session is None  # closed with the servers
