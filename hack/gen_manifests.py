#!/usr/bin/env python3
"""Generate the CRDs and the manager's ClusterRole from code (``make manifests``).

Writes, from the pydantic models in :mod:`api.v1` and the rule declarations in
:mod:`controllers.rbac`:

- ``config/crd/bases/ray.io_<plural>.yaml``, one CRD for each kind of ``api.v1.MODELS``
  (``rayclusters``, ``rayservices``, ``rayjobs``, ``raycronjobs``), and
  ``config/crd/kustomization.yaml`` listing them
- ``config/rbac/role.yaml``, and ``config/overlays/kubernetes-proxy/proxy_role.yaml``
  (:data:`controllers.rbac.KUBERNETES_PROXY`: only that mode's rules), and
  ``config/overlays/metrics-secure/metrics_auth_role.yaml``
  (:data:`controllers.rbac.METRICS_AUTH`: what ``--metrics-secure`` needs)
- ``config/overlays/webhooks/webhook_configuration.yaml``: the ValidatingWebhookConfiguration
  of :mod:`controllers.webhooks` (its paths and rules), calling the overlay's Service
- the Helm chart's copies: ``helm-chart/rayservice-operator/crds/`` (the same CRD
  files) and ``templates/_rules.tpl`` (the role's rules as a named template), so the
  chart can never grant other rules or install other CRDs than ``config/``

``--check`` writes nothing: it lists the files whose content would change and
exits 1 if there are any (the CI drift check). Output is deterministic: keys are
sorted and the YAML options are fixed, so a re-run gives identical bytes.

How a model becomes a CRD schema: pydantic's ``model_json_schema()`` (JSON
Schema 2020-12) is rewritten into a Kubernetes *structural* OpenAPI v3 schema:

- ``$ref`` to ``$defs`` is inlined (the types are not recursive);
- ``anyOf: [X, {type: null}]`` (an optional field) becomes ``X`` with
  ``nullable: true``, except for enums: the API server checks a null against
  the enum and rejects it even when ``null`` is listed, while a null in a
  non-nullable field is pruned (treated as unset), which is what ``None`` means;
  a default of ``None`` is dropped;
- ``additionalProperties: true`` that pydantic adds for ``extra="allow"`` is
  dropped: the model keeps unknown fields, but the schema states what the API
  stores (a field outside the schema is pruned, or rejected by strict field
  validation); raw objects say so explicitly with
  ``x-kubernetes-preserve-unknown-fields``;
- ``title`` and ``const`` are dropped; descriptions come from the attribute
  docstrings; constraints (``minimum``, ``maxLength``, ``pattern``, ``enum``) and
  ``x-kubernetes-*`` keys are kept;
- defaults are kept in the spec and dropped under ``status`` (the operator
  computes the whole status; see :mod:`api.v1.meta`);
- any other JSON Schema keyword is an error, so a model change that the
  conversion does not understand fails loudly instead of producing a wrong CRD.

The top level is the usual ``apiVersion``, ``kind``, ``metadata`` (``type:
object``; the API server owns its schema), ``spec`` (required) and ``status``.
Names, categories, short names and printer columns come from the model's
``RESOURCE``, ``CATEGORIES``, ``SHORT_NAMES`` and ``PRINTER_COLUMNS``.

Replacing KubeRay's CRDs in place: KubeRay's CRDs also list ``v1alpha1``, and the
API server refuses a CRD that drops a version named in the current CRD's
``status.storedVersions`` (a cluster upgraded from an old KubeRay has
``v1alpha1`` there). Each name in the model's ``LEGACY_VERSIONS`` is therefore
listed after ``v1`` as ``served: false, storage: false`` with the schema
``type: object`` plus ``x-kubernetes-preserve-unknown-fields``. The API server
accepts ``type: object`` alone, but an object etcd still holds as ``v1alpha1``
(nothing migrates storage) is pruned and defaulted with *that* version's
schema when it is read: with ``type: object`` alone its spec reads back empty
(measured), with the preserving schema it reads back as stored. With the
default conversion (``None``) such objects are served as ``v1``; a request for
``ray.io/v1alpha1`` is not served (KubeRay v1.7.0 serves it for neither kind).

Serving an old version as KubeRay does: KubeRay v1.7.0 still serves ``v1alpha1``
for RayJob (deprecated, not storage), so clients that read or write
``ray.io/v1alpha1`` RayJobs keep working. Each name in the model's
``SERVED_VERSIONS`` is listed after ``v1`` as ``served: true, storage: false``,
``deprecated: true``, with **v1's schema**, status subresource and printer columns.
The conversion stays ``None`` (the API server only rewrites ``apiVersion``), which
is correct only because the schemas are the same: the ``v1alpha1`` served here is
v1's shape, not KubeRay's old ``v1alpha1`` schema (which lacks v1's newer fields
and requires ``entrypoint``), so a ``v1alpha1`` object is stored as the same ``v1``
object and reads back unchanged in either version. A version is in
``SERVED_VERSIONS`` or ``LEGACY_VERSIONS``, never both.

How a user replaces them: ``kubectl apply --server-side --force-conflicts -f
config/crd/bases``. KubeRay's CRDs are about a megabyte each, past the 256 KiB
annotation client-side ``kubectl apply`` writes, so they were installed by
``helm``, ``kubectl create`` or ``replace``, or a server-side apply. Whoever did
owns ``spec.versions``, so a plain server-side apply stops with a conflict on it
(unless that was ``kubectl``'s own field manager); ``--force-conflicts`` takes it
over. ``spec.versions`` is an atomic list, so ours replaces it whole.
(Ours are small: a client-side ``kubectl apply`` over KubeRay's works too.)
"""

