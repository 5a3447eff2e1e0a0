#!/usr/bin/env bash
# Install (or reuse) Ray for the real-Ray tests: a virtualenv of its own with
# ray[serve]==<hack/realray/ray-version> from PyPI, cached per version under the
# user's cache directory (~100 s and ~500 MB the first time here; a no-op afterwards).
# Ray never goes into the project's .venv.
#
# Usage:
#   install.sh                  install if missing; the last line on stdout is the venv dir
#   install.sh --print-venv     print the venv dir and exit
#
# Environment: REALRAY_VENV overrides the directory (tests read the same variable);
# RAY_PYTHON is the interpreter to build the venv with (default python3).
# The venv counts as installed only once its stamp file .ray-<version> exists, written
# last; a half-made venv (interrupted install) is removed and made again.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
RAY_VERSION="$(tr -d '[:space:]' <"${HERE}/ray-version")"
VENV="${REALRAY_VENV:-${XDG_CACHE_HOME:-${HOME}/.cache}/rayservice-operator/ray/${RAY_VERSION}/venv}"
STAMP="${VENV}/.ray-${RAY_VERSION}"

log() { echo "[realray] $*" >&2; }

case "${1:-}" in
  --print-venv) echo "${VENV}"; exit 0 ;;
  -h|--help) sed -n '2,15p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit 0 ;;
  "") ;;
  *) log "unknown argument: $1"; exit 2 ;;
esac

mkdir -p "$(dirname "${VENV}")"
# One installer at a time (a second waits, then finds the stamp).
exec 9>"${VENV}.lock"
flock 9

if [[ -f "${STAMP}" && -x "${VENV}/bin/ray" ]]; then
  echo "${VENV}"
  exit 0
fi

start=$(date +%s)
log "installing ray[serve]==${RAY_VERSION} into ${VENV}"
rm -rf "${VENV}"
"${RAY_PYTHON:-python3}" -m venv "${VENV}"
"${VENV}/bin/python" -m pip install --quiet --disable-pip-version-check "ray[serve]==${RAY_VERSION}"
"${VENV}/bin/ray" --version >&2
touch "${STAMP}"
log "ready in $(( $(date +%s) - start )) s"
echo "${VENV}"
