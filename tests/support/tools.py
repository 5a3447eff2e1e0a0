"""The tools tests need that are built or installed on first use (cached under the user's
cache directory by scripts in ``hack/``): run such a script, or fail the test with its
output. Nothing here ever skips: a missing tool is a failure that says why."""

from __future__ import annotations

import pathlib
import subprocess

import pytest

__all__ = ["ROOT", "built"]

ROOT = pathlib.Path(__file__).resolve().parents[2]


def built(script: str) -> pathlib.Path:
    """Run ``script`` (relative to the repository root; it builds or finds the tool and
    prints its path as its last stdout line) and return that path; if it fails, fail the
    calling test with the last 40 lines of its output."""
    done = subprocess.run([str(ROOT / script)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.fail(
            f"{script} failed (exit {done.returncode}):\n"
            + "\n".join((done.stderr + done.stdout).splitlines()[-40:]),
            pytrace=False,
        )
    return pathlib.Path(done.stdout.strip().splitlines()[-1])
