"""The test kit (runtime.testing.pytest_plugin, runtime.testing.runner) on the real control
plane: what ``kube_manager`` promises about up, failures, stop and logs; the kit as a user
gets it (a fresh pytest run, loaded as a plugin, binaries from envtest's
``KUBEBUILDER_ASSETS`` layout with etcd, kube-apiserver and kubectl only)."""

from __future__ import annotations

import asyncio
import datetime
import pathlib
import socket
import textwrap
from typing import Any

import aiohttp
import pytest
import structlog
import yaml

import runtime
from examples import configmap_mirror
from runtime.client import client as client_
from runtime.client import errors
from runtime.testing import controlplane, pytest_plugin, runner
from tests.integration import helpers

ROOT = pathlib.Path(__file__).parents[2]
CM = configmap_mirror.CONFIGMAPS
ENVTEST_BINARIES = ("etcd", "kube-apiserver", "kubectl")


def configmap(namespace: str, name: str, **labels: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "data": {"k": name}}  # fmt: skip


async def readyz(address: tuple[str, int]) -> int:
    host, port = address
    assert host == "127.0.0.1"
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{port}/readyz", timeout=aiohttp.ClientTimeout(5)) as r,
    ):
        return r.status


class Failing:
    """A runnable that fails once the manager is up (and ``fail`` is set)."""

    needs_leader_election = False

    def __init__(self) -> None:
        self.fail = asyncio.Event()

    async def start(self, stop: asyncio.Event) -> None:
        await self.fail.wait()
        raise ValueError("the runnable broke")


async def test_up_means_synced_and_reconciling_and_the_end_stops_it(
    kube_manager: pytest_plugin.ManagerFactory, kube_client: client_.Client, kube_namespace: str
) -> None:
    async with kube_manager(configmap_mirror.build) as run:
        manager = run.manager
        assert manager.cache.has_synced()
        assert manager.probe_address is not None
        assert await readyz(manager.probe_address) == 200
        await kube_client.create(configmap(kube_namespace, "a", mirror="true"))

        async def mirrored() -> bool:
            try:
                return bool(await kube_client.get(CM, kube_namespace, "a-mirror"))
            except errors.NotFound:
                return False

        await helpers.eventually(mirrored, within=20, what="a-mirror")
        address = manager.probe_address
    with pytest.raises(ConnectionRefusedError), socket.create_connection(address, timeout=2):
        pass  # the probe server is gone with the manager


async def test_the_manager_runs_only_in_the_test_namespace_by_default(
    kube_manager: pytest_plugin.ManagerFactory, kube_namespace: str
) -> None:
    async with kube_manager(configmap_mirror.build) as run:
        assert run.manager.options.namespace == kube_namespace
        with pytest.raises(runtime.cache.NamespaceNotWatched):
            await run.manager.cache.list(CM, "default")
    async with kube_manager(configmap_mirror.build, namespace=None) as run:
        assert run.manager.options.namespace is None
        assert await run.manager.cache.list(CM, "default") is not None


async def test_a_failure_while_the_body_runs_is_raised_when_it_ends(
    kube_manager: pytest_plugin.ManagerFactory,
) -> None:
    failing = Failing()

    async def body() -> None:
        async with kube_manager(lambda m: m.add(failing)) as run:
            failing.fail.set()
            await helpers.eventually(lambda: _ended(run), within=20, what="the manager ended")
            with pytest.raises(RuntimeError, match="failed"):
                run.check()  # raised on demand, too

    with pytest.raises(RuntimeError, match="failed") as caught:
        await body()
    assert isinstance(caught.value.__cause__, ValueError)


def _ended(run: runner.Running) -> bool:
    try:
        run.check()
    except BaseException:
        return True
    return False


async def test_a_body_failure_comes_first_and_the_manager_s_is_chained(
    kube_manager: pytest_plugin.ManagerFactory,
) -> None:
    failing = Failing()

    async def body() -> None:
        async with kube_manager(lambda m: m.add(failing)) as run:
            failing.fail.set()
            await helpers.eventually(lambda: _ended(run), within=20, what="the manager ended")
            raise AssertionError("the test's own failure")

    with pytest.raises(RuntimeError, match="failed") as caught:
        await body()
    assert isinstance(caught.value.__context__, AssertionError)


