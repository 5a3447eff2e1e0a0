"""The kit's pytest plugin as a user's project meets it: in a directory of its own, with
no configuration, its ``async def`` tests and fixtures run (the plugin chose
pytest-asyncio's ``auto`` mode and says so in the header); a project that chose
``strict`` keeps it."""

from __future__ import annotations

import textwrap

import pytest

USER_TESTS = """
import asyncio

import pytest


@pytest.fixture
async def answer():
    await asyncio.sleep(0)
    return 42


async def test_an_unmarked_async_test_with_an_async_fixture(answer):
    await asyncio.sleep(0)
    assert answer == 42
"""


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    pytester.makepyfile(test_user=textwrap.dedent(USER_TESTS))
    return pytester.runpytest_subprocess(
        "-p", "runtime.testing.pytest_plugin", "-p", "no:cacheprovider", *args, timeout=60
    )  # fmt: skip


def test_a_project_without_a_mode_gets_auto_and_is_told(pytester: pytest.Pytester) -> None:
    result = run(pytester)
    result.assert_outcomes(passed=1)
    header = (
        "runtime.testing: asyncio_mode=auto, asyncio_default_fixture_loop_scope=function "
        "(not configured by the project)"
    )
    assert header in result.stdout.str()
    assert "PytestDeprecationWarning" not in result.stdout.str()


STRICT = [
    ("[pytest]\nasyncio_mode = strict\n", ()),
    ("", ("-o", "asyncio_mode=strict")),
    ("", ("--asyncio-mode=strict",)),
]


@pytest.mark.parametrize(("ini", "args"), STRICT, ids=["ini", "override", "option"])
def test_a_project_that_chose_strict_keeps_it(
    pytester: pytest.Pytester, ini: str, args: tuple[str, ...]
) -> None:
    if ini:
        pytester.makefile(".ini", pytest=ini)
    result = run(pytester, *args)
    result.assert_outcomes(errors=1)  # strict: an async fixture nobody handles
    result.stdout.fnmatch_lines(["*requested an async fixture 'answer'*"])
    assert "asyncio_mode=auto" not in result.stdout.str()


def test_a_project_that_chose_a_fixture_loop_scope_keeps_it(pytester: pytest.Pytester) -> None:
    pytester.makefile(".ini", pytest="[pytest]\nasyncio_default_fixture_loop_scope = module\n")
    result = run(pytester)
    result.assert_outcomes(passed=1)  # still auto mode: only the scope was chosen
    out = result.stdout.str()
    assert "runtime.testing: asyncio_mode=auto (not configured by the project)" in out
    assert "asyncio_default_fixture_loop_scope=function" not in out
