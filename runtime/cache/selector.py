"""Label selectors, parsed once and matched against cached objects.

The syntax and its checks are apimachinery's (``labels.Parse``), so a selector the
cache accepts is one the apiserver accepts, and it matches the same objects:

- comma-separated requirements, all of which must hold: ``key=value``,
  ``key==value``, ``key!=value``, ``key in (a,b)``, ``key notin (a,b)``, ``key``
  (exists), ``!key`` (does not exist), ``key>N`` and ``key<N`` (the label's value
  read as an integer);
- keys are qualified names (``[prefix/]name``: a lowercase DNS subdomain prefix, a
  name of at most 63 alphanumerics, ``-``, ``_``, ``.``, alphanumeric at both ends);
  values are label values (the same, or empty); ``in`` and ``notin`` are keywords
  only where an operator is expected;
- an empty value is a value: ``key=`` matches an empty label, and inside parentheses
  ``()``, ``(a,)`` and ``(a,,b)`` include the empty value;
- anything else (an empty requirement as in ``a,,b``, a trailing or leading comma,
  ``a in (x y)``, a bad key or value) raises ``ValueError`` naming the selector, the
  position and what was expected.

>>> sel = parse("app=web, tier in (front,edge), !canary")
>>> sel.matches({"app": "web", "tier": "edge"}), sel.matches({"app": "web", "tier": "db"})
(True, False)
>>> parse("").matches({})
True
>>> parse("a,,b")
Traceback (most recent call last):
...
ValueError: invalid label selector 'a,,b': at 2: found ',', expected a key after ','
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Mapping

__all__ = ["Selector", "parse"]

_NAME = re.compile(r"(?:[A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_DNS_SUBDOMAIN = re.compile(
    r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*"
)
_INTEGER = re.compile(r"[+-]?[0-9]+")
_INT64 = range(-(2**63), 2**63)
_SPECIAL = frozenset("=!(),<>")
_BLANK = frozenset(" \t\r\n")
_TWO_CHAR_OPERATORS = frozenset({"==", "!="})


@dataclasses.dataclass(frozen=True, slots=True)
class _Requirement:
    key: str
    op: str  # "in", "notin", "exists", "!exists", "gt", "lt"
    values: frozenset[str] = frozenset()
    bound: int = 0  # for "gt" and "lt"

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.op == "exists":
            return self.key in labels
        if self.op == "!exists":
            return self.key not in labels
        if self.op == "in":
            return labels.get(self.key) in self.values
        if self.op == "notin":
            return labels.get(self.key) not in self.values
        value = _integer(labels.get(self.key))
        if value is None:
            return False
        return value > self.bound if self.op == "gt" else value < self.bound


@dataclasses.dataclass(frozen=True, slots=True)
class Selector:
    """A parsed selector; :meth:`matches` takes an object's labels."""

    requirements: tuple[_Requirement, ...]

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        labels = labels or {}
        return all(r.matches(labels) for r in self.requirements)

    def narrowest(self) -> tuple[str, list[str]] | None:
        """``(label key, values)``: every match carries one of these values for that key
        (from the equality or ``in`` requirement with the fewest values), for looking
        candidates up in a label index; ``None`` if no requirement narrows them."""
        narrowing = [r for r in self.requirements if r.op == "in"]
        if not narrowing:
            return None
        best = min(narrowing, key=lambda r: len(r.values))
        return best.key, sorted(best.values)


def _integer(text: str | None) -> int | None:
    if text is None or not _INTEGER.fullmatch(text):
        return None
    value = int(text)
    return value if value in _INT64 else None


