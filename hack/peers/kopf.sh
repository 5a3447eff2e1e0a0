#!/usr/bin/env bash
# Install (or reuse) Kopf, the Python operator framework we measure ours against
# (hack/bench/frameworks.py), into a virtualenv of its own from PyPI, cached per
# version under the user's cache directory. Kopf is not a project dependency and
# never goes into the project's .venv.
#
# Usage:
#   kopf.sh                install if missing; the last line on stdout is the venv dir
#   kopf.sh --print-venv   print the venv dir (installed or not) and exit
#
# Environment: KOPF_VERSION (default 1.45.2) picks another release; KOPF_PYTHON is
# the interpreter to build the venv with (default python3). Kopf logs in from a
# kubeconfig through the `kubernetes` client library, so the venv gets
# kopf[full-auth] (its documented extra for that). The venv counts as installed
# only once its stamp file .kopf-<version> exists, written last; a half-made venv
# (an interrupted install) is removed and made again. One installer at a time per
# version (flock); a second one waits, then finds the stamp.
set -euo pipefail

KOPF_VERSION="${KOPF_VERSION:-1.45.2}"
VENV="${XDG_CACHE_HOME:-${HOME}/.cache}/rayservice-operator/peers/kopf/${KOPF_VERSION}/venv"
STAMP="${VENV}/.kopf-${KOPF_VERSION}"

# shellcheck source=../lib/installer.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/installer.sh"
installer kopf "${VENV}" --print-venv 2,18 "$@"

installed() { [[ -f "${STAMP}" && -x "${VENV}/bin/kopf" ]]; }

done_if_installed

lock_or_wait "${VENV}.lock"
done_if_installed

start=$(date +%s)
log "installing kopf[full-auth]==${KOPF_VERSION} into ${VENV}"
rm -rf "${VENV}"
"${KOPF_PYTHON:-python3}" -m venv "${VENV}"
"${VENV}/bin/python" -m pip install --quiet --disable-pip-version-check \
  "kopf[full-auth]==${KOPF_VERSION}"
"${VENV}/bin/kopf" --version >&2
touch "${STAMP}"
log "ready in $(( $(date +%s) - start )) s"
echo "${VENV}"