async def test_caches_that_cannot_sync_fail_the_with_statement(
    kube_manager: pytest_plugin.ManagerFactory,
) -> None:
    absent = runtime.client.Resource("absent.example.com", "v1", "Absent", "absents")

    def setup(manager: runtime.Manager) -> None:
        manager.client.registry.register(absent)
        runtime.Builder(manager).for_(absent).named("absent").complete(
            configmap_mirror.Mirror(manager)
        )

    with pytest.raises(TimeoutError, match="caches did not sync"):
        async with kube_manager(setup, cache_sync_timeout=1.0):
            pytest.fail("the manager cannot be up")


async def test_a_standby_is_not_up_as_leader_but_is_up_as_synced(
    kube_manager: pytest_plugin.ManagerFactory, kube_client: client_.Client, kube_namespace: str
) -> None:
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")  # MicroTime
    await kube_client.create({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "held", "namespace": kube_namespace},
        "spec": {"holderIdentity": "someone-else", "leaseDurationSeconds": 3600,
                 "acquireTime": now, "renewTime": now},
    })  # fmt: skip
    election: dict[str, Any] = {"leader_election": True, "leader_election_id": "held",
                "leader_election_namespace": kube_namespace}  # fmt: skip
    with pytest.raises(runner.NotUp):
        async with kube_manager(configmap_mirror.build, up_timeout=2.0, **election):
            pytest.fail("a standby does not lead")
    async with kube_manager(configmap_mirror.build, leader=False, **election) as run:
        assert run.manager.cache.has_synced()
        assert run.manager.elector is not None
        assert not run.manager.elector.elected.is_set()


async def test_the_log_holds_the_manager_s_lines_and_not_the_test_s(
    kube_manager: pytest_plugin.ManagerFactory,
) -> None:
    async with kube_manager(configmap_mirror.build) as run:
        structlog.get_logger("the-test").info("a line of the test body")
    events = [record.event for record in run.log]
    assert "caches synced" in events
    assert "stopped" in events  # the shutdown is recorded too
    assert "a line of the test body" not in events
    assert any(r.fields.get("controller") == "configmap-mirror" for r in run.log)


@pytest.fixture
def envtest_assets(tmp_path: pathlib.Path, bin_dir: pathlib.Path) -> pathlib.Path:
    """envtest's layout: a directory holding etcd, kube-apiserver and kubectl, no more."""
    assets = tmp_path / "assets"
    assets.mkdir()
    for name in ENVTEST_BINARIES:
        (assets / name).symlink_to(bin_dir / name)
    return assets


