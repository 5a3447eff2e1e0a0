"""Webhooks served by :mod:`runtime.webhook` and called by the real kube-apiserver on
loopback (URL webhook configurations whose ``caBundle`` is our generated CA):

- a validating webhook run by a :class:`runtime.Manager` (registered through the
  builder, CA injected into its configuration at start) refuses a ConfigMap: the API's
  error and ``kubectl``'s show our message; its warnings reach ``kubectl`` too;
- a mutating webhook defaults fields (the API server applies our JSON patch);
- a conversion webhook between v1 and v2 of a test CRD stored in v1: written in one
  version, read in the other, the CA injected into the CRD;
- ``failurePolicy: Fail`` refuses and ``Ignore`` admits once the server is down;
- a server whose slots are all held answers 429 with ``Retry-After``, and the API server
  calls again after it: the write succeeds once a slot is free;
- the serving certificate rotated on disk (same CA), then the CA rotated (bundle with
  both CAs first) while the API server keeps calling: not one request fails.

Every webhook matches only the test's namespace (``namespaceSelector``), so other
tests sharing the control plane never call it.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import copy
import dataclasses
import pathlib
import secrets
import socket
import ssl
from collections.abc import AsyncIterator, Sequence
from typing import Any

import aiohttp
import pytest

import runtime
from runtime import metrics, tls
from runtime.client import client as client_
from runtime.client import resources
from runtime.testing import controlplane
from runtime.webhook import admission, intake, server
from tests.integration import helpers

CONFIGMAPS = resources.Resource("", "v1", "ConfigMap", "configmaps")
ADMISSION = "/apis/admissionregistration.k8s.io/v1"
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
GROUP = "conversion.test.rayservice.dev"


async def api(cp: controlplane.ControlPlane, method: str, path: str, body: Any = None) -> Any:
    """A request as admin, off the event loop (our webhook server runs on it)."""
    return await asyncio.to_thread(cp.request, method, path, body)


def configmap(name: str, namespace: str, **data: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": namespace}, "data": data}  # fmt: skip


def webhook_config(
    kind: str,
    name: str,
    namespace: str,
    url: str,
    *,
    ca: bytes | None,
    failure_policy: str = "Fail",
    object_selector: dict[str, Any] | None = None,
) -> dict[str, Any]:
    client_config: dict[str, Any] = {"url": url}
    if ca is not None:
        client_config["caBundle"] = base64.b64encode(ca).decode()
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": kind,
        "metadata": {"name": name},
        "webhooks": [
            {
                "name": f"{name}.test.rayservice.dev",
                "clientConfig": client_config,
                "rules": [{"apiGroups": [""], "apiVersions": ["v1"],
                           "operations": ["CREATE", "UPDATE"], "resources": ["configmaps"]}],
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
                "objectSelector": object_selector or {},
                "failurePolicy": failure_policy,
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
                "timeoutSeconds": 5,
            }
        ],
    }  # fmt: skip


@contextlib.asynccontextmanager
async def installed(cp: controlplane.ControlPlane, obj: dict[str, Any]) -> AsyncIterator[None]:
    plural = obj["kind"].lower() + "s"
    await api(cp, "POST", f"{ADMISSION}/{plural}", obj)
    try:
        yield
    finally:
        await api(cp, "DELETE", f"{ADMISSION}/{plural}/{obj['metadata']['name']}")


@contextlib.asynccontextmanager
async def serving(srv: server.Server) -> AsyncIterator[server.Server]:
    stop = asyncio.Event()
    task = asyncio.create_task(srv.start(stop))
    await helpers.eventually(lambda: srv.address is not None or task.done(), 10, "listening")
    assert srv.address is not None, task
    try:
        yield srv
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)


def self_signed(tmp: pathlib.Path, port: int, **inject: Sequence[str]) -> server.Options:
    return server.Options(
        bind_address=f"127.0.0.1:{port}", cert_dir=tmp, reload_interval=0.2,
        self_signed=server.SelfSigned(ip_addresses=["127.0.0.1"], **inject),  # type: ignore[arg-type]
    )  # fmt: skip


async def refused(cp: controlplane.ControlPlane, namespace: str, obj: dict[str, Any]) -> str:
    """Create ``obj``; the API server's refusal message (fails the test if it is created)."""
    try:
        await api(cp, "POST", f"/api/v1/namespaces/{namespace}/configmaps", obj)
    except controlplane.ApiError as exc:
        return str(exc.body["message"])
    raise AssertionError(f"{obj['metadata']['name']} was created")


