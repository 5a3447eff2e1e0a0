"""Fixtures for tests against the real control plane.

The control plane and the namespaces are the test kit's
(:mod:`runtime.testing.pytest_plugin`); the root ``conftest.py`` says which
control plane (one for the whole session: every component, the pod network,
``testdata/crds``); this file keeps the short names these tests use:

- ``control_plane`` (session): the kit's ``kube_control_plane``.
- ``namespace``: the kit's ``kube_namespace``, a fresh namespace per test.
- ``api_client``: a kubernetes-asyncio ``ApiClient`` configured from the kubeconfig.
- ``client``: our :class:`runtime.client.Client` from the kubeconfig, with the test
  kinds (``helpers.WIDGETS``, ``helpers.GADGETS``) registered.
"""

from __future__ import annotations

import pathlib
from collections.abc import AsyncIterator

import pytest
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio import config as k8s_config

from runtime.client import client as client_
from runtime.testing import controlplane
from tests.integration import helpers

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
def control_plane(kube_control_plane: controlplane.ControlPlane) -> controlplane.ControlPlane:
    return kube_control_plane


@pytest.fixture
def namespace(kube_namespace: str) -> str:
    return kube_namespace


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
