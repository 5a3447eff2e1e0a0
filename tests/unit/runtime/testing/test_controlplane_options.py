from __future__ import annotations

import pytest

from runtime.testing import controlplane


def test_no_bin_dir_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(controlplane.BIN_DIR_ENV, raising=False)
    with pytest.raises(controlplane.ControlPlaneError, match="CONTROLPLANE_BIN_DIR"):
        controlplane.ControlPlane()


@pytest.mark.parametrize("host", ["198.18.0.1", "192.0.2.1", "::2"])
def test_the_api_helper_refuses_non_loopback_hosts(host: str) -> None:
    with pytest.raises(PermissionError):
        controlplane._check_loopback(host)


def test_loopback_is_allowed() -> None:
    controlplane._check_loopback("127.0.0.1")
    controlplane._check_loopback("::1")
