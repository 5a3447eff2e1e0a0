"""Every test asserts something that could fail.

An AST scan over ``tests/``:

- a ``test_*`` function must contain an ``assert`` (or ``raise AssertionError``), a
  ``pytest.raises`` / ``pytest.warns`` / ``pytest.fail``, or a call to a helper that
  asserts: :data:`ASSERTING_HELPERS`
  (``helpers.eventually`` fails the test when its condition never holds), or a function or
  method of the same module that itself asserts (found transitively);
- no assertion is a tautology: ``assert <truthy constant>``, ``assert x or <truthy
  constant>``, ``assert x == x``, ``isinstance(x, object)``, or ``assert name`` where every
  value ``name`` is given in that function is always true (a non-empty literal, a lambda,
  an f-string with text, a registry lookup).

Anything that legitimately asserts another way goes in :data:`ALLOWED`, with the reason.
"""

from __future__ import annotations

import ast
import functools
import textwrap

import pytest

from tests.unit import helpers

TESTS = helpers.ROOT / "tests"

ASSERTING_HELPERS = frozenset({"eventually", "eventually_sync"})
"""Helpers (by the name they are called with) that fail the test when their check fails."""

PYTEST_CHECKS = frozenset({"raises", "warns", "fail", "deprecated_call"})

ALLOWED: dict[str, str] = {
    "unit/runtime/testing/test_controlplane_options.py::test_loopback_is_allowed": (
        "passes by not raising: _check_loopback raises PermissionError for any other host"
    ),
}
"""``"path/relative/to/tests.py::test_name"``: why this test needs no assertion of its own."""

FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef


def _called_name(call: ast.Call) -> str | None:
    func = call.func
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def _checks_directly(node: ast.AST) -> bool:
    for sub in ast.walk(node):
        if isinstance(sub, ast.Assert):
            return True
        if isinstance(sub, ast.Raise) and sub.exc is not None:
            raised = sub.exc.func if isinstance(sub.exc, ast.Call) else sub.exc
            if isinstance(raised, ast.Name) and raised.id == "AssertionError":
                return True
        if isinstance(sub, ast.Call):
            func = sub.func
            if (
                isinstance(func, ast.Attribute)
                and isinstance(func.value, ast.Name)
                and func.value.id == "pytest"
                and func.attr in PYTEST_CHECKS
            ):
                return True
            if _called_name(sub) in ASSERTING_HELPERS:
                return True
    return False


def _calls(node: ast.AST) -> set[str]:
    return {name for sub in ast.walk(node) if isinstance(sub, ast.Call)
            if (name := _called_name(sub)) is not None}  # fmt: skip


def _functions(tree: ast.Module) -> list[FunctionNode]:
    """Module-level functions and methods of module-level classes."""
    found: list[FunctionNode] = []
    for node in tree.body:
        if isinstance(node, FunctionNode):
            found.append(node)
        elif isinstance(node, ast.ClassDef):
            found += [n for n in node.body if isinstance(n, FunctionNode)]
    return found


def missing_assertions(tree: ast.Module) -> list[str]:
    """Names of test functions in ``tree`` that assert nothing."""
    functions = _functions(tree)
    asserting = {f.name for f in functions if _checks_directly(f)}
    changed = True
    while changed:  # a helper of this module that calls an asserting helper asserts too
        changed = False
        for f in functions:
            if f.name not in asserting and _calls(f) & asserting:
                asserting.add(f.name)
                changed = True
    return [f.name for f in functions if f.name.startswith("test_") and f.name not in asserting]


def _always_true(value: ast.expr) -> bool:
    if isinstance(value, ast.Constant):
        return bool(value.value) and value.value is not Ellipsis
    if isinstance(value, ast.List | ast.Tuple | ast.Set):
        return bool(value.elts) and not any(isinstance(e, ast.Starred) for e in value.elts)
    if isinstance(value, ast.Dict):
        return bool(value.keys) and None not in value.keys
    if isinstance(value, ast.Lambda):
        return True
    if isinstance(value, ast.JoinedStr):
        return any(isinstance(v, ast.Constant) and v.value for v in value.values)
    if isinstance(value, ast.Call):
        name = _called_name(value)
        if name in {"for_kind", "for_object", "Resource"}:
            return True  # a registry lookup returns a Resource or raises
        if name in {"isinstance"} and len(value.args) == 2:
            second = value.args[1]
            return isinstance(second, ast.Name) and second.id == "object"
    return False


def _assignments(function: FunctionNode) -> dict[str, list[ast.expr | None]]:
    """Every value each local name is given (None: a value we cannot see, e.g. a loop)."""
    values: dict[str, list[ast.expr | None]] = {}
    for node in ast.walk(function):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    values.setdefault(target.id, []).append(node.value)
                else:
                    for sub in ast.walk(target):
                        if isinstance(sub, ast.Name):
                            values.setdefault(sub.id, []).append(None)
        elif isinstance(node, ast.AnnAssign | ast.AugAssign) and isinstance(node.target, ast.Name):
            values.setdefault(node.target.id, []).append(
                node.value if isinstance(node, ast.AnnAssign) else None
            )
        elif isinstance(node, ast.For | ast.AsyncFor | ast.comprehension | ast.withitem):
            target = node.optional_vars if isinstance(node, ast.withitem) else node.target
            for sub in ast.walk(target) if target is not None else ():
                if isinstance(sub, ast.Name):
                    values.setdefault(sub.id, []).append(None)
        elif isinstance(node, ast.NamedExpr):
            values.setdefault(node.target.id, []).append(node.value)
        elif isinstance(node, ast.arguments):
            for arg in [*node.posonlyargs, *node.args, *node.kwonlyargs]:
                values.setdefault(arg.arg, []).append(None)
            for star in (node.vararg, node.kwarg):
                if star is not None:
                    values.setdefault(star.arg, []).append(None)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            values.setdefault(node.name, []).append(None)
    return values