async def until_refused(cp: controlplane.ControlPlane, namespace: str, obj: dict[str, Any]) -> str:
    """The refusal, once the API server has seen a new webhook configuration (it watches
    them: the first requests after creating one may not be sent to it)."""

    async def attempt() -> str | None:
        path = f"/api/v1/namespaces/{namespace}/configmaps"
        try:
            await api(cp, "POST", path, obj)
        except controlplane.ApiError as exc:
            return str(exc.body["message"])
        await api(cp, "DELETE", f"{path}/{obj['metadata']['name']}")
        return None

    return await helpers.eventually(attempt, 15, "the webhook to be called")


class NoForbiddenKeys:
    """Refuses ConfigMaps with a ``forbidden`` key; warns about ``deprecated``."""

    async def validate_create(self, obj: dict[str, Any], request: admission.Request) -> list[str]:
        return self._check(obj)

    async def validate_update(
        self, old: dict[str, Any], obj: dict[str, Any], request: admission.Request
    ) -> list[str]:
        return self._check(obj)

    async def validate_delete(self, old: dict[str, Any], request: admission.Request) -> list[str]:
        return []

    def _check(self, obj: dict[str, Any]) -> list[str]:
        data = obj.get("data") or {}
        if "forbidden" in data:
            raise admission.Denied(f"key 'forbidden' is not allowed (value {data['forbidden']!r})")
        return ["key 'deprecated' will go away"] if "deprecated" in data else []


async def test_validating_webhook_run_by_the_manager_refuses_with_our_message(
    control_plane: controlplane.ControlPlane,
    client: client_.Client,
    namespace: str,
    bin_dir: pathlib.Path,
    tmp_path: pathlib.Path,
) -> None:
    name = f"validate-{namespace}"
    [port] = controlplane.free_ports(1)
    url = f"https://127.0.0.1:{port}{server.validate_path(CONFIGMAPS)}"
    # No caBundle: the manager's webhook server generates a CA and injects it.
    config = webhook_config("ValidatingWebhookConfiguration", name, namespace, url, ca=None)
    options = runtime.ManagerOptions(
        name="webhook-test", metrics_bind_address="0", health_probe_bind_address="127.0.0.1:0",
        webhook=self_signed(tmp_path, port, validating_configurations=[name]),
    )  # fmt: skip
    mgr = runtime.Manager(client, options)

    async def reconcile(request: runtime.Request) -> runtime.Result:
        return runtime.Result()

    runtime.Builder(mgr).for_(CONFIGMAPS).with_validator(NoForbiddenKeys()).named(
        "webhook-test"
    ).complete(reconcile)
    stop = asyncio.Event()
    async with installed(control_plane, config):
        task = asyncio.create_task(mgr.start(stop))
        try:
            stored = await helpers.eventually(
                lambda: _ca_bundle_of(control_plane, name), 20, "the CA injected"
            )
            assert base64.b64decode(stored) == (tmp_path / "ca.crt").read_bytes()
            message = await until_refused(
                control_plane, namespace, configmap("bad", namespace, forbidden="x")
            )
            assert message == (
                f'admission webhook "{name}.test.rayservice.dev" denied the request: '
                "key 'forbidden' is not allowed (value 'x')"
            )
            # kubectl shows the same message, and an allowed object's warnings.
            manifest = configmap("bad", namespace, forbidden="y")
            code, out = await kubectl(bin_dir, control_plane, manifest)
            assert code != 0
            assert "key 'forbidden' is not allowed (value 'y')" in out
            assert f'admission webhook "{name}.test.rayservice.dev" denied the request' in out
            code, out = await kubectl(bin_dir, control_plane,
                                      configmap("warned", namespace, deprecated="1"))  # fmt: skip
            assert code == 0, out
            assert "Warning: key 'deprecated' will go away" in out
            # Every call was counted, under controller-runtime's metric names.
            calls = runtime.metrics.registry.get_sample_value(
                "controller_runtime_webhook_requests_total",
                {"webhook": server.validate_path(CONFIGMAPS), "code": "200"},
            )
            assert calls is not None
            assert calls >= 3  # the refusal, kubectl's refusal, the warned create
            # /readyz includes the webhook server.
            probe = mgr.probe_address
            assert probe is not None
            ready = await asyncio.to_thread(_get, probe[1], "/readyz?verbose")
            assert "[+]webhook ok" in ready
        finally:
            stop.set()
            await asyncio.wait_for(task, 15)


