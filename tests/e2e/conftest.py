"""Fixtures of the end-to-end suite (``make e2e``; also part of ``make test``).

- ``world`` (package-scoped: stopped after the suite's last test):
  :class:`tests.e2e.harness.World` - a control plane started here, the generated CRDs
  and RBAC, the Ray simulator; or the cluster ``$KUBECONFIG`` names.
- ``managers``: starts ``rayservice-manager`` processes for a test
  (:meth:`Managers.start`), stops them afterwards (and fails the test if one exited
  on its own with an error), and attaches their logs to a failing test's report. A
  test that takes it without starting one gets one in the default mode (pod IP;
  ``$E2E_DASHBOARD_MODE`` overrides it). Against an external cluster the operator is
  already deployed there, so nothing is started.
- ``traefik``: a real Gateway API implementation (:mod:`tests.support.gateway`), started
  once (with the Gateway API CRDs, before the managers of the test that first needs it),
  handed to a test once no earlier test's HTTPRoute is left;
- ``namespace``: a fresh namespace per test (deleted afterwards); ``api``: an admin
  :class:`runtime.client.Client`.
"""

from __future__ import annotations

import pathlib
import secrets
from collections.abc import AsyncIterator, Iterator

import pytest

from controllers.rayservice import gateway as rayservice_gateway
from runtime.client import client as client_
from tests.e2e import harness, realpods
from tests.support import gateway, tools

E2E_TIMEOUT = 300


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = pathlib.Path(__file__).parent
    kept, dropped = [], []
    for item in items:
        if pathlib.Path(str(item.fspath)).is_relative_to(here):
            item.add_marker(pytest.mark.e2e)
            if item.get_closest_marker("timeout") is None:
                item.add_marker(pytest.mark.timeout(E2E_TIMEOUT * harness.TIME_FACTOR))
            # Against $KUBECONFIG's cluster the deployed operator has one dashboard mode:
            # a scenario parametrised over the modes of the managers it would start runs
            # once; one that needs what only the suite's own cluster has (its control plane,
            # pod network, Redis, gateway or managers: `own_cluster`) is not collected.
            params = getattr(item, "callspec", None)
            if realpods.enabled() and (
                (params and params.indices.get("mode", 0) > 0)
                or item.get_closest_marker("own_cluster") is not None
            ):
                dropped.append(item)
                continue
        kept.append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    outcome = yield
    report = outcome.get_result()
    managers = getattr(item, "_e2e_managers", None)
    if report.failed and managers is not None:
        for manager in managers.started:
            report.sections.append((f"manager {manager.name} log", manager.tail(200)))


@pytest.fixture(scope="session")
def bin_dir() -> pathlib.Path:
    return tools.built("hack/controlplane/build.sh")


@pytest.fixture(scope="package")  # torn down after the suite's last test, not the session's
def world(
    bin_dir: pathlib.Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[harness.World]:
    with harness.World.started(bin_dir, tmp_path_factory.mktemp("e2e-logs")) as w:
        yield w


@pytest.fixture
async def managers(
    world: harness.World, request: pytest.FixtureRequest
) -> AsyncIterator[harness.Managers]:
    m = harness.Managers(world, request.node.name)
    request.node._e2e_managers = m
    yield m
    problems = m.stop_all()
    assert not problems, problems


@pytest.fixture
async def manager(managers: harness.Managers) -> None:
    """One manager in the default mode, leading (nothing to start against a cluster)."""
    await managers.lead()


@pytest.fixture
async def api(world: harness.World) -> AsyncIterator[client_.Client]:
    c = await world.client()
    async with c:
        yield c


@pytest.fixture
async def namespace(api: client_.Client) -> AsyncIterator[str]:
    name = f"e2e-{secrets.token_hex(4)}"
    await api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    yield name
    await api.delete(harness.NAMESPACES, None, name)


@pytest.fixture(scope="package")
def running_traefik(
    world: harness.World, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[gateway.Traefik]:
    """The Gateway API CRDs, the GatewayClass and Traefik, started by the first test that
    needs them and kept for the suite (one Traefik per control plane and class; the CRDs
    and the class stay: later managers see the Gateway API served, which changes nothing
    for other RayServices)."""
    if world.cp is None:
        pytest.fail(
            "not marked own_cluster, but it starts its own gateway: "
            "needs the suite's own control plane"
        )
    with gateway.running(world.cp, tmp_path_factory.mktemp("traefik")) as t:
        yield t


@pytest.fixture
async def traefik(running_traefik: gateway.Traefik, api: client_.Client) -> gateway.Traefik:
    """Traefik, once no earlier test's HTTPRoute is left (their namespaces go a moment after
    those tests): the routes have no hostnames, so two on the one listener share its
    traffic."""

    async def alone() -> bool:
        return not (await api.list(rayservice_gateway.HTTPROUTES)).items

    await harness.until(alone, 60, "no HTTPRoute left from an earlier test")
    return running_traefik
