"""Light credentials for :class:`runtime.client.Client`: the plain kubeconfig and the pod's
service account, without importing kubernetes-asyncio's client package.

Importing ``kubernetes_asyncio.config`` imports every generated API and model class of
``kubernetes_asyncio.client``: about 38 MiB of a manager's ~100 MiB RSS, for a
kubeconfig that usually holds a server, a CA and a certificate or a token. This module
reads those cases itself and answers ``None`` for anything else, so that the caller
falls back to kubernetes-asyncio (exec plugins, auth providers, basic auth, proxies):
whatever kubectl accepts still works, and the common cases cost nothing.

- :func:`from_kubeconfig` (a path, an optional context): the context's cluster
  (``server``, ``certificate-authority``/``-data``, ``insecure-skip-tls-verify``) and
  user (``client-certificate``/``-data`` with ``client-key``/``-data``, ``token``,
  ``tokenFile``), relative paths resolved against the kubeconfig's directory, inline
  data written to private temporary files (removed at exit). ``None`` when the user
  has ``exec``, ``auth-provider``, ``username``/``password`` or anything else this
  module does not know, or the cluster has ``proxy-url`` or ``tls-server-name``.
- :func:`in_cluster`: ``https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT``,
  the service account's CA and token.
- :class:`Credentials` has the attributes the client reads (``host``,
  ``ssl_ca_cert``, ``cert_file``, ``key_file``, ``verify_ssl``) and
  :meth:`Credentials.get_api_key_with_prefix`, which re-reads a token file when it
  changed (projected service-account tokens rotate, about hourly).

>>> import tempfile, pathlib
>>> d = pathlib.Path(tempfile.mkdtemp())
>>> _ = (d / "ca.crt").write_text("CA")
>>> _ = (d / "config").write_text('''
... clusters:
... - {name: c, cluster: {server: "https://127.0.0.1:6443/", certificate-authority: ca.crt}}
... users: [{name: u, user: {token: abc}}]
... contexts: [{name: x, context: {cluster: c, user: u}}]
... current-context: x
... ''')
>>> creds = from_kubeconfig(d / "config")
>>> creds.host, creds.ssl_ca_cert == str(d / "ca.crt"), creds.verify_ssl
('https://127.0.0.1:6443', True, True)
>>> import asyncio; asyncio.run(creds.get_api_key_with_prefix("BearerToken"))
'Bearer abc'
"""

from __future__ import annotations

import atexit
import base64
import dataclasses
import os
import pathlib
import shutil
import tempfile
from typing import Any

import yaml

__all__ = ["Credentials", "from_kubeconfig", "in_cluster"]

SERVICE_ACCOUNT_DIR = pathlib.Path("/var/run/secrets/kubernetes.io/serviceaccount")

_CLUSTER_KEYS = {"server", "certificate-authority", "certificate-authority-data",
                 "insecure-skip-tls-verify", "extensions"}  # fmt: skip
_USER_KEYS = {"client-certificate", "client-certificate-data", "client-key",
              "client-key-data", "token", "tokenFile", "extensions"}  # fmt: skip


@dataclasses.dataclass
class Credentials:
    """Where the API server is and how to prove who we are (see the module docstring)."""

    host: str
    ssl_ca_cert: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    verify_ssl: bool = True
    token: str | None = dataclasses.field(default=None, repr=False)
    """The bearer token (never shown by ``repr``)."""
    token_file: str | None = None
    _token_stamp: tuple[int, int] | None = dataclasses.field(default=None, repr=False)

    async def get_api_key_with_prefix(self, identifier: str, alias: str | None = None) -> str:
        """``Bearer <token>`` (or ``""`` without one); the signature is kubernetes-asyncio's
        ``Configuration`` method's, which the client calls."""
        token = self._current_token()
        return f"Bearer {token}" if token else ""

    def _current_token(self) -> str | None:
        """The token, re-read from ``token_file`` when that changed (a stat per call; a
        read only after a rotation: a small local file, not worth a thread)."""
        if self.token_file:
            stat = os.stat(self.token_file)
            stamp = (stat.st_mtime_ns, stat.st_size)
            if stamp != self._token_stamp:
                self.token = pathlib.Path(self.token_file).read_text().strip()
                self._token_stamp = stamp
        return self.token


