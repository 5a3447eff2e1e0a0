"""runtime/client/kubeconfig.py: a plain kubeconfig and the pod's service account are
read without kubernetes-asyncio's client package; anything else falls back to it."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import pathlib
import subprocess
import sys

import pytest
import yaml

from runtime.client import client as client_
from runtime.client import kubeconfig
from tests.unit import helpers

ROOT = helpers.ROOT


def write(tmp: pathlib.Path, cluster: dict[str, object], user: dict[str, object]) -> pathlib.Path:
    path = tmp / "config"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "ctx",
        "clusters": [{"name": "c", "cluster": cluster}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u", "namespace": "x"}},
                     {"name": "other", "context": {"cluster": "c", "user": "u"}}],
    }))  # fmt: skip
    return path


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def test_inline_certificates_become_private_files(tmp_path: pathlib.Path) -> None:
    cluster = {"server": "https://127.0.0.1:6443", "certificate-authority-data": b64("CA")}
    user = {"client-certificate-data": b64("CERT"), "client-key-data": b64("KEY")}
    path = write(tmp_path, cluster, user)
    creds = kubeconfig.from_kubeconfig(path)
    assert creds is not None
    assert creds.host == "https://127.0.0.1:6443"
    assert creds.verify_ssl
    files = [creds.ssl_ca_cert, creds.cert_file, creds.key_file]
    assert [pathlib.Path(f or "").read_text() for f in files] == ["CA", "CERT", "KEY"]
    assert all(os.stat(f or "").st_mode & 0o077 == 0 for f in files)  # only we can read them
    assert asyncio.run(creds.get_api_key_with_prefix("BearerToken")) == ""


def test_a_token_file_is_read_again_when_it_rotates(tmp_path: pathlib.Path) -> None:
    (tmp_path / "token").write_text("first\n")
    path = write(tmp_path, {"server": "https://h:1", "insecure-skip-tls-verify": True},
                 {"tokenFile": "token"})  # fmt: skip
    creds = kubeconfig.from_kubeconfig(path, context="other")
    assert creds is not None
    assert not creds.verify_ssl
    assert creds.token_file == str(tmp_path / "token")  # relative to the kubeconfig
    assert asyncio.run(creds.get_api_key_with_prefix("BearerToken")) == "Bearer first"
    (tmp_path / "token").write_text("second-token\n")
    assert asyncio.run(creds.get_api_key_with_prefix("BearerToken")) == "Bearer second-token"


@pytest.mark.parametrize(
    ("cluster", "user"),
    [
        ({"server": "https://h:1"}, {"exec": {"command": "aws"}}),
        ({"server": "https://h:1"}, {"auth-provider": {"name": "gcp"}}),
        ({"server": "https://h:1"}, {"username": "a", "password": "b"}),
        ({"server": "https://h:1", "proxy-url": "http://127.0.0.1:3128"}, {"token": "t"}),
        ({"server": "https://h:1", "tls-server-name": "k"}, {"token": "t"}),
    ],
)
def test_what_this_module_does_not_know_is_left_to_kubernetes_asyncio(
    tmp_path: pathlib.Path, cluster: dict[str, object], user: dict[str, object]
) -> None:
    assert kubeconfig.from_kubeconfig(write(tmp_path, cluster, user)) is None


def test_broken_kubeconfigs_say_what_is_wrong(tmp_path: pathlib.Path) -> None:
    path = write(tmp_path, {"server": "https://h:1"}, {"token": "t"})
    with pytest.raises(ValueError, match="no context named 'nope'"):
        kubeconfig.from_kubeconfig(path, context="nope")
    (tmp_path / "bad").write_text("clusters: [unclosed")
    with pytest.raises(ValueError, match="kubeconfig"):
        kubeconfig.from_kubeconfig(tmp_path / "bad")
    (tmp_path / "list").write_text("- a\n")
    with pytest.raises(ValueError, match="not a mapping"):
        kubeconfig.from_kubeconfig(tmp_path / "list")
    (tmp_path / "nocontext").write_text("clusters: []\n")
    with pytest.raises(ValueError, match="no current-context"):
        kubeconfig.from_kubeconfig(tmp_path / "nocontext")


def test_in_cluster_reads_the_service_account(tmp_path: pathlib.Path) -> None:
    (tmp_path / "token").write_text("sa-token")
    (tmp_path / "ca.crt").write_text("CA")
    env = {"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "443"}
    creds = kubeconfig.in_cluster(env, tmp_path)
    assert creds.host == "https://[fd00::1]:443"
    assert creds.ssl_ca_cert == str(tmp_path / "ca.crt")
    assert asyncio.run(creds.get_api_key_with_prefix("BearerToken")) == "Bearer sa-token"
    with pytest.raises(ValueError, match="KUBERNETES_SERVICE_HOST"):
        kubeconfig.in_cluster({}, tmp_path)
    with pytest.raises(ValueError, match="does not exist"):
        kubeconfig.in_cluster(env, tmp_path / "missing")


def test_a_plain_kubeconfig_never_imports_the_kubernetes_asyncio_client(
    tmp_path: pathlib.Path,
) -> None:
    """The point of the module: ~38 MiB of generated classes are not loaded."""
    plain = write(tmp_path, {"server": "https://127.0.0.1:1"}, {"token": "t"})
    program = (
        "import asyncio, sys\n"
        "from runtime.client import client as c\n"
        f"asyncio.run(c.Client.from_kubeconfig({str(plain)!r}))\n"
        "print(any(m.startswith('kubernetes_asyncio') for m in sys.modules))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", program], cwd=ROOT, capture_output=True, text=True, check=True,
        env=env,
    )  # fmt: skip
    assert done.stdout.strip() == "False", done.stderr


async def test_an_exec_kubeconfig_still_works_through_kubernetes_asyncio(
    tmp_path: pathlib.Path,
) -> None:
    api_version = "client.authentication.k8s.io/v1"
    credential = {"apiVersion": api_version, "kind": "ExecCredential",
                  "status": {"token": "from-exec"}}  # fmt: skip
    exec_ = {"apiVersion": api_version, "command": "sh", "interactiveMode": "Never",
             "args": ["-c", f"echo '{json.dumps(credential)}'"]}  # fmt: skip
    path = write(tmp_path, {"server": "https://127.0.0.1:1"}, {"exec": exec_})
    client = await client_.Client.from_kubeconfig(path)
    async with client:
        assert type(client.configuration).__module__.startswith("kubernetes_asyncio")
        assert client.host == "https://127.0.0.1:1"
        token = await client.configuration.get_api_key_with_prefix("BearerToken")
        assert token == "Bearer from-exec"


def test_the_token_never_shows_in_repr() -> None:
    creds = kubeconfig.Credentials(host="https://127.0.0.1:6443", token="s3cr3t-token-value")
    assert "s3cr3t-token-value" not in repr(creds)
    assert "127.0.0.1:6443" in repr(creds)


# -- kubernetes-asyncio is the framework's optional dependency (its full-kubeconfig extra) ---


@pytest.fixture
def without_kubernetes_asyncio(monkeypatch: pytest.MonkeyPatch) -> None:
    """``import kubernetes_asyncio`` fails, as where the extra is not installed."""
    monkeypatch.setitem(sys.modules, "kubernetes_asyncio", None)


@pytest.mark.usefixtures("without_kubernetes_asyncio")
async def test_without_kubernetes_asyncio_an_exec_kubeconfig_names_the_extra(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(tmp_path, {"server": "https://127.0.0.1:1"}, {"exec": {"command": "aws"}})
    with pytest.raises(ImportError, match=r"k8s-controller-runtime\[full-kubeconfig\]"):
        await client_.Client.from_kubeconfig(path)
    monkeypatch.setenv("KUBECONFIG", os.pathsep.join([str(path), str(path)]))
    with pytest.raises(ImportError, match=r"\$KUBECONFIG list"):
        await client_.Client.from_kubeconfig()


@pytest.mark.usefixtures("without_kubernetes_asyncio")
async def test_without_kubernetes_asyncio_the_default_plain_kubeconfig_is_read(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plain = write(tmp_path, {"server": "https://127.0.0.1:1"}, {"token": "t"})
    monkeypatch.setenv("KUBECONFIG", str(plain))
    async with await client_.Client.from_kubeconfig() as from_env:
        assert from_env.host == "https://127.0.0.1:1", "$KUBECONFIG's one file"
    home = tmp_path / "home"
    (home / ".kube").mkdir(parents=True)
    plain.rename(home / ".kube" / "config")
    monkeypatch.delenv("KUBECONFIG")
    monkeypatch.setenv("HOME", str(home))
    async with await client_.Client.from_kubeconfig() as from_home:
        assert isinstance(from_home.configuration, kubeconfig.Credentials), "~/.kube/config"
