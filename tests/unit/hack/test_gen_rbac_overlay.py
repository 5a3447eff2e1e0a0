"""hack/gen_rbac_overlay.py: config/overlays/namespaced grants the ClusterRole's rules as Roles."""

from __future__ import annotations

import pathlib
import shutil
from typing import Any

import pytest
import yaml

from controllers import rbac
from tests.unit import helpers

ROOT = helpers.ROOT
OVERLAY = ROOT / "config/overlays/namespaced"


gen = helpers.load_script("hack/gen_rbac_overlay.py")


def docs(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d]


def base(path: str) -> dict[str, Any]:
    found: dict[str, Any] = docs((ROOT / path).read_text())[0]
    return found


def by_kind(objs: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["namespace"]: o for o in objs if o["kind"] == kind}


def generated(namespaces: list[str]) -> list[dict[str, Any]]:
    files = gen.generate(namespaces)
    return docs(files[pathlib.Path("config/overlays/namespaced/roles.yaml")])


def test_each_role_has_exactly_the_cluster_roles_rules() -> None:
    cluster_role = base("config/rbac/role.yaml")
    assert cluster_role["kind"] == "ClusterRole"
    everything = [rule for rules in rbac.DECLARATIONS.values() for rule in rules]
    roles = by_kind(generated(["x", "y"]), "Role")
    assert roles, "no Role generated"
    for role in roles.values():
        assert role["rules"] == cluster_role["rules"] == rbac.merge(everything)
        assert role["metadata"]["name"] == cluster_role["metadata"]["name"] == rbac.ROLE_NAME


def test_one_role_and_one_binding_per_namespace_bound_to_the_managers_account() -> None:
    account = base("config/rbac/service_account.yaml")
    objs = generated(["team-z", "team-a", "team-m", "team-a"])
    assert [(o["kind"], o["metadata"]["namespace"]) for o in objs] == [
        (kind, ns) for ns in ("team-a", "team-m", "team-z") for kind in ("Role", "RoleBinding")
    ], "sorted, duplicates dropped, a Role and its binding per namespace"
    for ns, binding in by_kind(objs, "RoleBinding").items():
        assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                      "name": rbac.ROLE_NAME}, ns  # fmt: skip
        assert binding["subjects"] == [{
            "kind": "ServiceAccount", "name": account["metadata"]["name"],
            "namespace": account["metadata"]["namespace"],
        }]  # fmt: skip
    assert not [o for o in objs if o["kind"].startswith("Cluster")]


def test_the_checked_in_overlay_is_current_and_consistent() -> None:
    assert gen.main(["--check"]) == 0, "run python hack/gen_rbac_overlay.py"
    kustomization = docs((OVERLAY / "kustomization.yaml").read_text())[0]
    roles = docs((OVERLAY / "roles.yaml").read_text())
    namespaces = sorted(by_kind(roles, "Role"))
    assert namespaces == sorted(gen.EXAMPLE) == gen.namespaces_in()
    assert sorted(by_kind(roles, "RoleBinding")) == namespaces
    assert kustomization["resources"] == ["../../default", "roles.yaml"]
    # The ClusterRole and its binding of the base are removed, by their base names.
    deleted = [yaml.safe_load(p["patch"]) for p in kustomization["patches"] if "patch" in p]
    assert sorted((d["kind"], d["metadata"]["name"], d["$patch"]) for d in deleted) == [
        ("ClusterRole", base("config/rbac/role.yaml")["metadata"]["name"], "delete"),
        ("ClusterRoleBinding", base("config/rbac/role_binding.yaml")["metadata"]["name"],
         "delete"),
    ]  # fmt: skip
    # The manager watches exactly the namespaces the Roles are in.
    (args_patch,) = [p for p in kustomization["patches"] if "path" in p]
    deployment = base("config/manager/manager.yaml")
    assert args_patch["target"]["kind"] == deployment["kind"]
    assert args_patch["target"]["name"] == deployment["metadata"]["name"]
    ops: Any = yaml.safe_load((OVERLAY / args_patch["path"]).read_text())
    assert ops == [{"op": "add", "path": "/spec/template/spec/containers/0/args/-",
                    "value": "--namespace=" + ",".join(namespaces)}]  # fmt: skip
    assert deployment["spec"]["template"]["spec"]["containers"][0]["args"], "appended to"


@pytest.fixture
def root(tmp_path: pathlib.Path) -> pathlib.Path:
    """A copy of the bases the generator reads, without an overlay."""
    for part in ("config/rbac", "config/manager"):
        shutil.copytree(ROOT / part, tmp_path / part)
    return tmp_path


def test_regenerating_for_other_namespaces_and_keeping_them(
    root: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert gen.main(["--root", str(root)]) == 0
    assert gen.namespaces_in(root) == sorted(gen.EXAMPLE), "no overlay yet: the example"
    assert gen.main(["--root", str(root), "--namespace", "ops,ml", "--namespace", "web"]) == 0
    assert gen.namespaces_in(root) == ["ml", "ops", "web"]
    patch = (root / "config/overlays/namespaced/manager_namespaces.yaml").read_text()
    assert "--namespace=ml,ops,web" in patch
    assert gen.main(["--root", str(root), "--check"]) == 0, "the drift check keeps your list"
    capsys.readouterr()
    roles = root / "config/overlays/namespaced/roles.yaml"
    roles.write_text(roles.read_text().replace("- watch\n", "", 1))  # a stale rule
    assert gen.main(["--root", str(root), "--check"]) == 1
    assert "out of date: config/overlays/namespaced/roles.yaml" in capsys.readouterr().out
    assert gen.main(["--root", str(root)]) == 0, "a plain re-run refreshes the rules ..."
    assert gen.namespaces_in(root) == ["ml", "ops", "web"], "... for the same namespaces"
    assert gen.main(["--root", str(root), "--check"]) == 0


@pytest.mark.parametrize("bad", [[], [""], ["a/b"], ["a,b"]])
def test_bad_namespace_lists_are_refused(bad: list[str]) -> None:
    with pytest.raises(ValueError, match="namespace"):
        gen.generate(bad)
