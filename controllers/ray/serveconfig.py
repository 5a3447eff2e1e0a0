"""``serveConfigV2`` (a YAML string on the RayService) -> the JSON object PUT to Ray Serve.

:func:`serve_config` parses the YAML and returns the mapping that
``PUT /api/serve/applications/`` takes as its JSON body. Nothing about Serve's
schema is checked here (Ray does that, answering 400 with its own message); what
is checked is what would make the PUT impossible:

- the text must be YAML (a :class:`ServeConfigError` names the line and column,
  1-based, when the YAML parser gives them);
- the document must be a **mapping** (``applications: [...]``, ...), not a list,
  a scalar or nothing;
- every value must have a JSON form (no ``!!binary``, no ``.nan``/``.inf``).

YAML is read as KubeRay reads it (YAML 1.1 through ``sigs.k8s.io/yaml``): ``yes``/
``no``/``on``/``off`` are booleans, numbers are numbers, non-string keys become
strings, and **timestamps stay strings** (``2024-01-02`` is the text
``"2024-01-02"``, not a date). :class:`ServeConfigError` is a ``ValueError``.
Uses PyYAML (a dependency of the project already; the C loader when present).

>>> serve_config("applications:\\n  - name: app\\n    import_path: mod:app\\n")
{'applications': [{'name': 'app', 'import_path': 'mod:app'}]}
>>> try:
...     serve_config("applications:\\n  - name: a\\n   import_path: x")
... except ServeConfigError as exc:
...     print(exc.line, exc.column, exc)
3 4 serveConfigV2 is not valid YAML (line 3, column 4): did not find expected '-' indicator
>>> serve_config("- a\\n- b")
Traceback (most recent call last):
...
controllers.ray.serveconfig.ServeConfigError: serveConfigV2 must be a YAML mapping (such as \
'applications: [...]'), but it is a list
"""

from __future__ import annotations

import json
from typing import Any

import yaml

__all__ = ["ServeConfigError", "serve_config"]

_BaseLoader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Loader(_BaseLoader):  # type: ignore[valid-type,misc]
    """The safe loader without the implicit timestamp type (timestamps stay text)."""


_Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in _BaseLoader.yaml_implicit_resolvers.items()
}


class ServeConfigError(ValueError):
    """``serveConfigV2`` cannot become a Serve config; the message says why and where.

    ``line`` and ``column`` (1-based) are set when the YAML parser located the problem.
    """

    def __init__(self, message: str, *, line: int | None = None, column: int | None = None):
        super().__init__(message)
        self.line = line
        self.column = column


def serve_config(serve_config_v2: str) -> dict[str, Any]:
    """The JSON-ready mapping for ``serve_config_v2``; see the module docstring."""
    try:
        document = yaml.load(serve_config_v2, Loader=_Loader)  # a safe loader
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = ""
        line = column = None
        if mark is not None:
            line, column = mark.line + 1, mark.column + 1
            where = f" (line {line}, column {column})"
        problem = exc.problem or exc.context or "cannot be parsed"
        raise ServeConfigError(
            f"serveConfigV2 is not valid YAML{where}: {problem}", line=line, column=column
        ) from None
    except yaml.YAMLError as exc:
        raise ServeConfigError(f"serveConfigV2 is not valid YAML: {exc}") from None
    if not isinstance(document, dict):
        raise ServeConfigError(
            "serveConfigV2 must be a YAML mapping (such as 'applications: [...]'), "
            f"but it is {_kind(document)}"
        )
    try:
        # Round trip: keys become strings (as JSON has them), and anything without a
        # JSON form is refused here rather than by the HTTP layer.
        encoded = json.dumps(document, allow_nan=False, default=_refuse)
    except (TypeError, ValueError) as exc:
        raise ServeConfigError(f"serveConfigV2 has a value JSON cannot carry: {exc}") from None
    result: dict[str, Any] = json.loads(encoded)
    return result


def _refuse(value: object) -> Any:
    raise TypeError(f"{type(value).__name__} {value!r:.60}")


def _kind(document: object) -> str:
    if document is None:
        return "empty"
    if isinstance(document, list):
        return "a list"
    if isinstance(document, bool):
        return f"a boolean ({document})"
    if isinstance(document, int | float):
        return f"a number ({document})"
    return (
        f"a {'string' if isinstance(document, str) else type(document).__name__} ({document!r:.40})"
    )
