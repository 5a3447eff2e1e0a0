"""The control plane is real and complete enough for the operator."""

from __future__ import annotations

import ipaddress
import json
import pathlib
import subprocess
import sys

import pytest
from kubernetes_asyncio import client as k8s

from runtime.testing import controlplane
from tests.integration import helpers

ROOT = pathlib.Path(__file__).parents[2]
GROUP, VERSION, PLURAL = "test.rayservice.dev", "v1", "widgets"


def pinned(key: str) -> str:
    for line in (ROOT / "hack/controlplane/versions.env").read_text().splitlines():
        if line.startswith(f"{key}="):
            return line.split("=", 1)[1].strip()
    raise KeyError(key)


def widget(name: str, size: int = 1) -> dict[str, object]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Widget",
        "metadata": {"name": name},
        "spec": {"size": size},
    }


async def test_version_is_the_pinned_one(control_plane: controlplane.ControlPlane) -> None:
    version = control_plane.request("GET", "/version")
    assert version["gitVersion"] == pinned("K8S_VERSION")
    assert version["gitTreeState"] == "clean"


async def test_crd_crud_with_status_subresource(api_client: k8s.ApiClient, namespace: str) -> None:
    api = k8s.CustomObjectsApi(api_client)
    args = (GROUP, VERSION, namespace, PLURAL)
    created = await api.create_namespaced_custom_object(*args, widget("w1"), _request_timeout=10)
    assert created["spec"] == {"size": 1}
    assert "status" not in created

    created["status"] = {"phase": "Ready"}
    with_status = await api.replace_namespaced_custom_object_status(
        *args, "w1", created, _request_timeout=10
    )
    assert with_status["status"] == {"phase": "Ready"}
    assert with_status["metadata"]["generation"] == 1, "a status write is not a spec change"

    # The main resource ignores status; the status subresource ignores spec.
    with_status["spec"]["size"] = 5
    with_status["status"] = {"phase": "Ignored"}
    updated = await api.replace_namespaced_custom_object(
        *args, "w1", with_status, _request_timeout=10
    )
    assert updated["spec"]["size"] == 5
    assert updated["status"] == {"phase": "Ready"}
    assert updated["metadata"]["generation"] == 2

    listed = await api.list_namespaced_custom_object(*args, _request_timeout=10)
    assert [item["metadata"]["name"] for item in listed["items"]] == ["w1"]
    await api.delete_namespaced_custom_object(*args, "w1", _request_timeout=10)
    with pytest.raises(k8s.ApiException) as info:
        await api.get_namespaced_custom_object(*args, "w1", _request_timeout=10)
    assert info.value.status == 404


async def test_invalid_custom_object_is_rejected_by_schema(
    api_client: k8s.ApiClient, namespace: str
) -> None:
    api = k8s.CustomObjectsApi(api_client)
    with pytest.raises(k8s.ApiException) as info:
        await api.create_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, widget("bad", size=-1), _request_timeout=10
        )
    assert info.value.status == 422


async def test_status_write_with_stale_resource_version_conflicts(
    api_client: k8s.ApiClient, namespace: str
) -> None:
    api = k8s.CustomObjectsApi(api_client)
    args = (GROUP, VERSION, namespace, PLURAL)
    stale = await api.create_namespaced_custom_object(*args, widget("w2"), _request_timeout=10)
    fresh = dict(stale, status={"phase": "A"})
    await api.replace_namespaced_custom_object_status(*args, "w2", fresh, _request_timeout=10)
    stale["status"] = {"phase": "B"}
    with pytest.raises(k8s.ApiException) as info:
        await api.replace_namespaced_custom_object_status(*args, "w2", stale, _request_timeout=10)
    assert info.value.status == 409


async def test_watch_from_a_compacted_resource_version_is_gone(
    control_plane: controlplane.ControlPlane, api_client: k8s.ApiClient, namespace: str
) -> None:
    api = k8s.CustomObjectsApi(api_client)
    args = (GROUP, VERSION, namespace, "gadgets")  # served without the watch cache
    first = await api.create_namespaced_custom_object(
        *args, dict(widget("w3"), kind="Gadget"), _request_timeout=10
    )
    old_rv = first["metadata"]["resourceVersion"]
    current = first
    for size in range(2, 6):
        current["spec"]["size"] = size
        current = await api.replace_namespaced_custom_object(
            *args, "w3", current, _request_timeout=10
        )
    control_plane.compact_etcd()
    response = await api.list_namespaced_custom_object(
        *args, watch=True, resource_version=old_rv, timeout_seconds=5,
        _preload_content=False, _request_timeout=15,
    )  # fmt: skip
    async with response:
        line = await response.content.readline()
    event = json.loads(line)
    assert event["type"] == "ERROR"
    assert event["object"]["code"] == 410


async def test_deleting_an_owner_garbage_collects_dependents(
    api_client: k8s.ApiClient, namespace: str
) -> None:
    core = k8s.CoreV1Api(api_client)
    owner = await core.create_namespaced_config_map(
        namespace, {"metadata": {"name": "owner"}}, _request_timeout=10
    )
    reference = {
        "apiVersion": "v1", "kind": "ConfigMap", "name": "owner",
        "uid": owner.metadata.uid, "controller": True, "blockOwnerDeletion": True,
    }  # fmt: skip
    await core.create_namespaced_config_map(
        namespace,
        {"metadata": {"name": "dependent", "ownerReferences": [reference]}},
        _request_timeout=10,
    )
    await core.delete_namespaced_config_map("owner", namespace, _request_timeout=10)

    async def dependent_gone() -> bool:
        names = await core.list_namespaced_config_map(namespace, _request_timeout=10)
        return "dependent" not in {item.metadata.name for item in names.items}

    await helpers.eventually(dependent_gone, 60, "garbage collection of the dependent")


