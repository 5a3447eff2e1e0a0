#!/usr/bin/env bash
# Install (or reuse) Traefik, the Gateway API implementation of the gateway tests
# (tests/support/gateway.py, tests/integration/test_gateway.py): built from the Go
# module github.com/traefik/traefik/v3@<version> (`go mod download -json` gives its
# directory; the module cache is read-only, so it is copied to a temporary directory
# and `go build ./cmd/traefik` runs there; its go.mod replaces only point at other
# modules). The binary is cached per version under the user's cache directory (many
# minutes on 2 cores the first time; a no-op afterwards), with the -X flags of
# Traefik's own Makefile so `traefik version` is right. The module zip carries
# webui/static (one placeholder file), which is all its go:embed needs: no web UI is
# built, and the tests serve no dashboard. Traefik is a test tool, not a dependency.
#
# Usage:
#   install.sh                  build if missing; the last line on stdout is the traefik binary
#   install.sh --print-bin      print the path of the traefik binary and exit
#
# Environment: TRAEFIK_VERSION (default v3.6.12) picks another release. The binary
# counts as installed only once its stamp file .traefik-<version> exists, written
# last; an interrupted build leaves no stamp and is redone. One installer at a time
# per version (flock); a second one waits, then finds the stamp.
set -euo pipefail

TRAEFIK_VERSION="${TRAEFIK_VERSION:-v3.6.12}"
BIN_DIR="${XDG_CACHE_HOME:-${HOME}/.cache}/rayservice-operator/traefik/${TRAEFIK_VERSION}/bin"
TRAEFIK="${BIN_DIR}/traefik"
STAMP="${BIN_DIR}/.traefik-${TRAEFIK_VERSION}"
MODULE="github.com/traefik/traefik/v3"

# shellcheck source=../lib/installer.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/installer.sh"
installer traefik "${TRAEFIK}" --print-bin 2,20 "$@"

installed() { [[ -f "${STAMP}" && -x "${TRAEFIK}" ]]; }

done_if_installed

need_go

lock_or_wait "${BIN_DIR}/.install.lock"
done_if_installed

start=$(date +%s)
log "building traefik ${TRAEFIK_VERSION} into ${BIN_DIR} (go build from the module proxy)"
rm -f "${TRAEFIK}"
export CGO_ENABLED=0
# Never let a go.mod 'toolchain' line trigger a toolchain download.
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"
export GOFLAGS="${GOFLAGS:-} -buildvcs=false"
work="$(mktemp -d "${TMPDIR:-/tmp}/traefik-build.XXXXXX")"
trap 'chmod -R u+w "${work}" 2>/dev/null; rm -rf "${work}"' EXIT
dir="$(cd "${work}" && go mod download -json "${MODULE}@${TRAEFIK_VERSION}" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
[[ -d "${dir}" ]] || { log "ERROR: go mod download gave no directory for ${MODULE}@${TRAEFIK_VERSION}"; exit 1; }
cp -R "${dir}" "${work}/src"
chmod -R u+w "${work}/src"
# go:embed needs at least one file in webui/static; the module zip has had one so far.
if [[ -z "$(ls -A "${work}/src/webui/static" 2>/dev/null)" ]]; then
  log "webui/static is empty or absent in the module; adding a placeholder for go:embed"
  mkdir -p "${work}/src/webui/static"
  echo "placeholder: no web UI built" > "${work}/src/webui/static/README.txt"
fi
ldflags="-s -w -X ${MODULE}/pkg/version.Version=${TRAEFIK_VERSION#v}"
ldflags+=" -X ${MODULE}/pkg/version.Codename=cheddar -X ${MODULE}/pkg/version.BuildDate=$(date -u '+%Y-%m-%d')"
(cd "${work}/src" && go build -trimpath -ldflags "${ldflags}" -o "${TRAEFIK}" ./cmd/traefik)
"${TRAEFIK}" version >&2
touch "${STAMP}"
log "ready in $(( $(date +%s) - start )) s"
echo "${TRAEFIK}"
