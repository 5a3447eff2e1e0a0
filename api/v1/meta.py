"""What every ``ray.io/v1`` type shares: the model base, ``Condition``, scalar types.

Wire format (the rules the types in this package follow):

- **camelCase on the wire, snake_case in Python.** Every alias comes from
  :func:`camel` (KubeRay's spelling: ``desired_cpu`` -> ``desiredCPU``,
  ``pod_ip`` -> ``podIP``), none is written by hand, so type checkers see the
  Python names. Input is accepted by alias and by Python name (``populate_by_name``).
- **Unknown fields are kept** (``extra="allow"``): an object written by a newer
  KubeRay, or carrying fields this operator does not model, survives
  ``model_validate`` -> ``model_dump`` unchanged. The CRD schema, not the model,
  decides what the API server stores (see ``hack/gen_manifests.py``).
- **``None`` means unset.** Optional fields default to ``None`` and carry no
  server-side default. A non-``None`` default on a spec field (``replicas: 0``,
  ``rayClusterDeletionDelaySeconds: 60``) is an API default: the generated CRD
  declares it, so the API server fills it in too. Status schemas never carry
  defaults - the operator computes the whole status, and server-filled values
  would make the stored status differ from what was computed.
- **Timestamps stay strings** (:data:`Time`, RFC 3339 as the API server writes
  them), so a dump equals what was read and status diffs compare like with like.
- Serialise for the API server with :meth:`Model.to_api`
  (``model_dump(mode="json", by_alias=True, exclude_none=True)``).

The small annotation helpers (:class:`Schema`, :data:`Int32`, :data:`RawObject`,
...) put OpenAPI hints (``format``, ``x-kubernetes-*``) into the JSON schema that
pydantic generates; ``hack/gen_manifests.py`` turns that into the CRD's
structural schema.

>>> c = Condition(type="Ready", status="True", reason="NonZeroServeEndpoints",
...               message="", last_transition_time="2026-01-01T00:00:00Z")
>>> sorted(c.to_api())
['lastTransitionTime', 'message', 'reason', 'status', 'type']
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Literal

import pydantic

__all__ = [
    "CONDITION_LIST",
    "INT32_MAX",
    "Condition",
    "ConditionStatus",
    "Conditions",
    "Int32",
    "Int64",
    "Model",
    "PrinterColumn",
    "Quantity",
    "RawObject",
    "Schema",
    "Time",
    "camel",
    "error_messages",
    "field_path",
]

INT32_MAX = 2**31 - 1
"""The largest ``int32``: KubeRay's default ``maxReplicas``."""


@dataclasses.dataclass(frozen=True, slots=True, eq=False)
class Schema:
    """An ``Annotated`` marker that adds keys to a type's JSON schema.

    >>> class M(pydantic.BaseModel):
    ...     x: Int32  # Annotated[int, Schema({"format": "int32"})]
    >>> M.model_json_schema()["properties"]["x"]
    {'format': 'int32', 'title': 'X', 'type': 'integer'}
    """

    extra: Mapping[str, Any]

    def __get_pydantic_json_schema__(
        self, core_schema: Any, handler: pydantic.GetJsonSchemaHandler
    ) -> dict[str, Any]:
        schema = dict(handler(core_schema))
        schema.update(self.extra)
        return schema


Int32 = Annotated[int, Schema({"format": "int32"})]
"""A Kubernetes ``int32``."""

Int64 = Annotated[int, Schema({"format": "int64"})]
"""A Kubernetes ``int64``."""

Time = Annotated[str, Schema({"format": "date-time"})]
"""A ``metav1.Time``: an RFC 3339 timestamp, kept as the string the server sent."""

Quantity = Annotated[
    int | str,
    pydantic.WithJsonSchema(
        {"anyOf": [{"type": "integer"}, {"type": "string"}], "x-kubernetes-int-or-string": True}
    ),
]
"""A ``resource.Quantity`` (``"500m"``, ``"2Gi"``, ``1``), kept as given."""

RawObject = Annotated[dict[str, Any], Schema({"x-kubernetes-preserve-unknown-fields": True})]
"""An object carried as plain JSON (pod templates, Services, options we do not act on).

The CRD stores it as ``x-kubernetes-preserve-unknown-fields``: the API server
keeps every field and validates none; whatever the operator creates from it is
validated when that object is created.
"""

ConditionStatus = Literal["True", "False", "Unknown"]

