#!/usr/bin/env bash
# Build KubeRay's operator (github.com/ray-project/kuberay/ray-operator) at a
# pinned version from its Go module, into a per-user cache directory, so our
# operator can be compared with the real thing on the same control plane.
#
# Usage:
#   kuberay.sh              build the binary if missing or stale; print its path
#   kuberay.sh --print-bin  print where the binary is (or would be); build nothing
#   kuberay.sh --crds       print the module's CRD directory (config/crd/bases);
#                           downloads the module if needed, builds nothing
#
# Progress goes to stderr; the last line on stdout is the answer, so
#   KUBERAY="$(hack/peers/kuberay.sh | tail -n1)"
# works.  Environment: KUBERAY_VERSION (default v1.5.0) picks another tag.
# KUBERAY_SOURCE=<git directory of github.com/ray-project/kuberay> builds that tag
# from the checkout instead (for tags the module proxy does not serve, e.g. v1.7.0
# here): the tag's ray-operator/ is exported into the cache and built with its own
# go.mod (dependencies from the module proxy); --crds then prints its CRDs (also
# later without KUBERAY_SOURCE, from the exported copy).
set -euo pipefail

KUBERAY_VERSION="${KUBERAY_VERSION:-v1.5.0}"
MODULE="github.com/ray-project/kuberay/ray-operator"
# The Go language version of the wrapper module (ray-operator v1.5.0 declares 1.24.0).
WRAPPER_GO="1.24.0"

CACHE_DIR="${XDG_CACHE_HOME:-${HOME}/.cache}/rayservice-operator/peers/kuberay/${KUBERAY_VERSION}"
BIN="${CACHE_DIR}/bin/kuberay-operator"
STAMP_FILE="${CACHE_DIR}/bin/.kuberay-operator.stamp"

log() { echo "[kuberay] $*" >&2; }
die() { log "ERROR: $*"; exit 1; }
usage() { sed -n '2,19p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; }

mode=build
for arg in "$@"; do
  case "${arg}" in
    --print-bin) mode=print-bin ;;
    --crds) mode=crds ;;
    -h|--help) usage; exit 0 ;;
    *) usage; die "unknown argument: ${arg}" ;;
  esac
done

if [[ "${mode}" == print-bin ]]; then echo "${BIN}"; exit 0; fi

command -v go >/dev/null 2>&1 || die "'go' not found in PATH. Install Go (>= 1.24) from https://go.dev/dl/ and retry."

export CGO_ENABLED=0
# Never let a go.mod 'toolchain' line trigger a toolchain download.
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"
# We build a dependency's main package; VCS stamping of /work/main is irrelevant.
export GOFLAGS="${GOFLAGS:-} -buildvcs=false"

# The wrapper module: our own main module that requires the operator's module,
# so the build uses exactly the versions the operator's go.mod pins (minimal
# version selection picks them; nothing here raises any of them).
wrapper_gomod() {
  printf 'module rayservice-operator/peers/kuberay\n\ngo %s\n\nrequire %s %s\n' \
    "${WRAPPER_GO}" "${MODULE}" "${KUBERAY_VERSION}"
}
STAMP="${MODULE} ${KUBERAY_VERSION} gomod=$(wrapper_gomod | sha256sum | cut -c1-16)"
KUBERAY_SOURCE="${KUBERAY_SOURCE:-}"
if [[ -n "${KUBERAY_SOURCE}" ]]; then
  commit="$(git -C "${KUBERAY_SOURCE}" rev-parse --verify -q "${KUBERAY_VERSION}^{commit}")" \
    || die "no tag ${KUBERAY_VERSION} in ${KUBERAY_SOURCE}"
  STAMP="${MODULE} ${KUBERAY_VERSION} source=${commit}"
fi
SRC_DIR="${CACHE_DIR}/src"

# The tag's ray-operator/ exported into ${SRC_DIR} (once per commit).
export_source() {
  if [[ ! -f "${SRC_DIR}/.commit" || "$(cat "${SRC_DIR}/.commit")" != "${commit}" ]]; then
    rm -rf "${SRC_DIR}" && mkdir -p "${SRC_DIR}"
    mkdir -p "${SRC_DIR}/ray-operator"
    git -C "${KUBERAY_SOURCE}" archive "${commit}:ray-operator" | tar -x -C "${SRC_DIR}/ray-operator"
    echo "${commit}" > "${SRC_DIR}/.commit"
  fi
}

# `go mod download -json` of the operator's module (downloaded on first use).
module_json() {
  (cd / && go mod download -json "${MODULE}@${KUBERAY_VERSION}") \
    || die "could not download ${MODULE}@${KUBERAY_VERSION}"
}
json_field() { sed -n "s/^[[:space:]]*\"$1\": \"\(.*\)\",*\$/\1/p"; }

# The module's directory in the module cache.
module_dir() {
  local dir
  dir="$(module_json | json_field Dir)"
  [[ -n "${dir}" && -d "${dir}" ]] || die "no module directory for ${MODULE}@${KUBERAY_VERSION}"
  echo "${dir}"
}

