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
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.env
source "${HERE}/versions.env"

: "${K8S_VERSION:?K8S_VERSION missing from versions.env}"
: "${ETCD_VERSION:?ETCD_VERSION missing from versions.env}"
: "${KWOK_VERSION:?KWOK_VERSION missing from versions.env}"

BIN_DIR="${XDG_CACHE_HOME:-${HOME}/.cache}/rayservice-operator/controlplane/${K8S_VERSION}/bin"

# Build order: kube-apiserver first (it pulls in most of the shared packages),
# then the small independent ones, then the rest of Kubernetes in one go.
ALL_COMPONENTS=(kube-apiserver etcd etcdctl kwok kube-controller-manager kube-scheduler kubectl)

log() { echo "[controlplane] $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

usage() {
  sed -n '2,16p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
  echo "Components: ${ALL_COMPONENTS[*]}" >&2
}

requested=()
for arg in "$@"; do
  case "${arg}" in
    --print-bin-dir) echo "${BIN_DIR}"; exit 0 ;;
    -h|--help) usage; exit 0 ;;
    -*) usage; die "unknown flag: ${arg}" ;;
    *)
      found=0
      for c in "${ALL_COMPONENTS[@]}"; do [[ "${c}" == "${arg}" ]] && found=1; done
      (( found )) || die "unknown component: ${arg} (known: ${ALL_COMPONENTS[*]})"
      requested+=("${arg}")
      ;;
  esac
done
(( ${#requested[@]} )) || requested=("${ALL_COMPONENTS[@]}")

wanted() {
  local c
  for c in "${requested[@]}"; do [[ "${c}" == "$1" ]] && return 0; done
  return 1
}

command -v go >/dev/null 2>&1 || die "'go' not found in PATH. Install Go (>= 1.26) from https://go.dev/dl/ and retry."

export CGO_ENABLED=0
# Never let a go.mod 'toolchain' line trigger a toolchain download.
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"
# We build dependencies' main packages; VCS stamping of /work/main is irrelevant.
export GOFLAGS="${GOFLAGS:-} -buildvcs=false"

mkdir -p "${BIN_DIR}"

# Serialise concurrent runs (e.g. parallel test workers) on the same bin dir.
if command -v flock >/dev/null 2>&1; then
  exec 9>"${BIN_DIR}/.build.lock"
  if ! flock -n 9; then
    log "another build.sh is running for ${BIN_DIR}; waiting ..."
    flock 9
  fi
fi

TMP_DIR="$(mktemp -d "${BIN_DIR}/.tmp.XXXXXX")"
trap 'rm -rf "${TMP_DIR}"' EXIT

# --- stamps --------------------------------------------------------------------
# The stamp holds the version plus a hash of the wrapper module's go.mod, so a
# version bump or a dependency change in go.mod triggers a rebuild.
file_hash() { sha256sum "$1" | cut -c1-16; }
K8S_STAMP="k8s.io/kubernetes ${K8S_VERSION} gomod=$(file_hash "${HERE}/kubernetes/go.mod")"
ETCD_STAMP="go.etcd.io/etcd ${ETCD_VERSION} gomod=$(file_hash "${HERE}/etcd/go.mod")"
KWOK_STAMP="sigs.k8s.io/kwok ${KWOK_VERSION}"

stamp_for() {
  case "$1" in
    etcd|etcdctl) echo "${ETCD_STAMP}" ;;
    kwok) echo "${KWOK_STAMP}" ;;
    *) echo "${K8S_STAMP}" ;;
  esac
}

version_for() {
  case "$1" in
    etcd|etcdctl) echo "${ETCD_VERSION}" ;;
    kwok) echo "${KWOK_VERSION}" ;;
    *) echo "${K8S_VERSION}" ;;
  esac
}

up_to_date() {
  local name="$1" stamp_file="${BIN_DIR}/.$1.stamp"
  [[ -x "${BIN_DIR}/${name}" && -f "${stamp_file}" ]] || return 1
  [[ "$(cat "${stamp_file}")" == "$(stamp_for "${name}")" ]]
}

# Move a freshly built binary from TMP_DIR into place (rename within one
# filesystem is atomic), then record its stamp the same way.
install_binary() {
  local name="$1"
  [[ -x "${TMP_DIR}/${name}" ]] || die "build of ${name} produced no binary"
  mv -f "${TMP_DIR}/${name}" "${BIN_DIR}/${name}"
  stamp_for "${name}" > "${TMP_DIR}/.${name}.stamp"
  mv -f "${TMP_DIR}/.${name}.stamp" "${BIN_DIR}/.${name}.stamp"
}

