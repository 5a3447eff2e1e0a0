#!/usr/bin/env bash
# Install (or reuse) Helm for the chart tests (tests/integration/test_helm.py):
# `go install helm.sh/helm/v3/cmd/helm@<version>` from the Go module proxy, into a
# bin dir cached per version under the user's cache directory (a few minutes on
# 2 cores the first time; a no-op afterwards), with the -X flags of helm's own
# release build so `helm version` and its default Kubernetes version are right.
# Helm is a test tool, not a dependency of the operator or its chart.
#
# Usage:
#   install.sh                  build if missing; the last line on stdout is the helm binary
#   install.sh --print-bin      print the path of the helm binary and exit
#
# Environment: HELM_VERSION (default v3.22.0) picks another release. The binary
# counts as installed only once its stamp file .helm-<version> exists, written
# last; an interrupted build leaves no stamp and is redone. One installer at a
# time per version (flock); a second one waits, then finds the stamp.
set -euo pipefail

HELM_VERSION="${HELM_VERSION:-v3.22.0}"
BIN_DIR="${XDG_CACHE_HOME:-${HOME}/.cache}/rayservice-operator/helm/${HELM_VERSION}/bin"
HELM="${BIN_DIR}/helm"
STAMP="${BIN_DIR}/.helm-${HELM_VERSION}"

# shellcheck source=../lib/installer.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/installer.sh"
installer helm "${HELM}" --print-bin 2,16 "$@"

installed() { [[ -f "${STAMP}" && -x "${HELM}" ]]; }

done_if_installed

need_go

lock_or_wait "${BIN_DIR}/.install.lock"
done_if_installed

start=$(date +%s)
log "building helm ${HELM_VERSION} into ${BIN_DIR} (go install from the module proxy)"
rm -f "${HELM}"
export CGO_ENABLED=0
# Never let a go.mod 'toolchain' line trigger a toolchain download.
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"
export GOFLAGS="${GOFLAGS:-} -buildvcs=false"
# The -X flags of helm's own Makefile: its version, and the Kubernetes version that
# `helm template` and `helm lint` assume without a cluster (client-go's minor + 1.x).
gomod="$(cd "${BIN_DIR}" && go mod download -json "helm.sh/helm/v3@${HELM_VERSION}" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')"
k8s_minor="$(sed -n 's|^[[:space:]]*k8s.io/client-go v0\.\([0-9]*\)\..*|\1|p' "${gomod}")"
[[ -n "${k8s_minor}" ]] || { log "ERROR: no k8s.io/client-go version in ${gomod}"; exit 1; }
ldflags="-w -s -X helm.sh/helm/v3/internal/version.version=${HELM_VERSION}"
for pkg in pkg/lint/rules pkg/chartutil; do
  ldflags+=" -X helm.sh/helm/v3/${pkg}.k8sVersionMajor=1 -X helm.sh/helm/v3/${pkg}.k8sVersionMinor=${k8s_minor}"
done
GOBIN="${BIN_DIR}" go install -ldflags "${ldflags}" "helm.sh/helm/v3/cmd/helm@${HELM_VERSION}"
"${HELM}" version --short >&2
touch "${STAMP}"
log "ready in $(( $(date +%s) - start )) s"
echo "${HELM}"
