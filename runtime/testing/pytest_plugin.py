"""pytest fixtures for operators written on :mod:`runtime`.

Installed with the framework as the ``pytest11`` entry point
``runtime.testing.pytest_plugin``, so pytest loads it by itself; without the
entry point, ``-p runtime.testing.pytest_plugin`` or ``pytest_plugins =
["runtime.testing.pytest_plugin"]`` in a root ``conftest.py`` load it. Every
fixture name starts with ``kube_`` (or ``fake_kube_``), so none shadows a
project's own ``client`` or ``namespace``. The async fixture needs
pytest-asyncio; without it, using that fixture fails with a message saying so
(the plugin still loads, and the other fixtures work).

Fixtures:

- ``kube_control_plane_options`` (session): the
  :class:`~runtime.testing.controlplane.Options` the control plane is started
  with. Default ``Options()``: etcd and kube-apiserver only (envtest's subset),
  binaries from ``$CONTROLPLANE_BIN_DIR`` or ``$KUBEBUILDER_ASSETS``. Override it
  in your ``conftest.py`` to install your CRDs (``crd_dirs=``) or add components.
- ``kube_control_plane`` (session): a
  :class:`~runtime.testing.controlplane.ControlPlane` started once, on loopback,
  for the whole session, and stopped at its end.
- ``kube_namespace``: a fresh namespace (``test-<random>``) per test, deleted
  after it unless the test did (without kube-controller-manager a deleted namespace stays
  ``Terminating``, and its objects stay: harmless, nothing else uses it).
- ``kube_client``: a :class:`runtime.client.Client` for the control plane's
  admin kubeconfig, closed after the test.
- ``fake_kube_client``: a :class:`~runtime.testing.fake.FakeClient` (no server).
- ``kube_manager``: a factory of background managers. ``async with
  kube_manager(setup, ...) as run:`` builds a :class:`runtime.Manager` on a
  client of its own (closed afterwards), calls each ``setup(manager)`` (where
  you register controllers, e.g. with a :class:`runtime.Builder`; their names are
  free again afterwards, see :func:`runtime.controller.names_released`), and runs it
  with :func:`runtime.testing.runner.running`: up when the block starts,
  stopped when it ends, its failure re-raised. Manager options default to the
  test's namespace only, probe and metrics servers on ephemeral ``127.0.0.1``
  ports and a 10 s shutdown budget; keyword arguments override any
  :class:`runtime.ManagerOptions` field (``namespace=None`` for all
  namespaces), ``leader=`` and ``up_timeout=`` go to the runner.

**asyncio mode.** With pytest-asyncio installed and no mode chosen by the project
(neither ``asyncio_mode`` in its configuration nor ``--asyncio-mode``), the plugin
sets pytest-asyncio's ``auto`` mode: every ``async def`` test and fixture runs on
the event loop without a marker, which is how the kit's fixtures and examples are
written. (pytest-asyncio's own default, ``strict``, would skip or fail an unmarked
``async def`` test and refuse an async fixture not declared with
``pytest_asyncio.fixture``.) Likewise ``asyncio_default_fixture_loop_scope`` is
``function`` when the project sets none (pytest-asyncio's coming default; unset, it
warns on every run). A project that chose either keeps its choice; the header of
the run says what the plugin chose (``runtime.testing: asyncio_mode=auto, ...``).

When a test fails (in set-up, call or teardown), the log of every manager it
ran through ``kube_manager`` is added to its report, one section
``Captured manager log (<n>)`` per manager (shown with pytest's captured
output; ``--show-capture=no`` hides it).
"""

from __future__ import annotations

import contextlib
import importlib
import secrets
import warnings
from collections.abc import AsyncIterator, Callable, Generator, Iterator
from typing import Any, Protocol

import pytest

from runtime import controller as controller_
from runtime import manager as manager_
from runtime.client import client as client_
from runtime.testing import controlplane, fake, runner

__all__ = [
    "ManagerFactory",
    "fake_kube_client",
    "kube_client",
    "kube_control_plane",
    "kube_control_plane_options",
    "kube_manager",
    "kube_namespace",
    "manager_options",
]

_LOGS = pytest.StashKey[list[list[runner.LogRecord]]]()
"""The logs of the managers a test ran, for its report."""

Setup = Callable[[manager_.Manager], object]


class ManagerFactory(Protocol):
    """What the ``kube_manager`` fixture is."""

    def __call__(
        self, *setups: Setup, leader: bool = True, up_timeout: float = 60.0, **options: Any
    ) -> contextlib.AbstractAsyncContextManager[runner.Running]: ...


def _async_fixture(fn: Callable[..., Any]) -> Any:
    """``pytest_asyncio.fixture``, or a fixture that says pytest-asyncio is missing."""
    try:
        pytest_asyncio = importlib.import_module("pytest_asyncio")
    except ImportError:  # pragma: no cover - installed with the framework's test extra
        pass
    else:
        return pytest_asyncio.fixture(fn)

    def missing() -> None:  # pragma: no cover - see above
        pytest.fail(f"the {fn.__name__} fixture needs pytest-asyncio", pytrace=False)

    missing.__name__ = fn.__name__
    missing.__doc__ = fn.__doc__
    return pytest.fixture(missing)


