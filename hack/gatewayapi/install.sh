#!/usr/bin/env bash
# Install (or reuse) the Gateway API CRDs for the gateway tests (tests/support/gateway.py,
# tests/integration/test_gateway.py) and `make run`: the standard channel of
# sigs.k8s.io/gateway-api@<version>, taken from the Go module (`go mod download -json`
# gives its directory; the CRDs are the YAML files under config/crd/standard/) and
# copied into a directory cached per version under the user's cache directory (a
# second or so the first time; a no-op afterwards).
#
# Standard channel only, on purpose: Traefik v3.6's Gateway API provider (the
# implementation the tests run) watches GatewayClass, Gateway, HTTPRoute, GRPCRoute
# (v1), ReferenceGrant (v1beta1) and BackendTLSPolicy (v1), all of which v1.4's
# standard channel serves. It watches TCPRoute and TLSRoute (v1alpha2, experimental
# channel) only with --providers.kubernetesgateway.experimentalchannel=true, which the
# tests do not set; so no experimental CRD is needed.
#
# Usage:
#   install.sh                  copy if missing; the last line on stdout is the CRD directory
#   install.sh --print-dir      print the CRD directory and exit
#
# Environment: GATEWAY_API_VERSION (default v1.4.1) picks another release. The CRDs
# count as installed only once the stamp file .gateway-api-<version> exists, written
# last; an interrupted copy leaves no stamp and is redone. One installer at a time per
# version (flock); a second one waits, then finds the stamp.
set -euo pipefail

GATEWAY_API_VERSION="${GATEWAY_API_VERSION:-v1.4.1}"
CRD_DIR="${XDG_CACHE_HOME:-${HOME}/.cache}/rayservice-operator/gateway-api/${GATEWAY_API_VERSION}"
STAMP="${CRD_DIR}/.gateway-api-${GATEWAY_API_VERSION}"
MODULE="sigs.k8s.io/gateway-api"

# shellcheck source=../lib/installer.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/installer.sh"
installer gateway-api "${CRD_DIR}" --print-dir 2,23 "$@"

installed() { [[ -f "${STAMP}" ]] && compgen -G "${CRD_DIR}/*.yaml" >/dev/null; }

done_if_installed

need_go

lock_or_wait "${CRD_DIR}/.install.lock"
done_if_installed

start=$(date +%s)
log "fetching ${MODULE}@${GATEWAY_API_VERSION} (standard channel CRDs) into ${CRD_DIR}"
# Never let a go.mod 'toolchain' line trigger a toolchain download.
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"
export GOFLAGS="${GOFLAGS:-} -buildvcs=false"
dir="$(cd "${CRD_DIR}" && go mod download -json "${MODULE}@${GATEWAY_API_VERSION}" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
source_dir="${dir}/config/crd/standard"
compgen -G "${source_dir}/*.yaml" >/dev/null || { log "ERROR: no CRDs in ${source_dir}"; exit 1; }
rm -f "${CRD_DIR}"/*.yaml
for crd in "${source_dir}"/*.yaml; do
  install -m 0644 "${crd}" "${CRD_DIR}/"
done
touch "${STAMP}"
log "$(ls "${CRD_DIR}"/*.yaml | wc -l) CRDs ready in $(( $(date +%s) - start )) s"
echo "${CRD_DIR}"
