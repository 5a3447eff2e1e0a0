"""What a kubelet reads from a pod spec before it starts a container, as pure functions.

- :func:`hostname`: the pod's hostname (``spec.hostname``, else the pod's name; at most 63
  characters, as the kubelet cuts it);
- :func:`environment`: the container's ``env`` and ``envFrom`` resolved the way the
  kubelet does: ``envFrom`` first (ConfigMaps and Secrets through ``lookup``, with their
  ``prefix``), then ``env`` in order; literal values have their ``$(VAR)`` references to
  variables defined earlier expanded (``$$`` is a literal ``$``, an unknown reference stays
  as written); ``fieldRef`` reads the downward API (``metadata.name``, ``.namespace``,
  ``.uid``, ``.labels['k']``, ``.annotations['k']``, ``spec.nodeName``,
  ``spec.serviceAccountName``, ``status.podIP``, ``.podIPs``, ``.hostIP``, ``.hostIPs``);
  ``resourceFieldRef`` gives the container's CPU (rounded up to whole ``divisor`` units)
  and memory/ephemeral storage in ``divisor`` units; ``configMapKeyRef`` /
  ``secretKeyRef`` come from ``lookup`` (a missing optional one is left out). Anything
  else raises :class:`PodSpecError` naming it: a harness must not guess.
- :func:`command`: ``command`` + ``args`` with ``$(VAR)`` expanded from that environment.
  A container without ``command`` would run its image's entrypoint, which the harness
  cannot know: :class:`PodSpecError`.
- :func:`hosts_file`: ``/etc/hosts`` as the kubelet writes it for a pod (localhost lines,
  then ``<pod IP> <hostname>``), plus extra ``{name: ip}`` lines (standing in for cluster
  DNS).
- :func:`service_names`: the names a pod in the cluster resolves for a Service (``svc``,
  ``svc.ns``, ``svc.ns.svc``, ``svc.ns.svc.<domain>``).

>>> pod = {"metadata": {"name": "demo-head-x", "namespace": "ray",
...                     "labels": {"ray.io/cluster": "demo"}},
...        "spec": {"containers": [{"name": "ray-head"}]}, "status": {"podIP": "198.18.0.7"}}
>>> container = {"command": ["/bin/bash", "-c", "--"], "args": ["echo $(WHO) at $$HOME"],
...              "env": [{"name": "WHO", "valueFrom": {"fieldRef": {
...                  "fieldPath": "metadata.labels['ray.io/cluster']"}}}]}
>>> env = environment(pod, container)
>>> env
{'WHO': 'demo'}
>>> command(container, env)
['/bin/bash', '-c', '--', 'echo demo at $HOME']
>>> text = hosts_file(pod, {"demo-head-svc": "198.18.0.7"})
>>> print(text, end="")  # doctest: +NORMALIZE_WHITESPACE
# Kubernetes-managed hosts file (written by hack/realray).
127.0.0.1	localhost
::1	localhost ip6-localhost ip6-loopback
fe00::0	ip6-localnet
fe00::0	ip6-mcastprefix
fe00::1	ip6-allnodes
fe00::2	ip6-allrouters
198.18.0.7	demo-head-x
198.18.0.7	demo-head-svc
"""

from __future__ import annotations

import base64
import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from runtime import quantity

__all__ = [
    "Lookup",
    "PodSpecError",
    "command",
    "decode_secret",
    "environment",
    "expand",
    "hostname",
    "hosts_file",
    "service_names",
]

Lookup = Callable[[str, str], Mapping[str, str] | None]
"""``lookup(kind, name)``: the data of the ConfigMap or Secret (``kind`` is ``"configmaps"``
or ``"secrets"``; Secret values already decoded) in the pod's namespace, ``None`` if it
does not exist."""

_REFERENCE = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")
_LABEL_PATH = re.compile(r"metadata\.(labels|annotations)\['(.+)'\]")
_HOSTNAME_MAX = 63


class PodSpecError(ValueError):
    """The pod asks for something the harness cannot provide (the message says what)."""


def hostname(pod: Mapping[str, Any]) -> str:
    """``spec.hostname``, else the pod's name; cut to 63 characters like the kubelet."""
    spec = pod.get("spec") or {}
    name = str(spec.get("hostname") or (pod.get("metadata") or {}).get("name") or "")
    return name[:_HOSTNAME_MAX].rstrip("-.")


def expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes' ``$(VAR)`` expansion: defined variables are replaced, ``$$`` is ``$``,
    anything else stays as written.

    >>> expand("$(A)-$(B)-$$(A)", {"A": "1"})
    '1-$(B)-$(A)'
    """

    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1)
        return env[name] if name in env else match.group(0)

    return _REFERENCE.sub(replace, text)


def _field(pod: Mapping[str, Any], path: str) -> str:
    metadata = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    match = _LABEL_PATH.fullmatch(path)
    if match:
        return str((metadata.get(match.group(1)) or {}).get(match.group(2), ""))
    simple: dict[str, Any] = {
        "metadata.name": metadata.get("name"),
        "metadata.namespace": metadata.get("namespace"),
        "metadata.uid": metadata.get("uid"),
        "spec.nodeName": spec.get("nodeName"),
        "spec.serviceAccountName": spec.get("serviceAccountName"),
        "status.podIP": status.get("podIP"),
        "status.hostIP": status.get("hostIP"),
        "status.podIPs": ",".join(str(p.get("ip")) for p in status.get("podIPs") or ()),
        "status.hostIPs": ",".join(str(p.get("ip")) for p in status.get("hostIPs") or ()),
    }
    if path not in simple:
        raise PodSpecError(f"fieldRef {path!r} is not supported by the harness")
    value = simple[path]
    return "" if value is None else str(value)


def _resource(container: Mapping[str, Any], ref: Mapping[str, Any]) -> str:
    what = str(ref.get("resource") or "")
    kind, _, name = what.partition(".")
    if kind not in ("limits", "requests") or name not in ("cpu", "memory", "ephemeral-storage"):
        raise PodSpecError(f"resourceFieldRef {what!r} is not supported by the harness")
    amounts = (container.get("resources") or {}).get(kind) or {}
    if name not in amounts:
        # The kubelet falls back to the node's allocatable, which a harness does not have.
        raise PodSpecError(f"resourceFieldRef {what!r}: the container sets no {what}")
    divisor = quantity.parse(ref.get("divisor") or "1").value
    value = quantity.parse(amounts[name]).value / divisor
    return str(math.ceil(value))


def _key(
    kind: str, ref: Mapping[str, Any], lookup: Lookup | None
) -> str | None:  # None: optional and absent
    name, key = str(ref.get("name") or ""), str(ref.get("key") or "")
    data = lookup(kind, name) if lookup is not None else None
    if data is not None and key in data:
        return data[key]
    if ref.get("optional"):
        return None
    raise PodSpecError(f"{kind[:-1]} {name!r} has no key {key!r} (and the reference is required)")


def environment(
    pod: Mapping[str, Any], container: Mapping[str, Any], lookup: Lookup | None = None
) -> dict[str, str]:
    """The container's environment as the kubelet builds it (see the module docstring)."""
    env: dict[str, str] = {}
    for source in container.get("envFrom") or ():
        prefix = str(source.get("prefix") or "")
        for kind, field in (("configmaps", "configMapRef"), ("secrets", "secretRef")):
            ref = source.get(field)
            if ref is None:
                continue
            data = lookup(kind, str(ref.get("name") or "")) if lookup is not None else None
            if data is None:
                if ref.get("optional"):
                    continue
                raise PodSpecError(f"envFrom: {kind[:-1]} {ref.get('name')!r} not found")
            env.update({prefix + k: v for k, v in data.items()})
    for var in container.get("env") or ():
        name = str(var["name"])
        source = var.get("valueFrom")
        if source is None:
            env[name] = expand(str(var.get("value") or ""), env)
        elif "fieldRef" in source:
            env[name] = _field(pod, str(source["fieldRef"].get("fieldPath") or ""))
        elif "resourceFieldRef" in source:
            env[name] = _resource(container, source["resourceFieldRef"])
        elif "configMapKeyRef" in source or "secretKeyRef" in source:
            kind = "configmaps" if "configMapKeyRef" in source else "secrets"
            value = _key(kind, source.get("configMapKeyRef") or source["secretKeyRef"], lookup)
            if value is not None:
                env[name] = value
        else:
            raise PodSpecError(f"env {name}: valueFrom {sorted(source)} is not supported")
    return env


def decode_secret(data: Mapping[str, str] | None) -> dict[str, str]:
    """A Secret's ``data`` (base64) as text."""
    return {k: base64.b64decode(v).decode() for k, v in (data or {}).items()}


def command(container: Mapping[str, Any], env: Mapping[str, str]) -> list[str]:
    """``command`` + ``args`` with ``$(VAR)`` expanded (see the module docstring)."""
    argv: Sequence[Any] = container.get("command") or ()
    if not argv:
        raise PodSpecError(
            f"container {container.get('name')!r} has no command: its image's entrypoint "
            "is not known to the harness"
        )
    return [expand(str(part), env) for part in [*argv, *(container.get("args") or ())]]


def service_names(service: str, namespace: str, domain: str) -> list[str]:
    """What a pod in ``namespace`` may call ``service`` (cluster DNS with the pod's search
    list, flattened).

    >>> service_names("demo-head-svc", "ray", "cluster.local")[-1]
    'demo-head-svc.ray.svc.cluster.local'
    """
    return [service, f"{service}.{namespace}", f"{service}.{namespace}.svc",
            f"{service}.{namespace}.svc.{domain}"]  # fmt: skip


def hosts_file(pod: Mapping[str, Any], extra: Mapping[str, str] = {}) -> str:
    """``/etc/hosts`` for ``pod`` (see the module docstring); ``extra`` maps names to IPs."""
    ip = str((pod.get("status") or {}).get("podIP") or "")
    if not ip:
        raise PodSpecError("the pod has no IP yet")
    lines = [
        "# Kubernetes-managed hosts file (written by hack/realray).",
        "127.0.0.1\tlocalhost",
        "::1\tlocalhost ip6-localhost ip6-loopback",
        "fe00::0\tip6-localnet",
        "fe00::0\tip6-mcastprefix",
        "fe00::1\tip6-allnodes",
        "fe00::2\tip6-allrouters",
        f"{ip}\t{hostname(pod)}",
    ]
    lines += [f"{address}\t{name}" for name, address in extra.items()]
    return "\n".join(lines) + "\n"