_private_dir: pathlib.Path | None = None


def _write_private(data_b64: str, name: str) -> str:
    """Inline kubeconfig data (base64) as a file only we can read; removed at exit."""
    global _private_dir
    if _private_dir is None:
        _private_dir = pathlib.Path(tempfile.mkdtemp(prefix="rso-kubeconfig-"))
        atexit.register(shutil.rmtree, _private_dir, True)
    fd, path = tempfile.mkstemp(dir=_private_dir, prefix=name)
    with os.fdopen(fd, "wb") as out:
        out.write(base64.b64decode(data_b64))
    return path


def _named(items: Any, name: str, kind: str) -> dict[str, Any]:
    for item in items or []:
        if isinstance(item, dict) and item.get("name") == name:
            found = item.get(kind)
            return found if isinstance(found, dict) else {}
    raise ValueError(f"kubeconfig: no {kind} named {name!r}")


def from_kubeconfig(path: str | os.PathLike[str], context: str | None = None) -> Credentials | None:
    """Credentials for ``context`` (default the current one) of the kubeconfig at
    ``path``, or ``None`` if it needs more than this module knows (see the module
    docstring). A kubeconfig that cannot be parsed, or names what it lacks, raises
    ``ValueError``."""
    path = pathlib.Path(path)
    try:
        config = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ValueError(f"kubeconfig {path}: {exc}") from exc
    if not isinstance(config, dict):
        raise ValueError(f"kubeconfig {path} is not a mapping")
    context_name = context or config.get("current-context")
    if not context_name:
        raise ValueError(f"kubeconfig {path} has no current-context")
    ctx = _named(config.get("contexts"), context_name, "context")
    cluster = _named(config.get("clusters"), ctx.get("cluster", ""), "cluster")
    user = _named(config.get("users"), ctx.get("user", ""), "user") if ctx.get("user") else {}
    if set(cluster) - _CLUSTER_KEYS or set(user) - _USER_KEYS or not cluster.get("server"):
        return None

    def local(value: str) -> str:
        return str(path.parent / value) if not os.path.isabs(value) else value

    def file_or_data(key: str, name: str, where: dict[str, Any]) -> str | None:
        if where.get(f"{key}-data"):
            return _write_private(str(where[f"{key}-data"]), name)
        return local(str(where[key])) if where.get(key) else None

    creds = Credentials(
        host=str(cluster["server"]).rstrip("/"),
        ssl_ca_cert=file_or_data("certificate-authority", "ca-", cluster),
        cert_file=file_or_data("client-certificate", "cert-", user),
        key_file=file_or_data("client-key", "key-", user),
        verify_ssl=not cluster.get("insecure-skip-tls-verify", False),
        token=str(user["token"]) if user.get("token") else None,
        token_file=local(str(user["tokenFile"])) if user.get("tokenFile") else None,
    )
    return creds


def in_cluster(
    environ: dict[str, str] | None = None, directory: pathlib.Path | None = None
) -> Credentials:
    """The pod's own credentials (``directory`` default :data:`SERVICE_ACCOUNT_DIR`);
    ``ValueError`` when not in a pod."""
    env = os.environ if environ is None else environ
    directory = SERVICE_ACCOUNT_DIR if directory is None else directory
    host, port = env.get("KUBERNETES_SERVICE_HOST"), env.get("KUBERNETES_SERVICE_PORT")
    if not host or not port:
        raise ValueError("not in a cluster: KUBERNETES_SERVICE_HOST/PORT are not set")
    if not (directory / "token").is_file():
        raise ValueError(f"not in a cluster: {directory / 'token'} does not exist")
    if ":" in host:  # an IPv6 address
        host = f"[{host}]"
    return Credentials(
        host=f"https://{host}:{port}",
        ssl_ca_cert=str(directory / "ca.crt"),
        token_file=str(directory / "token"),
    )
