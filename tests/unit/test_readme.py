"""The README's Python examples run."""

from __future__ import annotations

import pathlib
import re

README = pathlib.Path(__file__).parents[2] / "README.md"


def test_python_blocks_in_readme_execute() -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)
    assert blocks, "README has no python example"
    for block in blocks:
        namespace: dict[str, object] = {}
        exec(compile(block, str(README), "exec"), namespace)
        assert "ctrl" in namespace