from __future__ import annotations

import argparse
import pathlib
import re
import sys
from collections.abc import Iterable, Mapping
from typing import Any

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(ROOT))
if str(ROOT / "hack") not in sys.path:
    sys.path.insert(0, str(ROOT / "hack"))

import _generated  # noqa: E402

import api.v1  # noqa: E402
from controllers import rbac, webhooks  # noqa: E402

__all__ = [
    "SchemaError",
    "cluster_role",
    "crd",
    "generate",
    "legacy_version",
    "main",
    "render",
    "served_version",
    "structural",
]

HEADER = "# Generated by hack/gen_manifests.py from {source}. Do not edit; run `make manifests`.\n"

_KEEP = frozenset(
    {
        "description",
        "enum",
        "format",
        "maxItems",
        "maxLength",
        "maximum",
        "minItems",
        "minLength",
        "minimum",
        "pattern",
    }
)
_DROP = frozenset({"title", "const"})


class SchemaError(ValueError):
    """The model's JSON schema uses something the CRD conversion does not handle."""


def _plain(text: str) -> str:
    """A docstring as ``kubectl explain`` shows it: reST roles and double backquotes removed."""
    text = re.sub(r":[a-z]+:`~?(?:[\w.]+\.)?([^`]+)`", r"\1", text)
    return text.replace("``", "`")


def structural(schema: Mapping[str, Any], defs: Mapping[str, Any], *, status: bool = False,
               path: str = "") -> dict[str, Any]:  # fmt: skip
    """Rewrite one pydantic JSON schema node (and its children) as a structural schema."""
    node = dict(schema)
    if "$ref" in node:
        ref = node.pop("$ref")
        name = ref.removeprefix("#/$defs/")
        if name not in defs:
            raise SchemaError(f"{path}: unresolvable $ref {ref}")
        node = {**defs[name], **node}  # the referring node's keys (description, default) win
    if "allOf" in node:  # older pydantic wraps a $ref with siblings in allOf
        parts = node.pop("allOf")
        if len(parts) != 1:
            raise SchemaError(f"{path}: allOf with {len(parts)} parts")
        return structural({**parts[0], **node}, defs, status=status, path=path)
    if "anyOf" in node and not node.get("x-kubernetes-int-or-string"):
        options = node.pop("anyOf")
        others = [o for o in options if o != {"type": "null"}]
        if len(others) != 1 or len(others) == len(options):
            raise SchemaError(f"{path}: anyOf other than 'X or null': {options}")
        default = node.pop("default", None)
        optional = structural({**others[0], **node}, defs, status=status, path=path)
        if "enum" not in optional:  # the API server checks a null against the enum, and fails it
            optional["nullable"] = True
        if default is not None and not status:
            optional["default"] = default
        return optional

    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROP:
            continue
        if key == "description":
            out[key] = _plain(value)
        elif key in _KEEP or key.startswith("x-kubernetes-"):
            out[key] = value
        elif key == "type":
            if value == "null":
                raise SchemaError(f"{path}: a field that can only be null")
            out["type"] = value
        elif key == "default":
            if value is not None and not status:
                out["default"] = value
        elif key == "anyOf":  # int-or-string: keep the two alternatives as they are
            out["anyOf"] = [dict(option) for option in value]
        elif key == "properties":
            out["properties"] = {
                name: structural(sub, defs, status=status, path=f"{path}.{name}")
                for name, sub in value.items()
            }
        elif key == "required":
            out["required"] = sorted(value)
        elif key == "items":
            out["items"] = structural(value, defs, status=status, path=f"{path}[]")
        elif key == "additionalProperties":
            if isinstance(value, Mapping):
                out["additionalProperties"] = structural(
                    value, defs, status=status, path=f"{path}.*"
                )
            elif value is not True or not (
                "properties" in node or node.get("x-kubernetes-preserve-unknown-fields")
            ):
                raise SchemaError(f"{path}: free-form object: annotate it as api.v1.meta.RawObject")
        elif key == "$defs":
            continue
        else:
            raise SchemaError(f"{path}: unsupported JSON schema keyword {key!r}")
    return out


