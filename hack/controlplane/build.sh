#!/usr/bin/env bash
# Build the local control-plane binaries (kube-apiserver, etcd, etcdctl, kwok,
# kube-controller-manager, kube-scheduler, kubectl) from the Go modules pinned
# in versions.env, into a per-user cache directory.
#
# Usage:
#   build.sh                    build whatever is missing or out of date
#   build.sh COMPONENT...       only these components (names as listed below)
#   build.sh --print-bin-dir    print the bin dir and exit without building
#
# Progress goes to stderr; the last line on stdout is the bin dir, so
#   BIN_DIR="$(hack/controlplane/build.sh | tail -n1)"
# works.  A binary is rebuilt only when it is missing, not executable, or its
# stamp file (.<name>.stamp next to it) does not match the pinned version.
#
# The build itself is the framework's, runtime/testing/assets.py (what a pip
# user runs as `python -m runtime.testing.assets`; it imports only the standard
# library, so this runs before any venv exists, with ${PYTHON:-python3}).  This
# wrapper keeps the repository's cache directory and builds every component by
# default; the framework's own default is etcd, kube-apiserver and kubectl.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ASSETS="${HERE}/../../runtime/testing/assets.py"
# shellcheck source=SCRIPTDIR/versions.env
source "${HERE}/versions.env"   # a link to runtime/testing/controlplane-modules/versions.env

: "${K8S_VERSION:?K8S_VERSION missing from versions.env}"

BIN_DIR="${XDG_CACHE_HOME:-${HOME}/.cache}/rayservice-operator/controlplane/${K8S_VERSION}/bin"
PYTHON="${PYTHON:-python3}"

log() { echo "[controlplane] $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

usage() {
  sed -n '2,14p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
  echo "Components: kube-apiserver etcd etcdctl kwok kube-controller-manager kube-scheduler kubectl" >&2
}

all=(--all)
for arg in "$@"; do
  case "${arg}" in
    -h|--help) usage; exit 0 ;;
    --print-bin-dir) ;;
    -*) usage; log "ERROR: unknown flag: ${arg}"; exit 2 ;;
    *) all=() ;;   # components named: only those
  esac
done

command -v "${PYTHON}" >/dev/null 2>&1 || die "'${PYTHON}' not found in PATH (set PYTHON to a Python >= 3.11)"

# PYTHONSAFEPATH: the script's own directory (runtime/testing) is not put on sys.path,
# so no module there can shadow one of the standard library.
PYTHONSAFEPATH=1 exec "${PYTHON}" "${ASSETS}" --bin-dir "${BIN_DIR}" "${all[@]}" "$@"
