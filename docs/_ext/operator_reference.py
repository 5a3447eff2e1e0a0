"""The operator's reference tables, generated from the code when the docs are built.

A Sphinx extension (``docs/conf.py`` loads it) and a plain module: the four functions
say what there is to document, the four directives render it as tables, and
``tests/unit/repository/test_reference_docs.py`` fails when an entry has no
description. Nothing in the tables is written by hand, so they cannot drift.

- :func:`flags`, directive ``rayservice-flags``: every field of
  :class:`controllers.main.Settings`, i.e. every flag ``rayservice-manager --help``
  lists: the flag (the field's name in kebab-case), its environment variable (the
  settings' ``env_prefix`` and the name in capitals), type, default and description.
- :func:`configuration_fields`, ``rayservice-configuration``: every field of
  :class:`controllers.configuration.Configuration` (KubeRay's ``--config`` file): its
  key in the file (the camelCase alias), type, default (none: required) and
  description (the field's docstring).
- :func:`metrics`, ``rayservice-metrics``: every family ``prometheus_client`` reports
  for the manager's ``/metrics``: those of :data:`runtime.metrics.registry` once every
  module of ``runtime`` (but ``runtime.testing``), ``api`` and ``controllers`` is
  imported, and those a :class:`controllers.metrics.Collector` describes (registered
  only with ``--enable-metrics``); sorted by name. The name is the one scraped (a
  counter's ends in ``_total``; a histogram also has ``_bucket``, ``_sum`` and
  ``_count`` series), with the type, the label names and the help.
- :func:`helm_values`, ``helm-values``: the keys of the chart's ``values.yaml``, in file
  order. A key's comment is the block of ``#`` lines right above it (no blank line
  between). A key is one row, with its whole value as the default, unless it is a
  mapping in which a key has a comment of its own: then each of its keys is a row (by
  the same rule), and the mapping itself is a row without default only if it has a
  comment. ``ValueError`` when the file has a line this reader does not understand
  (it reads block-style mappings and lists only).

In the tables, text between backticks (single or double) is code. The directives take
no argument, option or content: in MyST, a fence whose info string is
``{rayservice-flags}`` and whose body is empty.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import json
import pathlib
import pkgutil
import re
import types
import typing
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, ClassVar

import yaml
from docutils import nodes
from prometheus_client import metrics_core
from sphinx import application
from sphinx.util import docutils as sphinx_docutils

from controllers import configuration as configuration_
from controllers import main
from controllers import metrics as kuberay_metrics
from runtime import metrics as runtime_metrics

__all__ = [
    "VALUES",
    "ConfigurationDirective",
    "ConfigurationField",
    "Flag",
    "FlagsDirective",
    "HelmValue",
    "HelmValuesDirective",
    "Metric",
    "MetricsDirective",
    "configuration_fields",
    "flags",
    "helm_values",
    "metrics",
    "setup",
]

ROOT = pathlib.Path(__file__).resolve().parents[2]
VALUES = ROOT / "helm-chart" / "rayservice-operator" / "values.yaml"
"""The chart's values file that :func:`helm_values` reads by default."""

_PACKAGES = ("runtime", "api", "controllers")
_NOT_IN_THE_MANAGER = frozenset({"runtime.testing"})
_KUBERAY_WHEN = "with `--enable-metrics`"


@dataclasses.dataclass(frozen=True)
class Flag:
    """One flag of ``rayservice-manager``."""

    flag: str
    env: str
    type: str
    default: str | None
    """As given on the command line; ``None``: unset."""
    help: str


@dataclasses.dataclass(frozen=True)
class ConfigurationField:
    """One key of KubeRay's Configuration file."""

    key: str
    type: str
    default: str | None
    """JSON; ``None``: required."""
    description: str


@dataclasses.dataclass(frozen=True)
class Metric:
    """One metric family on ``/metrics``."""

    name: str
    type: str
    labels: tuple[str, ...]
    help: str
    when: str
    """``always``, or the flag that adds it."""


@dataclasses.dataclass(frozen=True)
class HelmValue:
    """One row of the chart's values."""

    key: str
    """The dotted path (as ``helm --set`` takes it)."""
    default: str | None
    """JSON; ``None``: a mapping whose keys are the next rows."""
    comment: str


# -- collection ---------------------------------------------------------------------------


def flags() -> list[Flag]:
    """Every flag, in ``--help`` order."""
    settings = main.Settings
    prefix = str(settings.model_config.get("env_prefix", ""))
    return [
        Flag(
            flag="--" + name.replace("_", "-"),
            env=(prefix + name).upper(),
            type=_type(info.annotation),
            default=_flag_value(info.get_default(call_default_factory=True)),
            help=info.description or "",
        )
        for name, info in settings.model_fields.items()
    ]


