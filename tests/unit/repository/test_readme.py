"""The README's Python examples run."""

from __future__ import annotations

import re

from tests.unit import helpers

README = helpers.ROOT / "README.md"


def test_python_blocks_in_readme_execute() -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)
    assert blocks, "README has no python example"
    for block in blocks:
        namespace: dict[str, object] = {}
        exec(compile(block, str(README), "exec"), namespace)
        assert "ctrl" in namespace


def test_walkthrough_excerpts_are_still_in_their_files() -> None:
    excerpts = re.findall(r"```python (\S+)\n(.*?)```", README.read_text(), flags=re.DOTALL)
    assert excerpts, "the walkthrough has excerpts"
    for path, excerpt in excerpts:
        source = (README.parent / path).read_text()
        assert excerpt in source, f"README excerpt no longer in {path}:\n{excerpt}"
