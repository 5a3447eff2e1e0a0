#!/usr/bin/env bash
# Build every image `make kind-e2e` needs on a machine that reaches no container registry,
# once, into the Docker engine that $DOCKER_HOST names (hack/kind/docker.sh starts one).
# Each image's tag carries its versions, so a present image is never rebuilt:
#
#   rso-kind/node:<k8s>-<kind>       the kind node: kind's base files on a debootstrap'd
#                                    Debian, containerd/runc/crictl/CNI plugins, kubeadm,
#                                    kubelet, kubectl, and preloaded in its containerd the
#                                    images kubeadm runs (kube-apiserver, -controller-manager,
#                                    -scheduler, kube-proxy, etcd, CoreDNS, pause)
#   rso-kind/python:<suite>          Debian + Python 3.11 (the operator image's base)
#   rayproject/ray:<ray>             Debian + Python + ray[serve] from PyPI, bash and wget
#                                    (what KubeRay's probes and init containers call)
#
# Binaries come from hack/controlplane/build.sh and hack/kind/build-binaries.sh (Go module
# proxy), root filesystems from debootstrap (Debian's archive), Ray from PyPI.
# Usage: build-images.sh [node|python|ray|operator-wheels]...   (default: the first three;
# operator-wheels prints the image to pass as the operator Dockerfile's BUILDER_IMAGE)
#        build-images.sh --cached   (exit 0 when everything is built: see below)
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "${HERE}/versions.env"
source "${HERE}/../controlplane/versions.env"
RAY_VERSION="$(tr -d '[:space:]' <"${HERE}/../realray/ray-version")"
CACHE="${XDG_CACHE_HOME:-${HOME}/.cache}/rayservice-operator/kind"
NODE_IMAGE="rso-kind/node:${K8S_VERSION}-kind${KIND_VERSION}"
PYTHON_IMAGE="rso-kind/python:${DEBIAN_SUITE}"
RAY_IMAGE="rayproject/ray:${RAY_VERSION}"
ETCD_TAG="${ETCD_VERSION#v}-0"
PAUSE_TAG=3.10.1  # kubeadm's PauseVersion at this Kubernetes version (build/pause there)
log() { echo "[kind-images] $*" >&2; }
have() { docker image inspect "$1" >/dev/null 2>&1; }