def crd(model: type[api.v1.meta.Model]) -> dict[str, Any]:
    """The CustomResourceDefinition for a top-level model (``api.v1.MODELS``)."""
    resource = model.RESOURCE  # type: ignore[attr-defined]
    raw = model.model_json_schema(by_alias=True, mode="validation")
    defs = raw.get("$defs", {})
    props = raw["properties"]
    schema: dict[str, Any] = {
        "type": "object",
        "description": _plain(raw.get("description", "")),
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": structural(props["spec"], defs, path=".spec"),
            "status": structural(props["status"], defs, status=True, path=".status"),
        },
        "required": ["spec"],
    }
    names: dict[str, Any] = {
        "kind": resource.kind,
        "listKind": f"{resource.kind}List",
        "plural": resource.plural,
        "singular": resource.kind.lower(),
    }
    if model.CATEGORIES:  # type: ignore[attr-defined]
        names["categories"] = list(model.CATEGORIES)  # type: ignore[attr-defined]
    if model.SHORT_NAMES:  # type: ignore[attr-defined]
        names["shortNames"] = list(model.SHORT_NAMES)  # type: ignore[attr-defined]
    served: tuple[str, ...] = getattr(model, "SERVED_VERSIONS", ())
    legacy: tuple[str, ...] = model.LEGACY_VERSIONS  # type: ignore[attr-defined]
    if both := set(served) & set(legacy):
        raise SchemaError(f"{resource.kind}: {sorted(both)} both served and legacy")
    if resource.version in {*served, *legacy}:
        raise SchemaError(f"{resource.kind}: {resource.version} is the storage version")
    storage = {
        "name": resource.version,
        "served": True,
        "storage": True,
        "schema": {"openAPIV3Schema": schema},
        "subresources": {"status": {}},
        "additionalPrinterColumns": [
            column.to_api()
            for column in model.PRINTER_COLUMNS  # type: ignore[attr-defined]
        ],
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{resource.plural}.{resource.group}"},
        "spec": {
            "group": resource.group,
            "names": names,
            "scope": "Namespaced" if resource.namespaced else "Cluster",
            "versions": [
                storage,
                *(served_version(name, storage, resource.group, resource.kind) for name in served),
                *(legacy_version(name) for name in legacy),
            ],
        },
    }


def served_version(name: str, storage: Mapping[str, Any], group: str, kind: str) -> dict[str, Any]:
    """A deprecated version served beside the storage version with the storage version's
    schema, status subresource and columns (the module docstring says why ``None``
    conversion is then right)."""
    current = f"{group}/{storage['name']}"
    return {
        **storage,
        "name": name,
        "served": True,
        "storage": False,
        "deprecated": True,
        "deprecationWarning": f"{group}/{name} {kind} is deprecated and served with the schema "
        f"of {current}; use {current}.",
    }


def legacy_version(name: str) -> dict[str, Any]:
    """A version listed only so that a CRD whose ``status.storedVersions`` names it accepts
    ours: neither served nor storage. Every version of an ``apiextensions.k8s.io/v1`` CRD
    needs a structural schema; this one keeps every field, because objects still stored in
    this version are pruned with it when they are read."""
    return {
        "name": name,
        "served": False,
        "storage": False,
        "schema": {
            "openAPIV3Schema": {
                "type": "object",
                "description": f"{name} is not served; objects are read and written as v1.",
                "x-kubernetes-preserve-unknown-fields": True,
            }
        },
    }


def cluster_role(rules: Iterable[rbac.Rule], name: str = rbac.ROLE_NAME) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": name},
        "rules": rbac.merge(rules),
    }