def configuration_fields() -> list[ConfigurationField]:
    """Every key of the Configuration file, in the model's order."""
    return [
        ConfigurationField(
            key=info.alias or name,
            type=_type(info.annotation),
            default=None
            if info.is_required()
            else _json(info.get_default(call_default_factory=True)),
            description=info.description or "",
        )
        for name, info in configuration_.Configuration.model_fields.items()
    ]


def metrics() -> list[Metric]:
    """Every metric family the manager can serve, by name."""
    for package in _PACKAGES:
        _import_tree(package)
    found = {m.name: m for m in _families(kuberay_metrics.Collector().describe(), _KUBERAY_WHEN)}
    for metric in _families(runtime_metrics.registry.collect(), "always"):
        found.setdefault(metric.name, metric)
    return sorted(found.values(), key=lambda m: m.name)


def helm_values(path: pathlib.Path = VALUES) -> list[HelmValue]:
    """The rows of the values file at ``path`` (see the module docstring)."""
    text = path.read_text()
    data = yaml.safe_load(text) or {}
    comments = _comments(text)
    keys = set(_paths(data))
    if keys != set(comments):
        unread = sorted(".".join(k) for k in keys ^ set(comments))
        raise ValueError(f"{path}: could not read the comments of {', '.join(unread)}")
    return list(_rows(data, comments, ()))


# -- the pieces -------------------------------------------------------------------------

_SCALARS: Mapping[Any, str] = {
    str: "string",
    bool: "boolean",
    int: "integer",
    float: "number",
    pathlib.Path: "path",
    Any: "any",
}


def _type(annotation: Any) -> str:
    """A field's type as a YAML or command-line user reads it (``None``: left out)."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Literal:
        return " | ".join(json.dumps(a) if a == "" else str(a) for a in args)
    if origin is types.UnionType or origin is typing.Union:
        return " | ".join(_type(a) for a in args if a is not type(None))
    if origin is list:
        return f"list of {_type(args[0])}s"
    if origin is dict:
        return "object" if args[1] is Any else f"map of {_type(args[1])}s"
    return _SCALARS.get(annotation, getattr(annotation, "__name__", str(annotation)))


def _json(value: Any) -> str:
    return json.dumps(value, default=str)


def _flag_value(value: Any) -> str | None:
    """A default as it would be written on the command line."""
    if value is None or value == []:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if value == "":
        return '""'
    if isinstance(value, list):
        return ",".join(map(str, value))
    return str(value)


def _import_tree(name: str) -> None:
    """Import ``name`` and every module below it, but those not in the manager."""
    module = importlib.import_module(name)
    for info in pkgutil.iter_modules(getattr(module, "__path__", ())):
        child = f"{name}.{info.name}"
        if child not in _NOT_IN_THE_MANAGER:
            _import_tree(child)


_SUFFIX = {"counter": "_total", "info": "_info"}
"""What the exposition adds to a family's name (``prometheus_client`` strips it)."""


def _families(families: Iterable[metrics_core.Metric], when: str) -> Iterator[Metric]:
    for family in families:
        # The *MetricFamily classes keep their label names even without samples; a
        # collector's plain Metric has them only on its samples.
        labels = getattr(family, "_labelnames", None)
        if labels is None:
            names = {k for s in family.samples for k in s.labels} - {"le", "quantile"}
            labels = sorted(names)
        yield Metric(
            name=family.name + _SUFFIX.get(family.type, ""),
            type=family.type,
            labels=tuple(labels),
            help=family.documentation,
            when=when,
        )


_KEY = re.compile(r"(?P<indent> *)(?P<key>[A-Za-z0-9_./-]+):(?=\s|$)")


def _comments(text: str) -> dict[tuple[str, ...], str]:
    """The comment right above each key of ``text``, by key path (``""``: none)."""
    out: dict[tuple[str, ...], str] = {}
    parents: list[tuple[int, str]] = []
    pending: list[str] = []
    inside: int | None = None  # the indentation of a list item or block scalar we are in
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        indent = len(line) - len(line.lstrip(" "))
        if not stripped:
            pending = []
            continue
        if inside is not None:
            if indent > inside:
                continue
            inside = None
        if stripped.startswith("#"):
            pending.append(stripped.lstrip("#").strip())
            continue
        if stripped == "-" or stripped.startswith("- "):
            inside, pending = indent, []
            continue
        match = _KEY.match(line)
        if match is None:
            raise ValueError(f"line {number}: not a key of a block mapping: {line!r}")
        while parents and parents[-1][0] >= indent:
            parents.pop()
        parents.append((indent, match["key"]))
        out[tuple(key for _, key in parents)] = " ".join(pending)
        pending = []
        if line[match.end() :].strip()[:1] in ("|", ">"):
            inside = indent
    return out