if [[ "${mode}" == crds && -n "${KUBERAY_SOURCE}" ]]; then
  mkdir -p "${CACHE_DIR}" && export_source
  echo "${SRC_DIR}/ray-operator/config/crd/bases"
  exit 0
fi
if [[ "${mode}" == crds && -d "${SRC_DIR}/ray-operator/config/crd/bases" ]]; then
  echo "${SRC_DIR}/ray-operator/config/crd/bases"  # exported from a checkout before
  exit 0
fi
if [[ "${mode}" == crds ]]; then
  crds="$(module_dir)/config/crd/bases"
  [[ -d "${crds}" ]] || die "no CRD directory in ${MODULE}@${KUBERAY_VERSION}: ${crds}"
  echo "${crds}"
  exit 0
fi

up_to_date() {
  [[ -x "${BIN}" && -f "${STAMP_FILE}" && "$(cat "${STAMP_FILE}")" == "${STAMP}" ]]
}

if up_to_date; then
  log "up to date: ${BIN} (${KUBERAY_VERSION})"
  echo "${BIN}"
  exit 0
fi

mkdir -p "${CACHE_DIR}/bin"

# Serialise concurrent runs on the same cache directory.
if command -v flock >/dev/null 2>&1; then
  exec 9>"${CACHE_DIR}/.build.lock"
  if ! flock -n 9; then
    log "another kuberay.sh is building ${KUBERAY_VERSION}; waiting ..."
    flock 9
  fi
  # The other run may have built it while we waited.
  if up_to_date; then
    log "up to date: ${BIN} (${KUBERAY_VERSION})"
    echo "${BIN}"
    exit 0
  fi
fi

TMP_DIR="$(mktemp -d "${CACHE_DIR}/.tmp.XXXXXX")"
trap 'rm -rf "${TMP_DIR}"' EXIT

start=${SECONDS}
log "building ${MODULE} ${KUBERAY_VERSION} into ${BIN} ($(go version)) ..."
if [[ -n "${KUBERAY_SOURCE}" ]]; then
  export_source
  out="${TMP_DIR}/build-output.log"
  if ! (cd "${SRC_DIR}/ray-operator" && go build -trimpath -ldflags "-s -w" \
          -o "${TMP_DIR}/kuberay-operator" . >"${out}" 2>&1); then
    log "FAILED building ${KUBERAY_VERSION} from ${KUBERAY_SOURCE} after $(( SECONDS - start ))s"
    cat "${out}" >&2
    exit 1
  fi
  mv -f "${TMP_DIR}/kuberay-operator" "${BIN}"
  echo "${STAMP}" > "${TMP_DIR}/.stamp"
  mv -f "${TMP_DIR}/.stamp" "${STAMP_FILE}"
  log "built ${KUBERAY_VERSION} from source in $(( SECONDS - start ))s"
  echo "${BIN}"
  exit 0
fi
wrapper="${TMP_DIR}/wrapper"
mkdir -p "${wrapper}"
wrapper_gomod > "${wrapper}/go.mod"
# go.sum: the operator's own checksums (as the proxy served them, checked by the
# go command when it downloaded the module) plus its go.sum, which covers its whole
# dependency graph; so the build verifies every download without a checksum database.
info="$(module_json)"
dir="$(json_field Dir <<<"${info}")"
sum="$(json_field Sum <<<"${info}")"
gomodsum="$(json_field GoModSum <<<"${info}")"
[[ -n "${sum}" && -n "${gomodsum}" && -f "${dir}/go.sum" ]] \
  || die "incomplete download of ${MODULE}@${KUBERAY_VERSION} (no checksums or go.sum)"
{
  echo "${MODULE} ${KUBERAY_VERSION} ${sum}"
  echo "${MODULE} ${KUBERAY_VERSION}/go.mod ${gomodsum}"
  cat "${dir}/go.sum"
} | sort -u > "${wrapper}/go.sum"
out="${TMP_DIR}/build-output.log"
if ! (cd "${wrapper}" && go build -trimpath -ldflags "-s -w" \
        -o "${TMP_DIR}/kuberay-operator" "${MODULE}" >"${out}" 2>&1); then
  log "FAILED building ${MODULE} ${KUBERAY_VERSION} after $(( SECONDS - start ))s"
  cat "${out}" >&2
  exit 1
fi
[[ -x "${TMP_DIR}/kuberay-operator" ]] || die "the build produced no binary"

# Rename into place (atomic within one filesystem), then the stamp the same way;
# keep the wrapper module next to the binary for reference.
rm -rf "${CACHE_DIR}/wrapper"
mv "${wrapper}" "${CACHE_DIR}/wrapper"
mv -f "${TMP_DIR}/kuberay-operator" "${BIN}"
echo "${STAMP}" > "${TMP_DIR}/.stamp"
mv -f "${TMP_DIR}/.stamp" "${STAMP_FILE}"
log "built ${KUBERAY_VERSION} in $(( SECONDS - start ))s"
echo "${BIN}"
