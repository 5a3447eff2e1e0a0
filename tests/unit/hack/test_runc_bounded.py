"""``hack/kind/runc-bounded``: the runtime ``hack/kind/docker.sh`` gives the Docker engine it
starts, so that kind's ``--privileged`` nodes start where the engine's bounding set lacks
a capability. It must find the right file for each runc command, cut exactly the
capabilities outside the set, and leave a spec within the set byte for byte as it was."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import pathlib
from types import ModuleType

import pytest

from tests.unit import helpers


@pytest.fixture(scope="module")
def runc() -> ModuleType:
    path = str(helpers.ROOT / "hack" / "kind" / "runc-bounded")
    loader = importlib.machinery.SourceFileLoader("runc_bounded", path)
    spec = importlib.util.spec_from_loader("runc_bounded", loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def test_the_bounding_set_is_read_by_capability_number(
    runc: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path
) -> None:
    assert len(runc.NAMES) == 41  # CAP_CHOWN (0) .. CAP_CHECKPOINT_RESTORE (40)
    assert runc.NAMES.index("SYS_ADMIN") == 21
    assert runc.NAMES.index("SYS_RESOURCE") == 24
    status = tmp_path / "status"
    status.write_text("Name:\tx\nCapBnd:\t000001fffeffffff\n")  # all but bit 24
    real_open = open
    monkeypatch.setattr(
        "builtins.open",
        lambda f, *a, **k: real_open(status if f == "/proc/self/status" else f, *a, **k),
    )
    allowed = runc.bounding()
    assert "CAP_SYS_RESOURCE" not in allowed
    assert {"CAP_SYS_ADMIN", "CAP_CHECKPOINT_RESTORE", "CAP_CHOWN"} <= allowed
    assert len(allowed) == 40


def test_each_command_names_its_spec_file(runc: ModuleType, tmp_path: pathlib.Path) -> None:
    assert runc.spec_file(["--root", "/r", "create", "--bundle", "/b", "id"]) == (
        "/b/config.json",
        True,
    )
    assert runc.spec_file(["run", "--bundle=/b2", "id"]) == ("/b2/config.json", True)
    assert runc.spec_file(["exec", "--process", "/p.json", "id"]) == ("/p.json", False)
    assert runc.spec_file(["exec", "-p", "/q.json", "id"]) == ("/q.json", False)
    assert runc.spec_file(["--root", "/r", "state", "id"]) is None
    assert runc.spec_file(["delete", "--force", "id"]) is None


def test_only_capabilities_outside_the_set_are_cut(
    runc: ModuleType, tmp_path: pathlib.Path
) -> None:
    bundle = tmp_path / "config.json"
    caps = ["CAP_CHOWN", "CAP_SYS_RESOURCE", "CAP_SYS_ADMIN"]
    bundle.write_text(
        json.dumps(
            {
                "process": {
                    "capabilities": {"bounding": caps, "effective": caps, "permitted": caps}
                },
                "root": {"path": "rootfs"},
            }
        )
    )
    assert runc.bound(str(bundle), True, {"CAP_CHOWN", "CAP_SYS_ADMIN"}) is True
    spec = json.loads(bundle.read_text())
    assert spec["process"]["capabilities"] == {
        k: ["CAP_CHOWN", "CAP_SYS_ADMIN"] for k in ("bounding", "effective", "permitted")
    }
    assert spec["root"] == {"path": "rootfs"}

    process = tmp_path / "process.json"
    before = json.dumps({"args": ["sh"], "capabilities": {"bounding": ["CAP_CHOWN"]}})
    process.write_text(before)
    assert runc.bound(str(process), False, {"CAP_CHOWN"}) is False
    assert process.read_text() == before  # nothing to cut: not rewritten
    process.write_text(json.dumps({"capabilities": {"effective": ["CAP_SYS_RESOURCE"]}}))
    assert runc.bound(str(process), False, {"CAP_CHOWN"}) is True
    assert json.loads(process.read_text()) == {"capabilities": {"effective": []}}