def _paths(data: Mapping[str, Any], prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    for key, value in data.items():
        yield (*prefix, str(key))
        if isinstance(value, dict):
            yield from _paths(value, (*prefix, str(key)))


def _rows(
    data: Mapping[str, Any], comments: Mapping[tuple[str, ...], str], prefix: tuple[str, ...]
) -> Iterator[HelmValue]:
    for key, value in data.items():
        path = (*prefix, str(key))
        comment = comments[path]
        below = any(c and p[: len(path)] == path and p != path for p, c in comments.items())
        if isinstance(value, dict) and value and below:
            if comment:
                yield HelmValue(".".join(path), None, comment)
            yield from _rows(value, comments, path)
        else:
            yield HelmValue(".".join(path), _json(value), comment)


# -- rendering ---------------------------------------------------------------------------


def _text(text: str) -> nodes.paragraph:
    """A paragraph of ``text``, its parts between backticks as code."""
    paragraph = nodes.paragraph()
    for i, part in enumerate(text.replace("``", "`").split("`")):  # RST's or Markdown's
        if part:
            paragraph += nodes.literal(part, part) if i % 2 else nodes.Text(part)
    return paragraph


def _code(text: str | None, missing: str = "") -> nodes.paragraph:
    """``text`` as code; ``missing`` (plain) when it is ``None``."""
    if text is None:
        return nodes.paragraph(text=missing)
    return nodes.paragraph("", "", nodes.literal(text, text))


def _codes(texts: Sequence[str]) -> nodes.paragraph:
    paragraph = nodes.paragraph()
    for i, text in enumerate(texts):
        if i:
            paragraph += nodes.Text(", ")
        paragraph += nodes.literal(text, text)
    return paragraph


class _Table(sphinx_docutils.SphinxDirective):
    """A table of ``headers`` (with relative ``widths``) and the cells of :meth:`rows`."""

    has_content = False
    headers: ClassVar[tuple[str, ...]]
    widths: ClassVar[tuple[int, ...]]

    def rows(self) -> Iterable[Sequence[nodes.Element]]:
        raise NotImplementedError

    def run(self) -> list[nodes.Node]:
        for source in _sources():  # rebuilt whenever the code or the chart changes
            self.env.note_dependency(source)
        group = nodes.tgroup(cols=len(self.headers))
        group += [nodes.colspec(colwidth=width) for width in self.widths]
        group += nodes.thead("", _row([nodes.paragraph(text=h) for h in self.headers]))
        group += nodes.tbody("", *(_row(cells) for cells in self.rows()))
        return [nodes.table("", group, classes=["operator-reference"])]


@functools.cache
def _sources() -> tuple[str, ...]:
    """The files the tables are read from (walked once per build, not once per table)."""
    code = (str(f) for package in _PACKAGES for f in sorted((ROOT / package).rglob("*.py")))
    return (*code, str(VALUES))


def _row(cells: Sequence[nodes.Element]) -> nodes.row:
    return nodes.row("", *(nodes.entry("", cell) for cell in cells))


class FlagsDirective(_Table):
    headers = ("Flag", "Environment variable", "Type", "Default", "Help")
    widths = (20, 22, 12, 12, 34)

    def rows(self) -> Iterable[Sequence[nodes.Element]]:
        for f in flags():
            yield [_code(f.flag), _code(f.env), _text(f.type), _code(f.default, "—"), _text(f.help)]


class ConfigurationDirective(_Table):
    headers = ("Key", "Type", "Default", "Description")
    widths = (22, 14, 12, 52)

    def rows(self) -> Iterable[Sequence[nodes.Element]]:
        for f in configuration_fields():
            yield [_code(f.key), _text(f.type), _code(f.default, "required"), _text(f.description)]


class MetricsDirective(_Table):
    headers = ("Metric", "Type", "Labels", "Help", "Served")
    widths = (30, 9, 17, 32, 12)

    def rows(self) -> Iterable[Sequence[nodes.Element]]:
        for m in metrics():
            yield [_code(m.name), _text(m.type), _codes(m.labels), _text(m.help), _text(m.when)]


class HelmValuesDirective(_Table):
    headers = ("Key", "Default", "Description")
    widths = (24, 22, 54)

    def rows(self) -> Iterable[Sequence[nodes.Element]]:
        for v in helm_values():
            yield [_code(v.key), _code(v.default), _text(v.comment)]


def setup(app: application.Sphinx) -> dict[str, Any]:
    """Register the four directives."""
    app.add_directive("rayservice-flags", FlagsDirective)
    app.add_directive("rayservice-configuration", ConfigurationDirective)
    app.add_directive("rayservice-metrics", MetricsDirective)
    app.add_directive("helm-values", HelmValuesDirective)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
