"""Every code block of the docs runs, or is still in the file it quotes.

The rules for a fenced block in ``docs/**/*.md``:

- ``python``: executed, in order with the other blocks of its page, in one namespace
  and one event loop (a block may ``await`` at top level); any exception fails;
- ``{code-block} python`` or ``{code-block} yaml`` with ``:caption: PATH``: an
  excerpt, which must be found verbatim in ``PATH`` (relative to the repository
  root) - that file is run by its own tests. (A directive, not a ``python`` fence,
  so that ruff's Markdown formatting leaves the quoted indentation alone; the
  caption shows the file on the page);
- the same directive with ``:name: quickstart/PATH`` (and ``:caption: PATH``, for the
  reader): the whole file ``PATH`` of the project ``docs/quickstart.md`` builds, only
  on that page. ``tests/integration/test_quickstart.py`` writes each such file into a
  fresh directory outside the checkout and runs the project there, from an install of
  the framework's wheel; it claims every one (its ``FILES``), checked here;
- ``text``: output or a diagram, nothing to run;
- ``sh``: commands for a reader's shell; each ``make`` target one names must exist
  (``tests/unit/repository/test_readme.py`` checks that, and the links);
- another ``{directive}``: MyST markup (a toctree), not code.

Anything else fails: a block nobody runs is a block that rots.
"""

from __future__ import annotations

import ast
import asyncio
import inspect
import pathlib
import re

import pytest

from runtime import controller
from tests.unit import helpers

DOCS = helpers.ROOT / "docs"
PAGES = sorted(DOCS.rglob("*.md"))
FENCE = re.compile(r"^```([^\n]*)\n(.*?)^```\s*$", re.MULTILINE | re.DOTALL)
QUICKSTART = DOCS / "quickstart.md"
QUICKSTART_FILE = "quickstart/"
"""The ``:name:`` prefix of a whole file of the quickstart's project."""
EXCERPTS = ("{code-block} python", "{code-block} yaml")


def blocks(page: pathlib.Path) -> list[tuple[str, str, int]]:
    """``(info string, body, line)`` of each fenced block of ``page``."""
    text = page.read_text()
    return [
        (m.group(1).strip(), m.group(2), text.count("\n", 0, m.start()) + 1)
        for m in FENCE.finditer(text)
    ]


def quickstart_files(page: pathlib.Path = QUICKSTART) -> dict[str, str]:
    """``PATH`` -> content of each block of ``page`` named ``quickstart/PATH``."""
    files = {}
    for info, body, _ in blocks(page):
        if info in EXCERPTS:
            options, content = _options(body)
            name = options.get("name", "")
            if name.startswith(QUICKSTART_FILE):
                files[name.removeprefix(QUICKSTART_FILE)] = content
    return files


def test_the_guides_are_there() -> None:
    names = {p.relative_to(DOCS).as_posix() for p in PAGES}
    for guide in ("reconcile", "status", "cache", "manager", "webhooks", "testing"):
        assert f"guides/{guide}.md" in names
    assert {"index.md", "tutorial.md", "architecture.md", "writing-a-reconciler.md"} <= names
    operator = ("install", "usage", "kuberay", "security", "performance", "kind",
                "troubleshooting", "flags", "configuration", "metrics", "helm-values")  # fmt: skip
    for page in operator:
        assert f"operator/{page}.md" in names, page


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(DOCS).as_posix())
def test_every_block_runs_or_is_quoted_verbatim(page: pathlib.Path) -> None:
    runnable: list[tuple[str, int]] = []
    for info, body, line in blocks(page):
        where = f"{page.relative_to(helpers.ROOT)}:{line}"
        if info in EXCERPTS:
            options, content = _options(body)
            path = options.get("caption", "")
            name = options.get("name", "")
            if name.startswith(QUICKSTART_FILE):  # a whole file: test_quickstart.py runs it
                assert page == QUICKSTART, f"{where}: a quickstart file outside {QUICKSTART.name}"
                assert path == name.removeprefix(QUICKSTART_FILE), f"{where}: caption {path!r}"
                continue
            assert path, f"{where}: an excerpt needs :caption: <the file it quotes>"
            source = (helpers.ROOT / path).read_text()
            assert content in source, f"{where}: excerpt no longer in {path}:\n{content}"
        elif info.startswith("{") or info in ("text", "sh"):
            continue
        elif info == "python":
            runnable.append((body, line))
        else:
            pytest.fail(f"{where}: a ```{info} block is neither run nor checked")
    if runnable:
        _run(page, runnable)


def test_every_quickstart_file_is_claimed_by_its_test() -> None:
    from tests.integration import test_quickstart  # imported here: it imports this module

    assert test_quickstart.PAGE == QUICKSTART
    assert set(quickstart_files()) == set(test_quickstart.FILES), (
        "the files of docs/quickstart.md are the ones tests/integration/test_quickstart.py runs"
    )


def _options(body: str) -> tuple[dict[str, str], str]:
    """The ``:key: value`` options of a ``{code-block}`` and its content after them."""
    lines = body.splitlines(keepends=True)
    options: dict[str, str] = {}
    count = 0
    while count < len(lines) and lines[count].startswith(":"):
        key, _, value = lines[count][1:].partition(":")
        options[key] = value.strip()
        count += 1
    return options, "".join(lines[count:])


def _run(page: pathlib.Path, runnable: list[tuple[str, int]]) -> None:
    """Run the page's python blocks in order, sharing globals and one event loop."""
    namespace: dict[str, object] = {"__name__": f"docs.{page.stem}"}
    flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    # A page may build the same controllers as the tests do: keep their names free.
    with controller.names_released(), asyncio.Runner() as loop:
        for body, line in runnable:
            # Pad so that a traceback's line numbers are the page's own.
            code = compile("\n" * line + body, str(page), "exec", flags=flags)
            result = eval(code, namespace)
            if inspect.iscoroutine(result):
                loop.run(result)