async def _ca_bundle_of(cp: controlplane.ControlPlane, name: str) -> str | None:
    config = await api(cp, "GET", f"{ADMISSION}/validatingwebhookconfigurations/{name}")
    return config["webhooks"][0]["clientConfig"].get("caBundle")  # type: ignore[no-any-return]


def _get(port: int, path: str) -> str:
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
        return response.read().decode()  # type: ignore[no-any-return]


async def kubectl(
    bin_dir: pathlib.Path, cp: controlplane.ControlPlane, obj: dict[str, Any]
) -> tuple[int, str]:
    import json

    proc = await asyncio.create_subprocess_exec(
        str(bin_dir / "kubectl"), "--kubeconfig", str(cp.kubeconfig), "create", "-f", "-",
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    out, _ = await asyncio.wait_for(proc.communicate(json.dumps(obj).encode()), 30)
    assert proc.returncode is not None
    return proc.returncode, out.decode()


class Defaults:
    async def default(self, obj: dict[str, Any], request: admission.Request) -> None:
        obj.setdefault("data", {}).setdefault("size", "1")
        obj["metadata"].setdefault("labels", {})["defaulted.test/by"] = "webhook"
        obj["data"].pop("scratch", None)


async def test_mutating_webhook_defaults_fields(
    control_plane: controlplane.ControlPlane, namespace: str, tmp_path: pathlib.Path
) -> None:
    [port] = controlplane.free_ports(1)
    name = f"mutate-{namespace}"
    srv = server.Server(self_signed(tmp_path, port))
    server.register_for(srv, CONFIGMAPS, defaulter=Defaults())
    async with serving(srv):
        assert srv.ca_bundle is not None
        url = f"https://127.0.0.1:{port}{server.mutate_path(CONFIGMAPS)}"
        config = webhook_config("MutatingWebhookConfiguration", name, namespace, url,
                                ca=srv.ca_bundle)  # fmt: skip
        async with installed(control_plane, config):
            path = f"/api/v1/namespaces/{namespace}/configmaps"

            async def defaulted() -> dict[str, Any] | None:
                obj = configmap(f"cm-{secrets.token_hex(3)}", namespace, scratch="x", keep="k")
                created: dict[str, Any] = await api(control_plane, "POST", path, obj)
                return created if created["metadata"].get("labels") else None

            created = await helpers.eventually(defaulted, 15, "a defaulted ConfigMap")
            assert created["data"] == {"size": "1", "keep": "k"}
            assert created["metadata"]["labels"] == {"defaulted.test/by": "webhook"}
            # A value given is kept: only what is missing is defaulted.
            given = await api(control_plane, "POST", path, configmap("given", namespace, size="7"))
            assert given["data"] == {"size": "7"}


def shape_crd(url: str) -> dict[str, Any]:
    def version(name: str, spec: dict[str, Any], storage: bool) -> dict[str, Any]:
        return {"name": name, "served": True, "storage": storage,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": spec}}}}}  # fmt: skip

    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"shapes.{GROUP}"},
        "spec": {
            "group": GROUP,
            "names": {"kind": "Shape", "plural": "shapes", "singular": "shape",
                      "listKind": "ShapeList"},
            "scope": "Namespaced",
            "versions": [
                version("v1", {"size": {"type": "integer"}}, storage=True),
                version("v2", {"dimensions": {"type": "object", "properties": {
                    "size": {"type": "string"}}}}, storage=False),
            ],
            "conversion": {"strategy": "Webhook", "webhook": {
                "clientConfig": {"url": url}, "conversionReviewVersions": ["v1"]}},
        },
    }  # fmt: skip


