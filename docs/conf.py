"""Sphinx configuration of the docs site (``make docs``; warnings are errors), for the
operator's users and the framework's.

The reference pages are the modules' docstrings (each is its module's contract),
rendered by autodoc; the guides are Markdown (MyST). Every code block of a guide is
run, or checked against the file it quotes, by ``tests/unit/repository/test_docs.py``.
The operator's reference tables (``docs/operator/``) are generated from the code by
``docs/_ext/operator_reference.py``.
"""

from __future__ import annotations

import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # document the checkout, not an installed copy
sys.path.insert(0, str(ROOT / "docs" / "_ext"))  # this site's own extensions

project = "rayservice-operator and runtime"
author = "the rayservice-operator authors"
copyright = "the rayservice-operator authors"

extensions = ["sphinx.ext.autodoc", "myst_parser", "operator_reference"]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build"]

myst_heading_anchors = 3
autodoc_member_order = "bysource"
autodoc_default_options = {"members": True, "show-inheritance": True}
autodoc_typehints = "signature"
autoclass_content = "both"

html_theme = "alabaster"
html_title = "rayservice-operator and runtime"
html_static_path: list[str] = []