class _Parser:
    """A recursive-descent parser over ``(position, token)`` pairs; "" ends the input."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = self._lex(text)
        self.index = 0

    @staticmethod
    def _lex(text: str) -> list[tuple[int, str]]:
        tokens, i = [], 0
        while i < len(text):
            char = text[i]
            if char in _BLANK:
                i += 1
            elif char in _SPECIAL:
                width = 2 if text[i : i + 2] in _TWO_CHAR_OPERATORS else 1
                tokens.append((i, text[i : i + width]))
                i += width
            else:
                start = i
                while i < len(text) and text[i] not in _SPECIAL and text[i] not in _BLANK:
                    i += 1
                tokens.append((start, text[start:i]))
        tokens.append((len(text), ""))
        return tokens

    def peek(self) -> str:
        return self.tokens[self.index][1]

    def take(self) -> str:
        token = self.tokens[self.index][1]
        self.index = min(self.index + 1, len(self.tokens) - 1)
        return token

    def fail(self, expected: str, at: int | None = None) -> ValueError:
        position, found = self.tokens[self.index if at is None else at]
        shown = repr(found) if found else "the end"
        return ValueError(
            f"invalid label selector {self.text!r}: at {position}: found {shown}, "
            f"expected {expected}"
        )

    @staticmethod
    def is_word(token: str) -> bool:
        return bool(token) and token[0] not in _SPECIAL

    def parse(self) -> Selector:
        requirements: list[_Requirement] = []
        if self.peek() == "":
            return Selector(())
        while True:
            requirements.append(self.requirement())
            token = self.take()
            if token == "":
                return Selector(tuple(requirements))
            if token != ",":
                raise self.fail("',' or the end", self.index - 1)
            if not (self.is_word(self.peek()) or self.peek() == "!"):
                raise self.fail("a key after ','")

    def requirement(self) -> _Requirement:
        if self.peek() == "!":
            self.take()
            return _Requirement(self.key(), "!exists")
        key = self.key()
        if self.peek() in ("", ","):
            return _Requirement(key, "exists")
        op = self.take()
        if op in ("in", "notin"):
            return _Requirement(key, op, self.value_set())
        if op in ("=", "==", "!="):
            value = self.take() if self.is_word(self.peek()) else ""
            return _Requirement(
                key, "notin" if op == "!=" else "in", frozenset({self.value(value)})
            )
        if op in (">", "<"):
            token = self.take()
            bound = _integer(self.value(token)) if self.is_word(token) else None
            if bound is None:
                raise self.fail("an integer after " + repr(op), self.index - 1)
            return _Requirement(key, "gt" if op == ">" else "lt", bound=bound)
        raise self.fail("one of in, notin, =, ==, !=, >, <", self.index - 1)

    def key(self) -> str:
        token = self.take()
        if not self.is_word(token):
            raise self.fail("a key", self.index - 1)
        prefix, slash, name = token.rpartition("/")
        valid = len(name) <= 63 and _NAME.fullmatch(name) is not None
        if slash:
            valid = valid and len(prefix) <= 253 and _DNS_SUBDOMAIN.fullmatch(prefix) is not None
        if not valid:
            raise self.fail(
                "a label key ([DNS subdomain/]name, the name at most 63 characters: "
                "alphanumerics, '-', '_', '.', alphanumeric at both ends)",
                self.index - 1,
            )
        return token

    def value(self, token: str) -> str:
        if token and (len(token) > 63 or _NAME.fullmatch(token) is None):
            raise self.fail(
                "a label value (at most 63 characters: alphanumerics, '-', '_', '.', "
                "alphanumeric at both ends; or empty)",
                self.index - 1,
            )
        return token

    def value_set(self) -> frozenset[str]:
        if self.take() != "(":
            raise self.fail("'('", self.index - 1)
        values: set[str] = set()
        expect_value = True  # at the start, or after a comma
        while True:
            token = self.take()
            if token == ")":
                if expect_value:
                    values.add("")  # "()", "(a,)": the empty value
                return frozenset(values)
            if token == ",":
                if expect_value:
                    values.add("")  # "(,a)", "(a,,b)"
                expect_value = True
            elif self.is_word(token) and expect_value:
                values.add(self.value(token))
                expect_value = False
            else:
                raise self.fail("',' or ')'" if not expect_value else "a value, ',' or ')'",
                                self.index - 1)  # fmt: skip


@functools.lru_cache(maxsize=512)
def parse(text: str) -> Selector:
    """Parse a label selector; raises ``ValueError`` saying where and what was expected."""
    return _Parser(text).parse()
