"""Repository-wide pytest setup: logs go to stderr (captured per test), never to stdout.

Keeping stdout clean matters for doctests, whose expected output is stdout.

The framework's test kit is loaded here too (its fixtures are named ``kube_*``), so
the suite runs with it whether or not the installed distribution registered its
``pytest11`` entry point (which has the module's name, so pytest loads it once).
Which control plane it starts is said here, once for the session (pytest caches a
session fixture once, so an override in a sub-directory's conftest would apply to
whichever directory asked first):

- ``bin_dir`` (session): the control-plane binaries, built from the Go modules
  pinned in ``hack/controlplane/versions.env`` on first use. A build failure fails
  the tests with the Go error; nothing here ever skips.
- ``kube_control_plane_options`` (session): etcd, kube-apiserver,
  kube-controller-manager, kube-scheduler, kwok with two fake nodes, the pod
  network, and the CRDs of ``tests/integration/testdata/crds``.
"""

import logging
import pathlib
import sys

import pytest
import structlog

from runtime.testing import controlplane
from tests.support import tools

pytest_plugins = ["pytester", "runtime.testing.pytest_plugin"]

TEST_CRDS = pathlib.Path(__file__).parent / "tests" / "integration" / "testdata" / "crds"

structlog.configure(
    processors=[
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso"),
        # Plain tracebacks, as the manager logs them (runtime.log): the default (rich, with
        # every frame's locals) renders thousands of lines per failed reconcile, which
        # took seconds each and shifted the timing of retries under test.
        structlog.dev.ConsoleRenderer(
            colors=False, exception_formatter=structlog.dev.plain_traceback
        ),
    ],
    wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG),
    # Resolve sys.stderr per logger, so pytest's per-test capture sees the output.
    logger_factory=lambda *args: structlog.PrintLogger(sys.stderr),
    cache_logger_on_first_use=False,
)


@pytest.fixture(scope="session")
def bin_dir() -> pathlib.Path:
    """Build (or reuse) the control-plane binaries; fail loudly if the build fails."""
    return tools.built("hack/controlplane/build.sh")


@pytest.fixture(scope="session")
def kube_control_plane_options(bin_dir: pathlib.Path) -> controlplane.Options:
    return controlplane.Options(
        bin_dir=bin_dir,
        controller_manager=True,
        scheduler=True,
        kwok=True,
        nodes=2,
        pod_network=True,
        crd_dirs=[TEST_CRDS],
        uncached_resources=["gadgets.test.rayservice.dev"],
    )