async def make_running_pod(core: k8s.CoreV1Api, namespace: str, name: str) -> k8s.V1Pod:
    await core.create_namespaced_pod(
        namespace,
        {
            "metadata": {"name": name, "labels": {"app": name}},
            "spec": {"containers": [{"name": "main", "image": "example.invalid/none:1"}]},
        },
        _request_timeout=10,
    )

    async def running() -> k8s.V1Pod | None:
        pod = await core.read_namespaced_pod(name, namespace, _request_timeout=10)
        return pod if pod.status.phase == "Running" and pod.status.pod_ip else None

    pod: k8s.V1Pod = await helpers.eventually(running, 60, f"pod {name} Running")
    return pod


async def test_unscheduled_pod_becomes_running_with_a_pod_cidr_ip(
    control_plane: controlplane.ControlPlane, api_client: k8s.ApiClient, namespace: str
) -> None:
    pod = await make_running_pod(k8s.CoreV1Api(api_client), namespace, "p1")
    assert pod.spec.node_name.startswith("kwok-node-")
    assert control_plane.pod_network is not None
    network = ipaddress.ip_network(control_plane.pod_network.cidr)
    assert ipaddress.ip_address(pod.status.pod_ip) in network
    ready = {c.type: c.status for c in pod.status.conditions}
    assert ready["Ready"] == "True"


async def test_service_gets_an_endpointslice_with_the_ready_pod(
    api_client: k8s.ApiClient, namespace: str
) -> None:
    core = k8s.CoreV1Api(api_client)
    pod = await make_running_pod(core, namespace, "p2")
    await core.create_namespaced_service(
        namespace,
        {
            "metadata": {"name": "svc"},
            "spec": {"selector": {"app": "p2"}, "ports": [{"name": "http", "port": 8265}]},
        },
        _request_timeout=10,
    )
    discovery = k8s.DiscoveryV1Api(api_client)

    async def ready_addresses() -> set[str]:
        slices = await discovery.list_namespaced_endpoint_slice(
            namespace, label_selector="kubernetes.io/service-name=svc", _request_timeout=10
        )
        return {
            address
            for item in slices.items
            for endpoint in item.endpoints or []
            if endpoint.conditions.ready
            for address in endpoint.addresses
        }

    addresses = await helpers.eventually(ready_addresses, 60, "an EndpointSlice for svc")
    assert addresses == {pod.status.pod_ip}


def test_listener_in_the_pod_network_answers_for_pod_ips(
    control_plane: controlplane.ControlPlane,
) -> None:
    network = control_plane.pod_network
    assert network is not None
    listener = network.spawn(
        [
            sys.executable,
            "-c",
            "import socket\n"
            "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
            "s.bind(('0.0.0.0', 18265)); s.listen()\n"
            "print('listening', flush=True)\n"
            "while True:\n"
            "    c, _ = s.accept(); c.sendall(c.getsockname()[0].encode()); c.close()\n",
        ]
    )
    try:
        for index in (7, 300):
            ip = network.pod_ip(index)
            route = subprocess.run(
                ["ip", "route", "get", ip], capture_output=True, text=True, check=True
            ).stdout
            assert f"dev {network.host_veth}" in route

            def answer(ip: str = ip) -> bytes | None:
                try:
                    with network.connect(ip, 18265, timeout=2) as conn:
                        return conn.recv(64)
                except ConnectionRefusedError:
                    return None  # not listening yet

            assert helpers.eventually_sync(answer, 10, f"listener on {ip}") == ip.encode()
    finally:
        listener.kill()
        listener.wait()


async def test_the_harness_dials_only_loopback_and_its_pod_cidr(
    control_plane: controlplane.ControlPlane,
) -> None:
    network = control_plane.pod_network
    assert network is not None
    for forbidden in ("127.0.0.1", "198.18.255.1", "198.19.0.1"):
        with pytest.raises(PermissionError):
            network.connect(forbidden, 80)
    assert control_plane.connections, "the harness has talked to the apiserver"
    pod_cidr = ipaddress.ip_network(network.cidr)
    for host, _port in control_plane.connections:
        address = ipaddress.ip_address(host)
        assert address.is_loopback or address in pod_cidr, host


def test_unix_channel_reaches_a_process_in_the_namespace(
    control_plane: controlplane.ControlPlane,
) -> None:
    network = control_plane.pod_network
    assert network is not None
    network.publish({"pods": ["early"]})
    reader = network.spawn(
        [
            sys.executable,
            "-c",
            "import socket, sys\n"
            "s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])\n"
            "f = s.makefile()\n"
            "print(f.readline().strip(), flush=True); print(f.readline().strip(), flush=True)\n",
            str(network.socket_path),
        ],
        log_path=network.directory / "reader.log",
    )
    log = network.directory / "reader.log"
    helpers.eventually_sync(lambda: "early" in log.read_text(), 10, "the replayed message")
    network.publish({"pods": ["late"]})
    reader.wait(10)
    lines = (network.directory / "reader.log").read_text().splitlines()
    assert [json.loads(line) for line in lines] == [{"pods": ["early"]}, {"pods": ["late"]}]