# rootfs NAME PACKAGES: a Debian root filesystem imported as rso-kind/rootfs-NAME:<suite>.
rootfs() {
  local name="$1" packages="$2" image="rso-kind/rootfs-$1:${DEBIAN_SUITE}" dir start=${SECONDS}
  have "${image}" && return 0
  command -v debootstrap >/dev/null || { log "debootstrap is missing (apt-get install debootstrap)"; exit 1; }
  dir="${CACHE}/rootfs/${name}-${DEBIAN_SUITE}"; mkdir -p "${CACHE}/rootfs"
  if [[ ! -f "${dir}/.done" ]]; then
    log "debootstrap ${name} (${DEBIAN_SUITE}) ..."
    rm -rf "${dir}"
    debootstrap --variant=minbase --include="${packages}" "${DEBIAN_SUITE}" "${dir}" \
      http://deb.debian.org/debian >"${CACHE}/rootfs/${name}.log" 2>&1 \
      || { tail -20 "${CACHE}/rootfs/${name}.log" >&2; exit 1; }
    rm -rf "${dir}"/var/cache/apt/archives/*.deb "${dir}"/var/lib/apt/lists/*
    touch "${dir}/.done"
  fi
  tar -C "${dir}" --exclude ./.done --numeric-owner -c . | docker import - "${image}" >/dev/null
  log "${image} in $(( SECONDS - start )) s"
}

# scratch_image TAG FILE... : an image of static binaries in /usr/local/bin.
scratch_image() {
  local tag="$1" ctx; shift
  ctx="$(mktemp -d)"
  cp "$@" "${ctx}/"
  { echo "FROM scratch"; echo "ENV PATH=/usr/local/bin"
    for f in "$@"; do echo "COPY $(basename "$f") /usr/local/bin/"; done; } > "${ctx}/Dockerfile"
  docker build -q -t "${tag}" "${ctx}" >/dev/null
  rm -rf "${ctx}"
}

node() {
  have "${NODE_IMAGE}" && { log "${NODE_IMAGE} is there"; return 0; }
  local cp bin kbin start=${SECONDS} ctx kind_src base cid images
  cp="$("${HERE}/../controlplane/build.sh" kube-apiserver kube-controller-manager kube-scheduler kubectl etcd | tail -n1)"
  bin="$("${HERE}/build-binaries.sh" | tail -n1)"
  rootfs node "systemd,systemd-sysv,dbus,conntrack,iptables,nftables,iproute2,ethtool,util-linux,mount,kmod,libseccomp2,pigz,bash,ca-certificates,curl,jq,procps,e2fsprogs"
  kind_src="$(cd "${HERE}" && GOFLAGS=-mod=mod go mod download -json "sigs.k8s.io/kind@${KIND_VERSION}" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",*$/\1/p')"
  base="rso-kind/base:kind${KIND_VERSION}-containerd${CONTAINERD_VERSION}"
  if ! have "${base}"; then
    ctx="$(mktemp -d)"; mkdir -p "${ctx}/bin" "${ctx}/cni"
    cp -R "${kind_src}/images/base/files" "${ctx}/files"; chmod -R u+w "${ctx}/files"
    rm -rf "${ctx}/files/LICENSES"
    # kubeadm's pause image at this Kubernetes version, not the one kind's release pins.
    sed -i "s|registry.k8s.io/pause:[0-9.]*|registry.k8s.io/pause:${PAUSE_TAG}|" "${ctx}/files/etc/containerd/config.toml"
    # Lowering a process's oom_score_adj takes CAP_SYS_RESOURCE, which the node lacks
    # where the engine's bounding set does (hack/kind/runc-bounded): containerd then keeps
    # every container's score at or above its own, as kind's rootless nodes do.
    sed -i "s|restrict_oom_score_adj = false|restrict_oom_score_adj = true|" "${ctx}/files/etc/containerd/config.toml"
    grep -q "restrict_oom_score_adj = true" "${ctx}/files/etc/containerd/config.toml"
    cp "${bin}/containerd-${CONTAINERD_VERSION}" "${ctx}/bin/containerd"
    cp "${bin}/ctr-${CONTAINERD_VERSION}" "${ctx}/bin/ctr"
    cp "${bin}/containerd-shim-runc-v2-${CONTAINERD_VERSION}" "${ctx}/bin/containerd-shim-runc-v2"
    cp "${bin}/crictl-${CRICTL_VERSION}" "${ctx}/bin/crictl"
    cp "${bin}/runc-${RUNC_VERSION}" "${ctx}/bin/runc"
    for p in host-local loopback bridge ptp portmap; do cp "${bin}/cni-${p}-${CNI_PLUGINS_VERSION}" "${ctx}/cni/${p}"; done
    cp "${HERE}/base.Dockerfile" "${ctx}/Dockerfile"
    docker build -q --build-arg ROOTFS_IMAGE="rso-kind/rootfs-node:${DEBIAN_SUITE}" -t "${base}" "${ctx}" >/dev/null
    rm -rf "${ctx}"
    log "${base} built"
  fi

  # The images kubeadm runs, saved into one archive whose `repositories` member comes first.
  kbin="$(mktemp -d)"
  for c in kube-apiserver kube-controller-manager kube-scheduler; do
    cp "${cp}/${c}" "${kbin}/${c}"; scratch_image "registry.k8s.io/${c}:${K8S_VERSION}" "${kbin}/${c}"
  done
  cp "${cp}/etcd" "${kbin}/etcd"; scratch_image "registry.k8s.io/etcd:${ETCD_TAG}" "${kbin}/etcd"
  cp "${bin}/coredns-${COREDNS_VERSION}" "${kbin}/coredns"
  printf '%s\n' "FROM scratch" "COPY coredns /coredns" 'ENTRYPOINT ["/coredns"]' > "${kbin}/Dockerfile"
  docker build -q -t "registry.k8s.io/coredns/coredns:${COREDNS_VERSION}" -f "${kbin}/Dockerfile" "${kbin}" >/dev/null
  # kube-proxy calls iptables/nft and conntrack: it runs on the node's own Debian.
  cp "${bin}/kube-proxy-${K8S_VERSION}" "${kbin}/kube-proxy"
  printf '%s\n' "FROM rso-kind/rootfs-node:${DEBIAN_SUITE}" "COPY kube-proxy /usr/local/bin/kube-proxy" > "${kbin}/Dockerfile"
  docker build -q -t "registry.k8s.io/kube-proxy:${K8S_VERSION}" -f "${kbin}/Dockerfile" "${kbin}" >/dev/null
  local pause_src
  pause_src="$(cd "${HERE}/../../runtime/testing/controlplane-modules/kubernetes" && go mod download -json "k8s.io/kubernetes@${K8S_VERSION}" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",*$/\1/p')/build/pause/linux/pause.c"
  gcc -Os -Wall -Werror -static -DVERSION="v${PAUSE_TAG}-${K8S_VERSION}" -o "${kbin}/pause" "${pause_src}"
  printf '%s\n' "FROM scratch" "COPY pause /pause" "USER 65535:65535" 'ENTRYPOINT ["/pause"]' > "${kbin}/Dockerfile"
  docker build -q -t "registry.k8s.io/pause:${PAUSE_TAG}" -f "${kbin}/Dockerfile" "${kbin}" >/dev/null
  images=(registry.k8s.io/kube-apiserver:${K8S_VERSION} registry.k8s.io/kube-controller-manager:${K8S_VERSION}
    registry.k8s.io/kube-scheduler:${K8S_VERSION} registry.k8s.io/kube-proxy:${K8S_VERSION}
    registry.k8s.io/etcd:${ETCD_TAG} registry.k8s.io/coredns/coredns:${COREDNS_VERSION} registry.k8s.io/pause:${PAUSE_TAG})
  docker save "${images[@]}" > "${kbin}/images.tar"

  # The node, assembled as `kind build node-image` does (its own command cannot be used
  # here: it fetches kindnetd, whose source no module proxy serves; see docs/operator/kind.md).
  cid="$(docker run -d --entrypoint=sleep --security-opt seccomp=unconfined "${base}" infinity)"
  trap 'docker rm -f -v "${cid}" >/dev/null 2>&1 || true' RETURN
  for c in kubeadm kubelet; do docker cp "${bin}/${c}-${K8S_VERSION}" "${cid}:/usr/bin/${c}"; done
  docker cp "${cp}/kubectl" "${cid}:/usr/bin/kubectl"
  docker exec "${cid}" sh -c "chmod 755 /usr/bin/kubeadm /usr/bin/kubelet /usr/bin/kubectl && echo ${K8S_VERSION} > /kind/version"
  docker cp "${HERE}/10-bridge.conflist" "${cid}:/etc/cni/net.d/10-bridge.conflist" 2>/dev/null || {
    docker exec "${cid}" mkdir -p /etc/cni/net.d; docker cp "${HERE}/10-bridge.conflist" "${cid}:/etc/cni/net.d/10-bridge.conflist"; }
  docker exec "${cid}" bash -c "nohup containerd > /dev/null 2>&1 &"
  docker exec "${cid}" bash -c 'for i in 0 1 2 3 4 5; do [ -S /run/containerd/containerd.sock ] && break; sleep 1; done; ctr info >/dev/null'
  docker exec -i "${cid}" ctr --namespace=k8s.io images import --label=io.cri-containerd.pinned=pinned \
    --all-platforms --no-unpack --digests - < "${kbin}/images.tar" >/dev/null
  docker exec "${cid}" pkill containerd
  sleep 1
  docker commit --change 'ENTRYPOINT [ "/usr/local/bin/entrypoint", "/sbin/init" ]' "${cid}" "${NODE_IMAGE}" >/dev/null
  rm -rf "${kbin}"
  log "${NODE_IMAGE} in $(( SECONDS - start )) s"
}

python_image() {
  have "${PYTHON_IMAGE}" && return 0
  rootfs python "python3,python3-venv,python3-pip,bash,wget,ca-certificates,procps,netbase,libgomp1"
  local ctx; ctx="$(mktemp -d)"
  printf '%s\n' "FROM rso-kind/rootfs-python:${DEBIAN_SUITE}" \
    "RUN ln -sf /usr/bin/python3 /usr/local/bin/python && ln -sf /usr/bin/pip3 /usr/local/bin/pip" \
    "ENV PIP_BREAK_SYSTEM_PACKAGES=1 LANG=C.UTF-8" > "${ctx}/Dockerfile"
  docker build -q -t "${PYTHON_IMAGE}" "${ctx}" >/dev/null
  rm -rf "${ctx}"
  log "${PYTHON_IMAGE} built"
}

ray_image() {
  have "${RAY_IMAGE}" && return 0
  python_image
  local ctx start=${SECONDS} wheels="${CACHE}/wheels/ray-${RAY_VERSION}"; ctx="$(mktemp -d)"
  # The wheels come from PyPI through this machine's pip (its proxy and certificates);
  # the image is built with no network at all.
  if [[ ! -f "${wheels}/.done" ]]; then
    # (this machine and the image are both Debian bookworm with CPython 3.11 on x86_64)
    python3 -m pip download --quiet --only-binary=:all: --dest "${wheels}" "ray[serve]==${RAY_VERSION}"
    touch "${wheels}/.done"
  fi
  cp -R "${wheels}" "${ctx}/wheels"
  # As rayproject/ray: user `ray` (uid 1000) with its home as the working directory.
  printf '%s\n' "FROM ${PYTHON_IMAGE}" "COPY wheels /tmp/wheels" \
    "RUN python3 -m venv /home/ray/anaconda3 \\" \
    "    && /home/ray/anaconda3/bin/pip install --no-index --find-links /tmp/wheels 'ray[serve]==${RAY_VERSION}' \\" \
    "    && rm -rf /tmp/wheels && useradd -u 1000 -m -d /home/ray -s /bin/bash ray && chown -R ray /home/ray" \
    "ENV PATH=/home/ray/anaconda3/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/home/ray" \
    "USER 1000" "WORKDIR /home/ray" > "${ctx}/Dockerfile"
  docker build -q --network none -t "${RAY_IMAGE}" "${ctx}" >/dev/null
  rm -rf "${ctx}"
  log "${RAY_IMAGE} in $(( SECONDS - start )) s"
}

# The operator Dockerfile's BUILDER_IMAGE with no registry: the Python image plus the
# wheels of requirements.lock (build/wheelhouse, from `make venv`) and of setuptools (the
# build backend of pyproject.toml), with pip pointed at them only. Tagged by their hash.
operator_wheels() {
  python_image
  local root="${HERE}/../.." ctx tag
  [[ -d "${root}/build/wheelhouse" ]] || { log "build/wheelhouse is missing: run make venv"; exit 1; }
  tag="rso-kind/python-wheels:$(cat "${root}/requirements.lock" "${root}/pyproject.toml" | sha256sum | cut -c1-12)"
  if ! have "${tag}"; then
    ctx="$(mktemp -d)"
    cp -R "${root}/build/wheelhouse" "${ctx}/wheelhouse"
    python3 -m pip download --quiet --only-binary=:all: --dest "${ctx}/wheelhouse" "setuptools>=77"
    printf '%s\n' "FROM ${PYTHON_IMAGE}" "COPY wheelhouse /wheelhouse" \
      "ENV PIP_NO_INDEX=1 PIP_FIND_LINKS=/wheelhouse" > "${ctx}/Dockerfile"
    docker build -q -t "${tag}" "${ctx}" >/dev/null
    rm -rf "${ctx}"
    log "${tag} built"
  fi
  echo "${tag}"
}

# --cached: exit 0 when the node, Python and Ray images are in the engine and kind is
# built, so that `make kind-e2e` offline builds nothing (.ci/run asks before it runs it).
if [[ "${1:-}" == --cached ]]; then
  for image in "${NODE_IMAGE}" "${PYTHON_IMAGE}" "${RAY_IMAGE}"; do
    have "${image}" || { log "not built: ${image}"; exit 1; }
  done
  "${HERE}/build-binaries.sh" --print-kind >/dev/null || { log "not built: kind ${KIND_VERSION}"; exit 1; }
  exit 0
fi

(( $# )) || set -- node python ray
for what in "$@"; do
  case "${what}" in
    node) node ;; python) python_image ;; ray) ray_image ;; operator-wheels) operator_wheels ;;
    *) log "unknown image: ${what} (node, python, ray, operator-wheels)"; exit 2 ;;
  esac
done
