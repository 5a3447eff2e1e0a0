"""Write generated files, or check that the checked-in ones are current (``--check``).

Shared by the generators in ``hack/`` (``gen_manifests.py``, ``gen_rbac_overlay.py``):
each builds ``{relative path: content}`` and hands it to :func:`sync`.
"""

from __future__ import annotations

import pathlib
from collections.abc import Mapping

__all__ = ["sync"]


def sync(files: Mapping[str, str], root: pathlib.Path, *, check: bool, hint: str) -> int:
    """Write every file of ``files`` under ``root`` whose content differs, printing each;
    with ``check``, write nothing, list what is out of date, print ``hint`` and return 1."""
    changed = []
    for relative, content in files.items():
        target = root / relative
        current = target.read_text() if target.exists() else None
        if current == content:
            continue
        changed.append(relative)
        if not check:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(content)
    if check:
        for relative in changed:
            print(f"out of date: {relative}")
        if changed:
            print(hint)
        return 1 if changed else 0
    for relative in changed:
        print(f"wrote {relative}")
    return 0
