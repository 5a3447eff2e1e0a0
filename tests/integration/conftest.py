"""Fixtures for tests against the real control plane.

- ``control_plane`` (session): etcd, kube-apiserver, kube-controller-manager,
  kube-scheduler, kwok with two fake nodes, and the pod network, built from the
  Go modules pinned in ``hack/controlplane/versions.env`` on first use. A build
  failure fails the tests with the Go error; nothing here ever skips.
- ``namespace``: a fresh namespace per test (deleted afterwards).
- ``api_client``: a kubernetes-asyncio ``ApiClient`` configured from the kubeconfig.
- ``client``: our :class:`runtime.client.Client` from the kubeconfig, with the test
  kinds (``helpers.WIDGETS``, ``helpers.GADGETS``) registered.
"""

from __future__ import annotations

import pathlib
import secrets
from collections.abc import AsyncIterator, Iterator

import pytest
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio import config as k8s_config

from runtime.client import client as client_
from runtime.testing import controlplane
from tests.integration import helpers
from tests.support import tools

CRDS = pathlib.Path(__file__).parent / "testdata" / "crds"


INTEGRATION_TIMEOUT = 300
"""Seconds per integration test, including its share of fixture set-up (the first one
starts the control plane); the unit tier's bound is pyproject's ``timeout``."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if pathlib.Path(str(item.fspath)).is_relative_to(pathlib.Path(__file__).parent):
            item.add_marker(pytest.mark.integration)
            if item.get_closest_marker("timeout") is None:
                item.add_marker(pytest.mark.timeout(INTEGRATION_TIMEOUT))


@pytest.fixture(scope="session")
def bin_dir() -> pathlib.Path:
    """Build (or reuse) the control-plane binaries; fail loudly if the build fails."""
    return tools.built("hack/controlplane/build.sh")


@pytest.fixture(scope="session")
def control_plane(bin_dir: pathlib.Path) -> Iterator[controlplane.ControlPlane]:
    options = controlplane.Options(
        bin_dir=bin_dir,
        controller_manager=True,
        scheduler=True,
        kwok=True,
        nodes=2,
        pod_network=True,
        crd_dirs=[CRDS],
        uncached_resources=["gadgets.test.rayservice.dev"],
    )
    with controlplane.running(options) as cp:
        yield cp


@pytest.fixture
def namespace(control_plane: controlplane.ControlPlane) -> Iterator[str]:
    name = f"test-{secrets.token_hex(4)}"
    control_plane.request(
        "POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                       "metadata": {"name": name}}
    )  # fmt: skip
    yield name
    control_plane.request("DELETE", f"/api/v1/namespaces/{name}")


@pytest.fixture
async def api_client(control_plane: controlplane.ControlPlane) -> AsyncIterator[k8s.ApiClient]:
    configuration = k8s.Configuration()
    await k8s_config.load_kube_config(
        config_file=str(control_plane.kubeconfig), client_configuration=configuration
    )
    async with k8s.ApiClient(configuration=configuration) as api:
        yield api


@pytest.fixture
async def client(control_plane: controlplane.ControlPlane) -> AsyncIterator[client_.Client]:
    c = await client_.Client.from_kubeconfig(control_plane.kubeconfig)
    c.registry.register(helpers.WIDGETS)
    c.registry.register(helpers.GADGETS)
    async with c:
        yield c