CONDITION_LIST: dict[str, Any] = {
    "x-kubernetes-list-type": "map",
    "x-kubernetes-list-map-keys": ["type"],
}
"""Schema keys of a ``conditions`` list: one entry per ``type`` (server-side apply merges by it)."""


_ACRONYMS = {"cpu": "CPU", "gpu": "GPU", "tpu": "TPU", "ip": "IP", "url": "URL", "yaml": "YAML"}


def camel(name: str) -> str:
    """The wire name of a Python field name, spelt as KubeRay spells it.

    >>> [camel(n) for n in ("serve_config_v2", "desired_cpu", "pod_ip", "dashboard_url")]
    ['serveConfigV2', 'desiredCPU', 'podIP', 'dashboardURL']
    """
    first, *rest = name.split("_")
    return first + "".join(_ACRONYMS.get(part, part.capitalize()) for part in rest)


class Model(pydantic.BaseModel):
    """Base of every ``ray.io/v1`` model: camelCase aliases, unknown fields kept."""

    model_config = pydantic.ConfigDict(
        alias_generator=camel,
        populate_by_name=True,
        extra="allow",
        use_attribute_docstrings=True,
    )

    def to_api(self) -> dict[str, Any]:
        """The JSON object to send to the API server (aliases, no ``None`` values)."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


class Condition(Model):
    """One aspect of the object's state, in the shape of ``metav1.Condition``."""

    type: str = pydantic.Field(
        max_length=316,
        pattern=r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
        r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$",
    )
    """CamelCase condition type, e.g. ``Ready``; unique within the list."""
    status: ConditionStatus
    """``True``, ``False`` or ``Unknown``."""
    observed_generation: Annotated[Int64, pydantic.Field(ge=0)] | None = None
    """The ``metadata.generation`` the condition was computed for."""
    last_transition_time: Time
    """When ``status`` last changed (not when the condition was last written)."""
    reason: str = pydantic.Field(
        min_length=1, max_length=1024, pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"
    )
    """A CamelCase machine-readable reason for the last transition."""
    message: str = pydantic.Field(max_length=32768)
    """A human-readable message; may be empty."""


Conditions = Annotated[list[Condition], Schema(CONDITION_LIST)]
"""A ``conditions`` list: ``metav1.Condition`` s, one per ``type``."""


@dataclasses.dataclass(frozen=True, slots=True)
class PrinterColumn:
    """A ``kubectl get`` column of a CRD (``additionalPrinterColumns``)."""

    name: str
    type: Literal["string", "integer", "number", "boolean", "date"]
    json_path: str
    description: str = ""
    priority: int = 0
    """0: shown by ``kubectl get``; 1: only with ``-o wide``."""

    AGE: ClassVar[PrinterColumn]

    def to_api(self) -> dict[str, Any]:
        column: dict[str, Any] = {"name": self.name, "type": self.type, "jsonPath": self.json_path}
        if self.description:
            column["description"] = self.description
        if self.priority:
            column["priority"] = self.priority
        return column


PrinterColumn.AGE = PrinterColumn("age", "date", ".metadata.creationTimestamp")


def error_messages(
    exc: pydantic.ValidationError, *, root: str = "", under: str | None = None
) -> list[str]:
    """One ``<field>: <why>`` line per error of ``exc``, the field written as a path
    (``spec.workerGroupSpecs[0].replicas``). ``root`` prefixes every path; a location
    that starts with ``under`` has that first part replaced by ``root``.

    >>> class Thing(Model):
    ...     count: int
    >>> try:
    ...     Thing.model_validate({"count": "many"})
    ... except pydantic.ValidationError as exc:
    ...     error_messages(exc, root="spec")
    ['spec.count: Input should be a valid integer, unable to parse string as an integer']
    """
    out = []
    for error in exc.errors():
        location = error["loc"]
        if under is not None and location[:1] == (under,):
            location = location[1:]
        out.append(f"{field_path(location, root=root)}: {error['msg']}")
    return out


def field_path(location: tuple[int | str, ...], *, root: str = "") -> str:
    """A pydantic error's ``loc`` written as a field path: names joined by ``.``, list
    indexes in brackets, after ``root`` (``""`` for an empty location and no root).

    >>> field_path(("workerGroupSpecs", 0, "replicas"), root="spec")
    'spec.workerGroupSpecs[0].replicas'
    >>> field_path(("qps",)), field_path(())
    ('qps', '')
    """
    where = root
    for part in location:
        where += f"[{part}]" if isinstance(part, int) else (f".{part}" if where else str(part))
    return where