class _Dumper(yaml.SafeDumper):
    """``safe_dump`` with block style for multi-line strings and no anchors/aliases."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def render(doc: Mapping[str, Any], source: str) -> str:
    body = yaml.dump(
        doc, Dumper=_Dumper, sort_keys=True, default_flow_style=False,
        allow_unicode=True, width=100, indent=2,
    )  # fmt: skip
    return HEADER.format(source=source) + body


def generate() -> dict[pathlib.Path, str]:
    """Every generated file (relative to the repository root) and its content."""
    files: dict[pathlib.Path, str] = {}
    for model in api.v1.MODELS:
        resource = model.RESOURCE
        path = pathlib.Path("config/crd/bases") / f"{resource.group}_{resource.plural}.yaml"
        files[path] = render(crd(model), f"{model.__module__}.{model.__name__}")
    files[pathlib.Path("config/crd/kustomization.yaml")] = render(
        {
            "apiVersion": "kustomize.config.k8s.io/v1beta1",
            "kind": "Kustomization",
            "resources": [f"bases/{path.name}" for path in sorted(files)],
        },
        "api.v1.MODELS",
    )
    rules = [rule for declared in rbac.DECLARATIONS.values() for rule in declared]
    role = cluster_role(rules)
    files[pathlib.Path("config/rbac/role.yaml")] = render(role, "controllers/rbac.py")
    for path in list(files):
        if path.parent == pathlib.Path("config/crd/bases"):
            files[CHART / "crds" / path.name] = files[path]
    proxy = cluster_role(rbac.KUBERNETES_PROXY, rbac.PROXY_ROLE_NAME)
    files[pathlib.Path("config/overlays/kubernetes-proxy/proxy_role.yaml")] = render(
        proxy, "controllers/rbac.py (KUBERNETES_PROXY)"
    )
    metrics_auth = cluster_role(rbac.METRICS_AUTH, rbac.METRICS_AUTH_ROLE_NAME)
    files[pathlib.Path("config/overlays/metrics-secure/metrics_auth_role.yaml")] = render(
        metrics_auth, "controllers/rbac.py (METRICS_AUTH)"
    )
    files[WEBHOOK_OVERLAY / "webhook_configuration.yaml"] = render(
        webhooks.configuration(WEBHOOK_SERVICE, SYSTEM_NAMESPACE), "controllers/webhooks.py"
    )
    files[CHART / "templates" / "_rules.tpl"] = RULES_TEMPLATE.format(
        rules=_rules_yaml(role),
        proxy_rules=_rules_yaml(proxy),
        metrics_auth_rules=_rules_yaml(metrics_auth),
    )
    return files


def _rules_yaml(role: dict[str, Any]) -> str:
    return yaml.dump(
        role["rules"], Dumper=_Dumper, sort_keys=True, default_flow_style=False, width=100
    ).rstrip("\n")


CHART = pathlib.Path("helm-chart/rayservice-operator")
WEBHOOK_OVERLAY = pathlib.Path("config/overlays/webhooks")
WEBHOOK_SERVICE = "rayservice-operator-webhook-service"
SYSTEM_NAMESPACE = "rayservice-operator-system"
RULES_TEMPLATE = """\
{{{{/*
Generated by hack/gen_manifests.py from controllers/rbac.py (`make manifests`); do not edit.
What the manager may do with the resources it reconciles: the rules of
config/rbac/role.yaml, granted by a ClusterRole or, with watchNamespace, by a Role in
each namespace; with useKubernetesProxy also those of
config/overlays/kubernetes-proxy/proxy_role.yaml.
*/}}}}
{{{{- define "rayservice-operator.rules" -}}}}
{rules}
{{{{- if .Values.useKubernetesProxy }}}}
{proxy_rules}
{{{{- end }}}}
{{{{- end }}}}

{{{{/*
With metrics.secure.enabled, the rules of config/overlays/metrics-secure/metrics_auth_role.yaml
(always a ClusterRole: token and access reviews are cluster-scoped).
*/}}}}
{{{{- define "rayservice-operator.metricsAuthRules" -}}}}
{metrics_auth_rules}
{{{{- end }}}}
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--check", action="store_true",
        help="write nothing; list the files that would change and exit 1 if any",
    )  # fmt: skip
    parser.add_argument("--root", type=pathlib.Path, default=ROOT, help="repository root")
    args = parser.parse_args(argv)

    return _generated.sync(
        generate(),
        args.root,
        check=args.check,
        hint="run `make manifests` (python hack/gen_manifests.py) and commit the result",
    )


if __name__ == "__main__":
    sys.exit(main())