def tautologies(tree: ast.Module) -> list[str]:
    """``function:line: source`` for each assertion in ``tree`` that cannot fail."""
    found: list[str] = []
    for function in [n for n in ast.walk(tree) if isinstance(n, FunctionNode)]:
        values: dict[str, list[ast.expr | None]] | None = None
        for node in ast.walk(function):
            if not isinstance(node, ast.Assert):
                continue
            test = node.test
            bad = _always_true(test)
            if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.Or):
                bad = bad or any(_always_true(v) for v in test.values)
            if isinstance(test, ast.Compare) and len(test.ops) == 1:
                # (f() == f() compares two calls: a determinism check, not a tautology)
                same = ast.dump(test.left) == ast.dump(test.comparators[0]) and not any(
                    isinstance(n, ast.Call | ast.Await) for n in ast.walk(test.left)
                )
                bad = bad or (same and isinstance(test.ops[0], ast.Eq | ast.Is | ast.GtE | ast.LtE))
            if isinstance(test, ast.Name):
                values = _assignments(function) if values is None else values
                given = values.get(test.id, [None])
                bad = bad or all(v is not None and _always_true(v) for v in given)
            if bad:
                found.append(f"{function.name}:{node.lineno}: {ast.unparse(node)}")
    return found


@functools.cache
def _parsed() -> list[tuple[str, ast.Module]]:
    """(path relative to tests/, tree) for every test source, parsed once."""
    paths = sorted(p for p in TESTS.rglob("*.py") if "testdata" not in p.parts)
    return [(p.relative_to(TESTS).as_posix(), ast.parse(p.read_text(), str(p))) for p in paths]


def test_every_test_asserts_something() -> None:
    offenders = []
    for relative, tree in _parsed():
        for name in missing_assertions(tree):
            if f"{relative}::{name}" not in ALLOWED:
                offenders.append(f"{relative}::{name}")
    assert offenders == [], "tests that assert nothing (assert, or list them in ALLOWED)"


def test_no_assertion_is_a_tautology() -> None:
    offenders = []
    for relative, tree in _parsed():
        offenders += [f"{relative}:{t}" for t in tautologies(tree)]
    assert offenders == [], "assertions that cannot fail"


def test_every_allowance_names_a_test_that_exists() -> None:
    existing = {f"{relative}::{f.name}" for relative, tree in _parsed() for f in _functions(tree)}
    assert set(ALLOWED) <= existing, sorted(set(ALLOWED) - existing)


# -- the checker itself can fail ----------------------------------------------------------


def _parse(source: str) -> ast.Module:
    return ast.parse(textwrap.dedent(source))


@pytest.mark.parametrize(
    "source",
    [
        "def test_x():\n    assert True",
        "def test_x():\n    assert 'always'",
        "def test_x(y):\n    assert y or True",
        "def test_x(y):\n    assert y == y",
        "def test_x(y):\n    assert isinstance(y, object)",
        "def test_x():\n    other = resources.default_registry.for_kind('v1', 'Secret')\n"
        "    assert other",
        "def test_x():\n    f = lambda: False\n    assert f",
        "def test_x():\n    things = [1]\n    assert things",
    ],
)
def test_the_scan_finds_tautologies(source: str) -> None:
    assert len(tautologies(_parse(source))) == 1, source


@pytest.mark.parametrize(
    "source",
    [
        "def test_x(y):\n    assert y",
        "def test_x():\n    found = lookup()\n    assert found",
        "def test_x():\n    things = []\n    things.append(1)\n    assert things",
        "def test_x(y):\n    assert y == 1 or y == 2",
        "def test_x(gen):\n    assert gen.generate() == gen.generate()",
        "def test_x():\n    assert False, 'unreachable'",
        # an object built by a class may define __len__ or __bool__: not known to be true
        "def test_x():\n    made = Thing()\n    assert made",
    ],
)
def test_the_scan_lets_real_assertions_be(source: str) -> None:
    assert tautologies(_parse(source)) == [], source


def test_the_scan_finds_tests_that_assert_nothing() -> None:
    tree = _parse(
        """
        import pytest

        def check(x):
            assert x

        async def until(condition):
            if not condition():
                raise AssertionError("never")

        def indirect(x):
            check(x)

        def test_asserts():
            assert 1 + 1 == 2

        async def test_raises():
            with pytest.raises(ValueError):
                int("x")

        async def test_waits():
            await helpers.eventually(lambda: True, 1, "it")

        def test_through_a_helper():
            indirect(1)

        async def test_until():
            await until(lambda: True)

        def test_nothing():
            print("ran")

        class TestGroup:
            def test_nothing_either(self):
                pass
        """
    )
    assert missing_assertions(tree) == ["test_nothing", "test_nothing_either"]
