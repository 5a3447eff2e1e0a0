"""The Ray auth token a dashboard request carries (``authOptions.mode: token``).

A cluster with token authentication refuses dashboard requests without its token (Ray
answers 401, or 403 for a wrong one), so the Serve config could be neither read nor
sent. :meth:`Tokens.token_for` gives the token of a RayCluster (None without token
auth), which :meth:`controllers.ray.dashboard.DashboardFactory.client_for` puts into
every dashboard request as ``x-ray-authorization: Bearer <token>``, in every address
mode (a header, so it passes the API server's proxy, which consumes
``Authorization``). The Secret is ``authOptions.secretName``, else ``<cluster>``
(:func:`controllers.raycluster.interface.auth_secret_name`), key ``auth_token``.

**Where it is read**, without a request per poll: by one GET of the Secret, remembered
per namespace and name; :meth:`Tokens.forget` drops it when Ray refused the token, so a
rotated or re-made Secret is read again on the next pass. That memory is a cache,
nothing more: a restarted operator reads the Secret again. The token is never logged;
an error names the Secret, not its content.

KubeRay v1.7.0 reads the Secret through its cache on every dashboard client it makes,
and caches **every** Secret of the cluster to do so (unfiltered): the operator's memory
then holds every credential of every namespace, and it needs ``list``/``watch`` on all
Secrets. Here the operator holds no Secret it was not asked for, and may only ``get``
Secrets by name (:mod:`controllers.rbac`).

A missing Secret or key is :class:`TokenUnavailable` (the pass reports it as the
dashboard's failure and retries with backoff); nothing is sent without the token.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from typing import Any

from controllers.raycluster import interface as raycluster
from runtime.client import errors

__all__ = ["TokenUnavailable", "Tokens"]


class TokenUnavailable(Exception):
    """The cluster's token Secret, or its ``auth_token`` key, is missing or unreadable."""


class Tokens:
    """Reads clusters' Ray auth tokens (see the module docstring)."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self._named: dict[tuple[str, str], str] = {}
        """Tokens read by GET, by (namespace, name)."""

    async def token_for(self, cluster: Mapping[str, Any]) -> str | None:
        """The raw RayCluster ``cluster``'s token; None when it has no token auth."""
        name = raycluster.auth_secret_name(cluster)
        if name is None:
            return None
        namespace = str(cluster["metadata"]["namespace"])
        key = (namespace, name)
        if key in self._named:
            return self._named[key]
        try:
            secret = await self.client.get(raycluster.SECRETS, namespace, name)
        except errors.NotFound as exc:
            raise TokenUnavailable(
                f"the auth token Secret {namespace}/{name} does not exist"
            ) from exc
        except errors.ApiError as exc:
            raise TokenUnavailable(
                f"cannot read the auth token Secret {namespace}/{name}: {exc}"
            ) from exc
        token = _token(secret, namespace, name)
        self._named[key] = token
        return token

    def forget(self, cluster: Mapping[str, Any]) -> None:
        """Ray refused the token of ``cluster``: read its Secret again next time."""
        name = raycluster.auth_secret_name(cluster)
        if name is not None:
            self._named.pop((str(cluster["metadata"]["namespace"]), name), None)


def _token(secret: Mapping[str, Any], namespace: str, name: str) -> str:
    encoded = (secret.get("data") or {}).get(raycluster.AUTH_TOKEN_KEY)
    if not encoded:
        raise TokenUnavailable(
            f"the Secret {namespace}/{name} has no {raycluster.AUTH_TOKEN_KEY!r} key"
        )
    try:
        return base64.b64decode(str(encoded), validate=True).decode()
    except (binascii.Error, UnicodeDecodeError) as exc:
        raise TokenUnavailable(
            f"the Secret {namespace}/{name} key {raycluster.AUTH_TOKEN_KEY!r} is not text"
        ) from exc
