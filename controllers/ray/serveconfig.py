"""``serveConfigV2`` (a YAML string on the RayService) -> the JSON object PUT to Ray Serve.

:func:`serve_config` parses the YAML and returns the mapping that
``PUT /api/serve/applications/`` takes as its JSON body. Nothing about Serve's
schema is checked here (Ray does that, answering 400 with its own message); what
is checked is what would make the PUT impossible:

- the text must be YAML (a :class:`ServeConfigError` names the line and column,
  1-based, when the YAML parser gives them);
- the document must be a **mapping** (``applications: [...]``, ...), not a list,
  a scalar or nothing;
- every value must have a JSON form (no ``!!binary``, no ``.nan``/``.inf``);
- **bounded**: at most :data:`MAX_LENGTH` characters (1.5 MiB, etcd's limit for a
  whole object; the CRD declares it as ``maxLength`` too), and anchors and aliases
  may add at most :data:`MAX_ALIAS_NODES` nodes to the document once expanded. The
  node graph is composed first (aliases share their node, so that costs what the text
  costs) and measured before anything is built: a 420-byte "billion laughs" document
  that expands to a gigabyte is refused in microseconds. (KubeRay's YAML library
  refuses such documents as "excessive aliasing".)

**Parsed once**: the result for a text is kept (the most recently used texts, as their
JSON encoding, so each caller gets its own copy; at most :data:`CACHED_BYTES` of text
and encoding together, so many large configs cannot grow it past that), so a
RayService's config is parsed once per change, not on every pass. :func:`parse_off_loop`
does that parse in a worker thread, so a large config never blocks the event loop; a
later :func:`serve_config` of the same text is then a cache hit.

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

import asyncio
import collections
import gc
import json
import threading
from typing import Any

import yaml

from api.v1 import rayservice

__all__ = [
    "CACHED_BYTES",
    "MAX_ALIAS_NODES",
    "MAX_LENGTH",
    "REDACTED",
    "ServeConfigError",
    "parse_off_loop",
    "redact",
    "serve_config",
]

MAX_LENGTH = rayservice.MAX_SERVE_CONFIG_LENGTH
"""Longest ``serveConfigV2`` accepted, in characters (etcd's 1.5 MiB object limit)."""
MAX_ALIAS_NODES = 10_000
"""Most nodes aliases may add to a document once expanded."""
CACHED_BYTES = 64 * 1024 * 1024
"""Characters of texts and their encodings the parse cache keeps, together."""

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
    """The JSON-ready mapping for ``serve_config_v2`` (a new copy each call); see the
    module docstring."""
    encoded, error = _parse(serve_config_v2)
    if error is not None:
        raise ServeConfigError(str(error), line=error.line, column=error.column)
    result: dict[str, Any] = json.loads(encoded)
    return result


_NOT_SECRET = frozenset({"name", "import_path", "route_prefix"})
"""Keys whose values are kept by :func:`redact` (they name things; the message needs them)."""
REDACTED = "<redacted>"


def redact(text: str, config: Any) -> str:
    """``text`` (Serve's refusal, which may echo the config) with every value of
    ``config`` replaced by ``<redacted>``, except application and deployment names,
    import paths and route prefixes; keys are kept. Values are scalars of three
    characters or more (shorter ones are not worth hiding and would garble the text).

    >>> config = {"applications": [{"name": "a", "import_path": "m.a",
    ...     "runtime_env": {"env_vars": {"TOKEN": "hunter2-secret"}}}]}
    >>> redact("bad env_vars: {'TOKEN': 'hunter2-secret'} in app a (m.a)", config)
    "bad env_vars: {'TOKEN': '<redacted>'} in app a (m.a)"
    """
    values: set[str] = set()

    def walk(node: Any, key: str | None) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, str(k))
        elif isinstance(node, list):
            for item in node:
                walk(item, key)
        elif key not in _NOT_SECRET and not isinstance(node, bool) and node is not None:
            value = str(node)
            if len(value) >= 3:
                values.add(value)

    walk(config, None)
    for value in sorted(values, key=len, reverse=True):
        text = text.replace(value, REDACTED)
    return text


async def parse_off_loop(serve_config_v2: str) -> None:
    """Parse ``serve_config_v2`` in a worker thread, unless it was parsed already; the
    outcome (a mapping or an error) waits for :func:`serve_config`."""
    if serve_config_v2 not in _results:
        _remember(serve_config_v2, await asyncio.to_thread(_outcome_gc_paused, serve_config_v2))