def _ini_keys(config: pytest.Config) -> set[str]:
    """The keys the project's configuration (its ini file and ``-o``) sets."""
    with warnings.catch_warnings():  # deprecated in pytest 9 for reading values; we ask
        warnings.simplefilter("ignore")  # only which keys the project set
        return set(getattr(config, "inicfg", None) or ())


def _set_ini(config: pytest.Config, key: str, value: str) -> bool:
    """Give ``key`` a value as ``-o key=value`` would; whether this pytest allowed it."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            config.inicfg[key] = value
        except (AttributeError, TypeError):  # pragma: no cover - a pytest without inicfg
            return False
    return True


_CHOSEN = pytest.StashKey[list[str]]()
"""What this plugin chose for pytest-asyncio, for the run's header."""


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """pytest-asyncio's ``auto`` mode and ``function`` fixture loop scope, each unless
    the project chose its own (module docstring)."""
    if not config.pluginmanager.hasplugin("asyncio"):
        return
    chosen: list[str] = []
    keys = _ini_keys(config)
    if config.getoption("asyncio_mode", None) is None and "asyncio_mode" not in keys:
        config.option.asyncio_mode = "auto"
        chosen.append("asyncio_mode=auto")
    scope = "asyncio_default_fixture_loop_scope"
    if scope not in keys and _set_ini(config, scope, "function"):
        chosen.append(f"{scope}=function")
    config.stash[_CHOSEN] = chosen


def pytest_report_header(config: pytest.Config) -> str | None:
    chosen = config.stash.get(_CHOSEN, [])
    if chosen:
        return f"runtime.testing: {', '.join(chosen)} (not configured by the project)"
    return None


@pytest.fixture(scope="session")
def kube_control_plane_options() -> controlplane.Options:
    """How the session's control plane starts; override it in your ``conftest.py``."""
    return controlplane.Options()


@pytest.fixture(scope="session")
def kube_control_plane(
    kube_control_plane_options: controlplane.Options,
) -> Iterator[controlplane.ControlPlane]:
    """The session's control plane, started on first use."""
    with controlplane.running(kube_control_plane_options) as cp:
        yield cp


@pytest.fixture
def kube_namespace(kube_control_plane: controlplane.ControlPlane) -> Iterator[str]:
    """A fresh namespace for this test."""
    name = f"test-{secrets.token_hex(4)}"
    body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    kube_control_plane.request("POST", "/api/v1/namespaces", body)
    yield name
    try:
        kube_control_plane.request("DELETE", f"/api/v1/namespaces/{name}")
    except controlplane.ApiError as exc:
        if exc.status != 404:  # the test may have deleted it itself
            raise


@_async_fixture
async def kube_client(
    kube_control_plane: controlplane.ControlPlane,
) -> AsyncIterator[client_.Client]:
    """A client for the control plane (admin), closed after the test."""
    assert kube_control_plane.kubeconfig is not None
    async with await client_.Client.from_kubeconfig(kube_control_plane.kubeconfig) as c:
        yield c


@pytest.fixture
def fake_kube_client() -> fake.FakeClient:
    """An in-memory API server (see :mod:`runtime.testing.fake`)."""
    return fake.FakeClient()


def manager_options(test_namespace: str, /, **overrides: Any) -> manager_.Options:
    """The options ``kube_manager`` gives a manager: named ``test-manager`` (its Lease
    ``test-manager-leader`` in ``test_namespace``), ``test_namespace`` only, servers on
    ephemeral loopback ports, a 10 s shutdown budget; ``overrides`` win."""
    defaults: dict[str, Any] = {
        "name": "test-manager",
        "leader_election_namespace": test_namespace,
        "namespace": test_namespace,
        "metrics_bind_address": "127.0.0.1:0",
        "health_probe_bind_address": "127.0.0.1:0",
        "graceful_shutdown_timeout": 10.0,
    }
    return manager_.Options(**{**defaults, **overrides})


@pytest.fixture
def kube_manager(
    request: pytest.FixtureRequest,
    kube_control_plane: controlplane.ControlPlane,
    kube_namespace: str,
) -> ManagerFactory:
    """A factory of managers running in the background (see the module docstring)."""
    logs = request.node.stash.setdefault(_LOGS, [])
    kubeconfig = kube_control_plane.kubeconfig
    assert kubeconfig is not None

    @contextlib.asynccontextmanager
    async def start(
        *setups: Setup, leader: bool = True, up_timeout: float = 60.0, **options: Any
    ) -> AsyncIterator[runner.Running]:
        async with await client_.Client.from_kubeconfig(kubeconfig) as c:
            manager = manager_.Manager(c, manager_options(kube_namespace, **options))
            with controller_.names_released():  # the next test builds them again
                for setup in setups:
                    setup(manager)
            log: list[runner.LogRecord] = []
            logs.append(log)
            async with runner.running(
                manager, leader=leader, up_timeout=up_timeout, log=log
            ) as run:
                yield run

    return start


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Add the managers' logs to the report of a failed phase."""
    report = yield
    if report.failed:
        logs: list[list[runner.LogRecord]] = item.stash.get(_LOGS, [])
        for index, log in enumerate(logs, start=1):
            text = "\n".join(str(record) for record in log) or "(nothing logged)"
            report.sections.append((f"Captured manager log ({index})", text))
    return report