class ShapeConverter:
    """v1 ``spec.size: int`` <-> v2 ``spec.dimensions.size: str``; counts calls."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def convert(self, obj: dict[str, Any], to_api_version: str) -> dict[str, Any]:
        self.calls.append(f"{obj['apiVersion']}->{to_api_version}")
        out = copy.deepcopy(obj)
        spec = obj.get("spec") or {}
        if to_api_version == f"{GROUP}/v2":
            out["spec"] = {"dimensions": {"size": str(spec.get("size", 0))}}
        else:
            out["spec"] = {"size": int(spec.get("dimensions", {}).get("size", "0"))}
        out["apiVersion"] = to_api_version
        return out


async def test_conversion_between_two_versions_of_a_crd(
    control_plane: controlplane.ControlPlane, namespace: str, tmp_path: pathlib.Path
) -> None:
    [port] = controlplane.free_ports(1)
    converter = ShapeConverter()
    crd_name = f"shapes.{GROUP}"
    crd = shape_crd(f"https://127.0.0.1:{port}{server.CONVERT_PATH}")
    with contextlib.suppress(controlplane.ApiError):
        await api(control_plane, "DELETE", f"{CRDS}/{crd_name}")
    await api(control_plane, "POST", CRDS, crd)
    srv = server.Server(self_signed(tmp_path, port, crds=[crd_name]), client=None)
    srv.client = await client_.Client.from_kubeconfig(control_plane.kubeconfig)
    server.register_for(srv, resources.Resource(GROUP, "v1", "Shape", "shapes"),
                        converter=converter)  # fmt: skip
    try:
        async with serving(srv):
            base = f"/apis/{GROUP}/{{}}/namespaces/{namespace}/shapes"

            async def served() -> bool:
                try:
                    await api(control_plane, "GET", base.format("v2"))
                except controlplane.ApiError:
                    return False
                return True

            await helpers.eventually(served, 30, "v2 served")
            # The CA is injected once the server listens; calls succeed after that.
            stored = await helpers.eventually(
                lambda: _crd_bundle(control_plane, crd_name), 20, "the CA injected"
            )
            assert base64.b64decode(stored) == srv.ca_bundle

            async def written_in_v2() -> dict[str, Any] | None:
                obj = {"apiVersion": f"{GROUP}/v2", "kind": "Shape",
                       "metadata": {"name": "square", "namespace": namespace},
                       "spec": {"dimensions": {"size": "4"}}}  # fmt: skip
                try:
                    return await api(control_plane, "POST", base.format("v2"), obj)  # type: ignore[no-any-return]
                except controlplane.ApiError as exc:
                    if exc.status == 409:
                        return await api(control_plane, "GET", base.format("v2") + "/square")  # type: ignore[no-any-return]
                    return None

            created = await helpers.eventually(written_in_v2, 20, "a Shape written in v2")
            assert created["spec"] == {"dimensions": {"size": "4"}}
            # Stored in v1: read in v1 it has the v1 field, converted by our webhook.
            in_v1 = await api(control_plane, "GET", base.format("v1") + "/square")
            assert in_v1["apiVersion"] == f"{GROUP}/v1"
            assert in_v1["spec"] == {"size": 4}
            v1_obj = {"apiVersion": f"{GROUP}/v1", "kind": "Shape",
                      "metadata": {"name": "circle", "namespace": namespace},
                      "spec": {"size": 9}}  # fmt: skip
            await api(control_plane, "POST", base.format("v1"), v1_obj)
            in_v2 = await api(control_plane, "GET", base.format("v2") + "/circle")
            assert in_v2["spec"] == {"dimensions": {"size": "9"}}
            listed = await api(control_plane, "GET", base.format("v2"))
            sizes = {i["metadata"]["name"]: i["spec"] for i in listed["items"]}
            assert sizes == {"square": {"dimensions": {"size": "4"}},
                             "circle": {"dimensions": {"size": "9"}}}  # fmt: skip
            assert f"{GROUP}/v2->{GROUP}/v1" in converter.calls
            assert f"{GROUP}/v1->{GROUP}/v2" in converter.calls
            # With the server down, a read in the other version fails with the reason.
        with pytest.raises(controlplane.ApiError) as failed:
            await api(control_plane, "GET", base.format("v2") + "/circle")
        assert "conversion webhook for" in str(failed.value.body.get("message"))
    finally:
        await srv.client.close()
        await api(control_plane, "DELETE", f"{CRDS}/{crd_name}")


async def _crd_bundle(cp: controlplane.ControlPlane, name: str) -> str | None:
    crd = await api(cp, "GET", f"{CRDS}/{name}")
    return crd["spec"]["conversion"]["webhook"]["clientConfig"].get("caBundle")  # type: ignore[no-any-return]


async def test_failure_policy_fail_refuses_and_ignore_admits_with_the_server_down(
    control_plane: controlplane.ControlPlane, namespace: str, tmp_path: pathlib.Path
) -> None:
    [port] = controlplane.free_ports(1)
    srv = server.Server(self_signed(tmp_path, port))
    server.register_for(srv, CONFIGMAPS, validator=NoForbiddenKeys())
    url = f"https://127.0.0.1:{port}{server.validate_path(CONFIGMAPS)}"
    stop = asyncio.Event()
    task = asyncio.create_task(srv.start(stop))
    try:
        await helpers.eventually(lambda: srv.address is not None or task.done(), 10, "listening")
        assert srv.ca_bundle is not None
        configs = {
            policy: webhook_config(
                "ValidatingWebhookConfiguration", f"{policy.lower()}-{namespace}", namespace,
                url, ca=srv.ca_bundle, failure_policy=policy,
                object_selector={"matchLabels": {"policy": policy}},
            )
            for policy in ("Fail", "Ignore")
        }  # fmt: skip

        def labelled(name: str, policy: str) -> dict[str, Any]:
            obj = configmap(name, namespace, forbidden="1")
            obj["metadata"]["labels"] = {"policy": policy}
            return obj

        async with contextlib.AsyncExitStack() as stack:
            for config in configs.values():
                await stack.enter_async_context(installed(control_plane, config))
            for policy in configs:
                # While the server runs, both refuse what the validator refuses.
                message = await until_refused(control_plane, namespace, labelled("up", policy))
                assert "key 'forbidden' is not allowed" in message
            stop.set()
            await asyncio.wait_for(task, 10)
            message = await refused(control_plane, namespace, labelled("down", "Fail"))
            assert f'failed calling webhook "fail-{namespace}.test.rayservice.dev"' in message
            assert "connection refused" in message
            path = f"/api/v1/namespaces/{namespace}/configmaps"
            admitted = await api(control_plane, "POST", path, labelled("down", "Ignore"))
            assert admitted["data"] == {"forbidden": "1"}
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)


async def test_certificates_rotated_while_the_apiserver_keeps_calling(
    control_plane: controlplane.ControlPlane, namespace: str, tmp_path: pathlib.Path
) -> None:
    [port] = controlplane.free_ports(1)
    name = f"rotate-{namespace}"
    srv = server.Server(self_signed(tmp_path, port))
    seen: list[str] = []

    class Counting:
        async def validate_create(
            self, obj: dict[str, Any], request: admission.Request
        ) -> list[str]:
            seen.append(obj["metadata"]["name"])
            return []

        async def validate_update(self, old: Any, obj: Any, request: Any) -> list[str]:
            return []

        async def validate_delete(self, old: Any, request: Any) -> list[str]:
            return []

    server.register_for(srv, CONFIGMAPS, validator=Counting())
    url = f"https://127.0.0.1:{port}{server.validate_path(CONFIGMAPS)}"
    async with serving(srv):
        assert srv.reloader is not None
        old_ca = tls.CA(tmp_path / "ca.crt", tmp_path / "ca.key")
        old_ca_pem = old_ca.bundle()
        config = webhook_config("ValidatingWebhookConfiguration", name, namespace, url,
                                ca=old_ca_pem)  # fmt: skip
        path = f"/api/v1/namespaces/{namespace}/configmaps"
        async with installed(control_plane, config):
            await helpers.eventually(lambda: _created_and_seen(control_plane, path, namespace,
                                                               seen), 15, "calls")  # fmt: skip
            created = 0
            stop_load = asyncio.Event()

            async def load() -> None:
                # Failures propagate: failurePolicy Fail refuses if a call fails.
                nonlocal created
                while not stop_load.is_set():
                    await api(control_plane, "POST", path, configmap(f"load-{created}", namespace))
                    created += 1

            loader = asyncio.create_task(load())
            first = await asyncio.to_thread(_serial, port, tmp_path / "ca.crt")

            # 1. The serving certificate renewed by the same CA.
            await asyncio.sleep(1)
            await asyncio.to_thread(tls.issue, old_ca, tmp_path, ip_addresses=["127.0.0.1"])
            await helpers.eventually(lambda: srv.reloader.reloads == 1, 5, "reloaded")  # type: ignore[union-attr]
            second = await asyncio.to_thread(_serial, port, tmp_path / "ca.crt")
            assert second != first
            await asyncio.sleep(1)

            # 2. A new CA: trusted first (both in the bundle), then serving with it.
            new_dir = tmp_path / "new"
            new_ca = await asyncio.to_thread(tls.new_ca, new_dir)
            current = await api(control_plane, "GET",
                                f"{ADMISSION}/validatingwebhookconfigurations/{name}")  # fmt: skip
            both = base64.b64encode(old_ca_pem + new_ca.bundle()).decode()
            current["webhooks"][0]["clientConfig"]["caBundle"] = both
            await api(control_plane, "PUT",
                      f"{ADMISSION}/validatingwebhookconfigurations/{name}", current)  # fmt: skip
            await asyncio.sleep(2)  # the API server picks the new bundle up from its watch
            await asyncio.to_thread(tls.issue, new_ca, tmp_path, ip_addresses=["127.0.0.1"])
            await helpers.eventually(lambda: srv.reloader.reloads == 2, 5, "reloaded")  # type: ignore[union-attr]
            assert await asyncio.to_thread(_serial, port, new_ca.cert) not in (first, second)
            calls_before = len(seen)
            await asyncio.sleep(2)
            stop_load.set()
            await asyncio.wait_for(loader, 15)
            assert len(seen) > calls_before, "the API server stopped calling after the CA change"
            assert created >= 10, created
            names = {f"load-{i}" for i in range(created)}
            assert names <= set(seen), "an object was admitted without a webhook call"


async def _created_and_seen(
    cp: controlplane.ControlPlane, path: str, namespace: str, seen: list[str]
) -> bool:
    name = f"probe-{secrets.token_hex(3)}"
    await api(cp, "POST", path, configmap(name, namespace))
    return name in seen


def _serial(port: int, ca: pathlib.Path) -> int:
    context = ssl.create_default_context(cafile=str(ca))
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as conn,
    ):
        cert = conn.getpeercert()
        assert cert is not None
        return int(str(cert["serialNumber"]), 16)


class Gate:
    """A validator that holds each review until :attr:`open` is set."""

    def __init__(self) -> None:
        self.open = asyncio.Event()
        self.holding = 0

    async def validate_create(self, obj: dict[str, Any], request: admission.Request) -> list[str]:
        self.holding += 1
        await self.open.wait()
        return []

    async def validate_update(
        self, old: dict[str, Any], obj: dict[str, Any], request: admission.Request
    ) -> list[str]:
        return []

    async def validate_delete(self, old: dict[str, Any], request: admission.Request) -> list[str]:
        return []


async def test_a_busy_server_answers_429_and_the_api_server_retries_after_retry_after(
    control_plane: controlplane.ControlPlane, namespace: str, tmp_path: pathlib.Path
) -> None:
    [port] = controlplane.free_ports(1)
    options = dataclasses.replace(
        self_signed(tmp_path, port), limits=intake.Limits(small_slots=1, wait=0.2)
    )
    srv = server.Server(options)
    server.register_for(srv, CONFIGMAPS, validator=NoForbiddenKeys())
    gate = Gate()
    srv.register("/gate", admission.validating(gate))
    validate = server.validate_path(CONFIGMAPS)
    async with serving(srv):
        assert srv.ca_bundle is not None
        config = webhook_config("ValidatingWebhookConfiguration", f"busy-{namespace}",
                                namespace, f"https://127.0.0.1:{port}{validate}",
                                ca=srv.ca_bundle)  # fmt: skip
        async with installed(control_plane, config):
            await until_refused(control_plane, namespace, configmap("x", namespace, forbidden="1"))
            # Someone holds the one slot for small bodies; it is freed 0.6 s from now.
            context = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))
            review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                      "request": {"uid": "held", "operation": "CREATE",
                                  "object": {"metadata": {"name": "held"}}}}  # fmt: skip

            async def hold() -> int:
                async with aiohttp.ClientSession() as session, session.post(
                    f"https://127.0.0.1:{port}/gate", json=review, ssl=context
                ) as response:  # fmt: skip
                    return response.status

            held = asyncio.create_task(hold())
            await helpers.eventually(lambda: gate.holding == 1, 10, "the slot held")
            asyncio.get_running_loop().call_later(0.6, gate.open.set)
            before = metrics.registry.get_sample_value(
                "controller_runtime_webhook_requests_total", {"webhook": validate, "code": "429"}
            ) or 0.0  # fmt: skip
            created = await api(control_plane, "POST", f"/api/v1/namespaces/{namespace}/configmaps",
                                configmap("busy", namespace, ok="1"))  # fmt: skip
            assert created["data"] == {"ok": "1"}
            assert await held == 200
            # The API server's first call waited 0.2 s and was answered 429, Retry-After: 1;
            # client-go's REST client called again a second later, once the slot was free.
            after = metrics.registry.get_sample_value(
                "controller_runtime_webhook_requests_total", {"webhook": validate, "code": "429"}
            )  # fmt: skip
            assert after is not None
            assert after >= before + 1
