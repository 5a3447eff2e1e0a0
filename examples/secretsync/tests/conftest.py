"""The example's tests run on the framework's test kit (``runtime.testing.pytest_plugin``).

The kit starts one control plane per session (by default etcd and kube-apiserver
only, as envtest: from ``$CONTROLPLANE_BIN_DIR`` or ``$KUBEBUILDER_ASSETS``); this
file installs the SecretSync CRD into it, once, for the tests that ask for
``secretsync_crd``.
"""

from __future__ import annotations

import pathlib

import pytest

from runtime.testing import controlplane

CRDS = pathlib.Path(__file__).parents[1] / "config"


@pytest.fixture(scope="session")
def secretsync_crd(kube_control_plane: controlplane.ControlPlane) -> list[str]:
    """Install the CRD (and wait until it is served); the names of what was installed."""
    return kube_control_plane.install_crds(CRDS)