# run_build LABEL VERSION CMD... : run a build command with progress/timing
# lines; on failure print the Go output and exit non-zero.
run_build() {
  local label="$1" version="$2"; shift 2
  local out="${TMP_DIR}/build-output.log" start end
  log "building ${label} ${version} ..."
  start=${SECONDS}
  if ! "$@" >"${out}" 2>&1; then
    log "FAILED building ${label} ${version} after $(( SECONDS - start ))s"
    cat "${out}" >&2
    exit 1
  fi
  end=${SECONDS}
  log "built ${label} ${version} in $(( end - start ))s"
}

# --- kubernetes --------------------------------------------------------------
K8S_MINOR_PATCH="${K8S_VERSION#v}"          # 1.35.4
K8S_MAJOR="${K8S_MINOR_PATCH%%.*}"          # 1
K8S_MINOR="${K8S_MINOR_PATCH#*.}"; K8S_MINOR="${K8S_MINOR%%.*}"  # 35

# Use the module's publication time (from the module proxy's .info) as the
# build date: deterministic, and meaningful.  Falls back to "now".
k8s_build_date() {
  local info date=""
  info="$(cd "${HERE}/kubernetes" && go mod download -json "k8s.io/kubernetes@${K8S_VERSION}" 2>/dev/null \
          | sed -n 's/^[[:space:]]*"Info": "\(.*\)",*$/\1/p')" || true
  if [[ -n "${info}" && -f "${info}" ]]; then
    date="$(sed -n 's/.*"Time":"\([^"]*\)".*/\1/p' "${info}")"
  fi
  [[ -n "${date}" ]] || date="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "${date}"
}

k8s_ldflags() {
  local date pkg flags="-s -w"
  date="$(k8s_build_date)"
  # The module zip carries no git metadata, so gitCommit stays empty.
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    flags+=" -X ${pkg}.gitVersion=${K8S_VERSION}"
    flags+=" -X ${pkg}.gitMajor=${K8S_MAJOR}"
    flags+=" -X ${pkg}.gitMinor=${K8S_MINOR}"
    flags+=" -X ${pkg}.gitCommit="
    flags+=" -X ${pkg}.gitTreeState=clean"
    flags+=" -X ${pkg}.buildDate=${date}"
  done
  echo "${flags}"
}

# build_k8s NAME... : build the given Kubernetes commands in one `go build`
# invocation (they share the compile work and link in parallel).
build_k8s() {
  local names=("$@") pkgs=() n
  for n in "${names[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/${n}"); done
  local ldflags; ldflags="$(k8s_ldflags)"
  run_build "$(IFS=,; echo "${names[*]}")" "${K8S_VERSION}" \
    bash -c 'cd "$1" && shift && exec go build -trimpath -ldflags "$1" -o "$2/" "${@:3}"' _ \
      "${HERE}/kubernetes" "${ldflags}" "${TMP_DIR}" "${pkgs[@]}"
  for n in "${names[@]}"; do install_binary "${n}"; done
}

# --- etcd --------------------------------------------------------------------
build_etcd_cmd() {
  local name="$1" pkg="$2"
  run_build "${name}" "${ETCD_VERSION}" \
    bash -c 'cd "$1" && exec go build -trimpath -ldflags "-s -w" -o "$2" "$3"' _ \
      "${HERE}/etcd" "${TMP_DIR}/${name}" "${pkg}"
  install_binary "${name}"
}

# --- kwok --------------------------------------------------------------------
build_kwok() {
  run_build kwok "${KWOK_VERSION}" \
    bash -c 'cd / && GOBIN="$1" exec go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@$2"' _ \
      "${TMP_DIR}" "${KWOK_VERSION}"
  install_binary kwok
}

# --- main --------------------------------------------------------------------
total_start=${SECONDS}
log "bin dir: ${BIN_DIR}"
log "$(go version)"

needs_build() {
  local name="$1"
  wanted "${name}" || return 1
  if up_to_date "${name}"; then
    log "up to date: ${name} $(version_for "${name}")"
    return 1
  fi
  return 0
}

if needs_build kube-apiserver; then build_k8s kube-apiserver; fi
if needs_build etcd; then build_etcd_cmd etcd go.etcd.io/etcd/server/v3; fi
if needs_build etcdctl; then build_etcd_cmd etcdctl go.etcd.io/etcd/etcdctl/v3; fi
if needs_build kwok; then build_kwok; fi

rest=()
for n in kube-controller-manager kube-scheduler kubectl; do
  if needs_build "${n}"; then rest+=("${n}"); fi
done
if (( ${#rest[@]} )); then build_k8s "${rest[@]}"; fi

log "done in $(( SECONDS - total_start ))s"
echo "${BIN_DIR}"