def test_a_component_missing_from_the_assets_fails_before_anything_starts(
    envtest_assets: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(controlplane.BIN_DIR_ENV, raising=False)
    monkeypatch.setenv(controlplane.ENVTEST_ENV, str(envtest_assets))
    cp = controlplane.ControlPlane(controlplane.Options(controller_manager=True))
    with pytest.raises(controlplane.ControlPlaneError, match="kube-controller-manager") as caught:
        cp.start()
    assert caught.value.component == "kube-controller-manager"
    assert cp.dir is None  # stopped and cleaned up
    assert cp.api_port == 0  # nothing was started


INNER_TESTS = """
import runtime
from examples import configmap_mirror


async def test_fixtures(kube_client, kube_namespace, fake_kube_client):
    cm = {"apiVersion": "v1", "kind": "ConfigMap",
          "metadata": {"name": "a", "namespace": kube_namespace}}
    await kube_client.create(cm)
    assert (await kube_client.get(configmap_mirror.CONFIGMAPS, kube_namespace, "a"))
    assert await fake_kube_client.list(configmap_mirror.CONFIGMAPS, kube_namespace) is not None


async def test_failing(kube_manager):
    async with kube_manager(configmap_mirror.build):
        assert False, "the test's own failure"
"""


def test_a_user_s_run_on_envtest_assets_shows_the_manager_log_of_a_failing_test(
    pytester: pytest.Pytester, envtest_assets: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(controlplane.BIN_DIR_ENV, raising=False)
    monkeypatch.setenv(controlplane.ENVTEST_ENV, str(envtest_assets))
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    pytester.makepyfile(test_inner=textwrap.dedent(INNER_TESTS))
    result = pytester.runpytest_subprocess(
        "-p",
        "runtime.testing.pytest_plugin",
        "-o",
        "asyncio_mode=auto",
        "-p",
        "no:cacheprovider",
        timeout=240,
    )
    # test_fixtures passing shows the API-only control plane from KUBEBUILDER_ASSETS works.
    result.assert_outcomes(passed=1, failed=1)
    output = result.stdout.str()
    assert "Captured manager log (1)" in output
    section = output.split("Captured manager log (1)", 1)[1]
    assert "caches synced" in section
    assert "controller='configmap-mirror'" in section


def test_a_namespace_the_test_deleted_is_no_teardown_error(
    kube_control_plane: controlplane.ControlPlane, kube_namespace: str
) -> None:
    """The check is the fixture's teardown, which deletes it again: 404, now it is gone
    (kube-controller-manager's namespace controller removes it; the suite runs one)."""
    path = f"/api/v1/namespaces/{kube_namespace}"
    kube_control_plane.request("DELETE", path)

    def gone() -> bool:
        try:
            kube_control_plane.request("GET", path)
        except controlplane.ApiError as exc:
            return exc.status == 404
        return False

    helpers.eventually_sync(gone, within=60, what="the namespace gone")


def test_manager_options_default_to_the_test_namespace_on_loopback() -> None:
    options = pytest_plugin.manager_options("test-ns")
    assert options.namespace == "test-ns"
    assert options.metrics_bind_address == "127.0.0.1:0"
    assert options.health_probe_bind_address == "127.0.0.1:0"
    assert options.graceful_shutdown_timeout == 10.0
    overridden = pytest_plugin.manager_options("test-ns", namespace=None, namespaces=["a", "b"])
    assert overridden.namespace is None
    assert overridden.namespaces == ("a", "b")


def gadget_crd(plural: str) -> dict[str, Any]:
    schema = {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}
    return {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.kit.example.com"},
        "spec": {"group": "kit.example.com", "scope": "Namespaced",
                 "names": {"plural": plural, "singular": plural[:-1], "kind": plural.title()[:-1]},
                 "versions": [{"name": "v1", "served": True, "storage": True, "schema": schema}]},
    }  # fmt: skip


def test_install_crds_takes_a_mapping_several_a_file_or_a_directory(
    kube_control_plane: controlplane.ControlPlane, tmp_path: pathlib.Path
) -> None:
    cp = kube_control_plane
    assert cp.install_crds(gadget_crd("gadgets")) == ["gadgets.kit.example.com"]
    assert cp.install_crds([gadget_crd("gizmos"), {"kind": "ConfigMap"}]) == [
        "gizmos.kit.example.com"
    ]
    (tmp_path / "one.yaml").write_text(yaml.safe_dump(gadget_crd("widgetas")))
    (tmp_path / "notes.txt").write_text("not a manifest")
    assert cp.install_crds(tmp_path / "one.yaml") == ["widgetas.kit.example.com"]
    assert cp.install_crds(str(tmp_path)) == ["widgetas.kit.example.com"]  # again: replaced
    for plural in ("gadgets", "gizmos", "widgetas"):

        def listed(plural: str = plural) -> bool:
            try:  # a replaced CRD's storage answers 429 while it re-initializes
                return cp.request("GET", f"/apis/kit.example.com/v1/{plural}")["items"] == []
            except controlplane.ApiError as exc:
                if exc.status != 429:
                    raise
                return False

        helpers.eventually_sync(listed, within=30, what=f"{plural} served")
