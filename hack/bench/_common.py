"""What the benchmarks in ``hack/bench/`` share: where the control-plane binaries are."""

from __future__ import annotations

import pathlib
import subprocess

from runtime.testing import controlplane

__all__ = ["ROOT", "bin_dir"]

ROOT = pathlib.Path(__file__).resolve().parents[2]


def bin_dir(given: pathlib.Path | None = None) -> pathlib.Path:
    """``given``, else ``$CONTROLPLANE_BIN_DIR``, else what ``hack/controlplane/build.sh``
    builds (or finds cached) and prints."""
    if given is not None:
        return given
    if env := controlplane.default_bin_dir():
        return env
    done = subprocess.run(
        [str(ROOT / "hack/controlplane/build.sh")], capture_output=True, text=True, check=True
    )
    return pathlib.Path(done.stdout.strip().splitlines()[-1])