_gc_lock = threading.Lock()
_gc_pausers = 0
_gc_was_enabled = False


def _outcome_gc_paused(serve_config_v2: str) -> _Outcome:
    """:func:`_outcome` with the cyclic garbage collector paused (process-wide, counted
    across threads). Measured on a 1 MB config: the collections its ~10^6 new objects
    trigger stop every thread, the event loop's too, for up to 0.3 s each; paused, the
    parse is twice as fast and the loop never waits over 20 ms. What a parse builds is
    a tree (no cycles to collect), freed by reference counting."""
    global _gc_pausers, _gc_was_enabled
    with _gc_lock:
        if _gc_pausers == 0:
            _gc_was_enabled = gc.isenabled()
            gc.disable()
        _gc_pausers += 1
    try:
        return _outcome(serve_config_v2)
    finally:
        with _gc_lock:
            _gc_pausers -= 1
            if _gc_pausers == 0 and _gc_was_enabled:
                gc.enable()


_Outcome = tuple[str, ServeConfigError | None]
"""(the JSON encoding, None) or ("", the error)."""
_results: collections.OrderedDict[str, _Outcome] = collections.OrderedDict()
_cached_size = 0


def _parse(serve_config_v2: str) -> _Outcome:
    found = _results.get(serve_config_v2)
    if found is not None:
        _results.move_to_end(serve_config_v2)
        return found
    return _remember(serve_config_v2, _outcome(serve_config_v2))


def _remember(text: str, outcome: _Outcome) -> _Outcome:
    global _cached_size
    if text not in _results:
        _cached_size += len(text) + len(outcome[0])
    _results[text] = outcome
    while _cached_size > CACHED_BYTES and len(_results) > 1:
        old_text, (old_encoded, _) = _results.popitem(last=False)
        _cached_size -= len(old_text) + len(old_encoded)
    return outcome


def _outcome(serve_config_v2: str) -> _Outcome:
    try:
        return _encode(_load(serve_config_v2)), None
    except ServeConfigError as exc:
        return "", exc


def _load(serve_config_v2: str) -> object:
    if len(serve_config_v2) > MAX_LENGTH:
        raise ServeConfigError(
            f"serveConfigV2 has {len(serve_config_v2)} characters, more than {MAX_LENGTH}"
        )
    loader = _Loader(serve_config_v2)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        added = _expanded(node, {}) - _distinct(node, set())
        if added > MAX_ALIAS_NODES:
            raise ServeConfigError(
                f"serveConfigV2 uses anchors and aliases that expand it by {added} nodes, more "
                f"than {MAX_ALIAS_NODES}: write the repeated parts out, or repeat less"
            )
        return loader.construct_document(node)
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
    except RecursionError:
        raise ServeConfigError("serveConfigV2 is nested too deeply") from None
    finally:
        loader.dispose()


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def _expanded(node: yaml.Node, sizes: dict[int, int]) -> int:
    """Nodes of the document with every alias written out (shared nodes counted once
    per use), computed once per distinct node. A recursive alias adds nothing here:
    it has no JSON form, which :func:`_encode` reports."""
    key = id(node)
    if key in sizes:
        return max(sizes[key], 0)  # -1: on the current path (a cycle)
    sizes[key] = -1
    total = 1 + sum(_expanded(child, sizes) for child in _children(node))
    sizes[key] = min(total, 2**62)
    return sizes[key]


def _distinct(node: yaml.Node, seen: set[int]) -> int:
    """Nodes of the composed graph (each shared node once)."""
    stack, count = [node], 0
    while stack:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        count += 1
        stack.extend(_children(current))
    return count


def _encode(document: object) -> str:
    if not isinstance(document, dict):
        raise ServeConfigError(
            "serveConfigV2 must be a YAML mapping (such as 'applications: [...]'), "
            f"but it is {_kind(document)}"
        )
    try:
        # Keys become strings (as JSON has them), and anything without a JSON form is
        # refused here rather than by the HTTP layer.
        return json.dumps(document, allow_nan=False, default=_refuse)
    except (TypeError, ValueError) as exc:
        raise ServeConfigError(f"serveConfigV2 has a value JSON cannot carry: {exc}") from None


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
