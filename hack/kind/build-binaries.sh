#!/usr/bin/env bash
# Build, from the Go module proxy, every binary a kind node image needs that the local
# control plane's build (hack/controlplane/build.sh) does not already make: kind itself,
# containerd, runc, crictl, the CNI reference plugins, kubelet, kubeadm, kube-proxy and
# CoreDNS. Cached under ~/.cache/rayservice-operator/kind/bin/<name>-<version>; a binary
# is built only when missing. Prints the bin dir as its last line (--print-bin-dir: only
# that; --print-kind: the kind binary, when built).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "${HERE}/versions.env"
source "${HERE}/../controlplane/versions.env"
CACHE="${XDG_CACHE_HOME:-${HOME}/.cache}/rayservice-operator/kind"
BIN="${CACHE}/bin"
case "${1:-}" in
  --print-bin-dir) echo "${BIN}"; exit 0 ;;
  # The cached kind binary, if it is built (exit 1 otherwise).
  --print-kind) [[ -x "${BIN}/kind-${KIND_VERSION}" ]] && echo "${BIN}/kind-${KIND_VERSION}"; exit ;;
  "") ;;
  *) echo "usage: $0 [--print-bin-dir|--print-kind]" >&2; exit 2 ;;
esac
mkdir -p "${BIN}"
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}" GOFLAGS="${GOFLAGS:-} -buildvcs=false"
log() { echo "[kind-build] $*" >&2; }

# built NAME VERSION: true when the cached binary of that version is there.
built() { [[ -x "${BIN}/$1-$2" ]]; }
# install_cmd NAME VERSION CGO TAGS PKG@VERSION: go install one command into the cache.
install_cmd() {
  local name="$1" version="$2" cgo="$3" tags="$4" pkg="$5" tmp start=${SECONDS}
  built "${name}" "${version}" && return 0
  tmp="$(mktemp -d)"
  log "building ${name} ${version} ..."
  (cd / && CGO_ENABLED="${cgo}" GOBIN="${tmp}" go install -trimpath -tags "${tags}" \
      -ldflags "-s -w" "${pkg}") || { rm -rf "${tmp}"; log "FAILED: ${name}"; exit 1; }
  mv "${tmp}/$(basename "${pkg%@*}")" "${BIN}/${name}-${version}"
  rm -rf "${tmp}"
  log "built ${name} ${version} in $(( SECONDS - start )) s"
}

install_cmd kind "${KIND_VERSION}" 0 "" "sigs.k8s.io/kind@${KIND_VERSION}"
for c in containerd ctr containerd-shim-runc-v2; do
  install_cmd "${c}" "${CONTAINERD_VERSION}" 0 "no_aufs no_zfs no_btrfs no_devmapper" \
    "github.com/containerd/containerd/v2/cmd/${c}@${CONTAINERD_VERSION}"
done
# runc needs cgo (its nsenter) and libseccomp (Debian's libseccomp-dev) for seccomp profiles
# (hack/kind/host-packages.sh installs them).
if ! built runc "${RUNC_VERSION}" && ! pkg-config --exists libseccomp 2>/dev/null; then
  log "runc needs libseccomp's headers: apt-get install libseccomp-dev pkg-config (hack/kind/host-packages.sh)"
  exit 1
fi
install_cmd runc "${RUNC_VERSION}" 1 "seccomp" "github.com/opencontainers/runc@${RUNC_VERSION}"
install_cmd crictl "${CRICTL_VERSION}" 0 "" "sigs.k8s.io/cri-tools/cmd/crictl@${CRICTL_VERSION}"
for p in ipam/host-local main/loopback main/bridge main/ptp meta/portmap; do
  install_cmd "cni-${p##*/}" "${CNI_PLUGINS_VERSION}" 0 "" \
    "github.com/containernetworking/plugins/plugins/${p}@${CNI_PLUGINS_VERSION}"
done
install_cmd coredns "${COREDNS_VERSION}" 0 "" "github.com/coredns/coredns@${COREDNS_VERSION}"

# kubelet, kubeadm and kube-proxy: from the control plane's wrapper module (its replace
# lines pin Kubernetes' staging modules), copied with these commands added to tools.go.
if ! { built kubelet "${K8S_VERSION}" && built kubeadm "${K8S_VERSION}" && built kube-proxy "${K8S_VERSION}"; }; then
  mod="${CACHE}/src/kubernetes-${K8S_VERSION}"
  rm -rf "${mod}" && mkdir -p "${mod}"
  modules="${HERE}/../../runtime/testing/controlplane-modules/kubernetes"  # the control plane's pins
  cp "${modules}/go.mod" "${modules}/go.sum" "${mod}/"
  printf '%s\n' '//go:build tools' '' 'package tools' '' 'import (' \
    '	_ "k8s.io/kubernetes/cmd/kubelet"' '	_ "k8s.io/kubernetes/cmd/kubeadm"' \
    '	_ "k8s.io/kubernetes/cmd/kube-proxy"' ')' > "${mod}/tools.go"
  log "building kubelet, kubeadm, kube-proxy ${K8S_VERSION} ..."
  start=${SECONDS}
  minor="${K8S_VERSION#v1.}"; minor="${minor%%.*}"
  flags="-s -w"
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    flags+=" -X ${p}.gitVersion=${K8S_VERSION} -X ${p}.gitMajor=1 -X ${p}.gitMinor=${minor} -X ${p}.gitTreeState=clean"
  done
  (cd "${mod}" && go mod tidy >&2 && CGO_ENABLED=0 go build -trimpath -ldflags "${flags}" -o "${mod}/out/" \
      k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kubeadm k8s.io/kubernetes/cmd/kube-proxy)
  for c in kubelet kubeadm kube-proxy; do mv "${mod}/out/${c}" "${BIN}/${c}-${K8S_VERSION}"; done
  log "built kubelet, kubeadm, kube-proxy in $(( SECONDS - start )) s"
fi
echo "${BIN}"
