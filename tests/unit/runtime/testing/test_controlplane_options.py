from __future__ import annotations

import pathlib

import pytest

from runtime.testing import controlplane


def test_no_bin_dir_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path
) -> None:
    monkeypatch.delenv(controlplane.BIN_DIR_ENV, raising=False)
    monkeypatch.delenv(controlplane.ENVTEST_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))  # no assets cache either
    with pytest.raises(controlplane.ControlPlaneError, match="CONTROLPLANE_BIN_DIR") as caught:
        controlplane.ControlPlane()
    assert "KUBEBUILDER_ASSETS" in str(caught.value)


def test_envtest_assets_are_the_fallback(
    monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path
) -> None:
    monkeypatch.delenv(controlplane.BIN_DIR_ENV, raising=False)
    monkeypatch.setenv(controlplane.ENVTEST_ENV, str(tmp_path / "envtest"))
    assert controlplane.ControlPlane().bin_dir == tmp_path / "envtest"


def test_our_variable_wins_over_envtest_s(
    monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path
) -> None:
    monkeypatch.setenv(controlplane.BIN_DIR_ENV, str(tmp_path / "ours"))
    monkeypatch.setenv(controlplane.ENVTEST_ENV, str(tmp_path / "envtest"))
    assert controlplane.default_bin_dir() == tmp_path / "ours"
    monkeypatch.setenv(controlplane.BIN_DIR_ENV, "")  # set but empty counts as unset
    assert controlplane.default_bin_dir() == tmp_path / "envtest"


def test_an_explicit_bin_dir_wins_over_both(
    monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path
) -> None:
    monkeypatch.setenv(controlplane.BIN_DIR_ENV, str(tmp_path / "ours"))
    monkeypatch.setenv(controlplane.ENVTEST_ENV, str(tmp_path / "envtest"))
    cp = controlplane.ControlPlane(controlplane.Options(bin_dir=tmp_path / "given"))
    assert cp.bin_dir == tmp_path / "given"


@pytest.mark.parametrize("host", ["198.18.0.1", "192.0.2.1", "::2"])
def test_the_api_helper_refuses_non_loopback_hosts(host: str) -> None:
    with pytest.raises(PermissionError):
        controlplane._check_loopback(host)


def test_loopback_is_allowed() -> None:
    controlplane._check_loopback("127.0.0.1")
    controlplane._check_loopback("::1")
