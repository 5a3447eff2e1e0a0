#!/usr/bin/env bash
# `make kind-e2e`: a kind cluster, the operator installed in it from helm-chart/ with the
# image of this checkout's Dockerfile, then the end-to-end suite (tests/e2e) against it,
# with real Ray pods run by the kubelet.
#
# Two ways to get the images (KIND_OFFLINE):
#   0        a machine that reaches Docker Hub and registry.k8s.io: kind's own node image,
#            python:3.11-slim, rayproject/ray pulled as usual.
#   1        a machine that reaches no registry: every image built here from Go modules,
#            Debian's archive and PyPI (hack/kind/build-images.sh; the first build takes
#            long, then it is cached), a Docker engine of our own if none runs
#            (hack/kind/docker.sh), one node (see hack/kind/kind-config.yaml).
#   auto     (default) 1 when `kind` is not on PATH or the offline node image is there.
#
# Environment (set by the Makefile): KIND_CLUSTER, KIND_IMAGE (the operator image's tag),
# KIND_DIR (kubeconfig and logs), KUBECTL, PY (the venv's python), KIND_POD_CIDR, HELM
# (default: hack/helm/install.sh's, built from its Go module).
# A cluster this run created on an engine this run started is deleted at the end (the
# engine is stopped with it); otherwise the cluster stays for the next run (`make kind-down`).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "${HERE}/../.." && pwd)"
source "${HERE}/versions.env"
source "${HERE}/../controlplane/versions.env"
RAY_VERSION="$(tr -d '[:space:]' <"${HERE}/../realray/ray-version")"
: "${KIND_CLUSTER:=rayservice-e2e}" "${KIND_IMAGE:=rayservice-operator:e2e}" "${KIND_DIR:=build/kind}"
: "${KUBECTL:=kubectl}" "${PY:=.venv/bin/python}" "${KIND_OFFLINE:=auto}" "${KIND_ROLLOUT_TIMEOUT:=180s}"
NODE_IMAGE="rso-kind/node:${K8S_VERSION}-kind${KIND_VERSION}"
NAMESPACE=rayservice-operator-system
log() { echo "kind-e2e: $*" >&2; }
cd "${ROOT}"
mkdir -p "${KIND_DIR}"
KIND_DIR="$(cd "${KIND_DIR}" && pwd)"

for tool in docker "${KUBECTL}"; do
  command -v "${tool}" >/dev/null || { log "'${tool}' is not on PATH; this target needs Docker and kubectl"; exit 1; }
done
docker_env="$("${HERE}/docker.sh" start)"
eval "${docker_env}"
cleanup() {
  local rc=$?
  if [[ -n "${ROUTE_ADDED:-}" ]]; then ip route del "${KIND_POD_CIDR}" 2>/dev/null || true; fi
  if [[ -n "${RSO_DOCKERD_PID:-}" ]]; then
    [[ -n "${CLUSTER_CREATED:-}" ]] && "${KIND}" delete cluster --name "${KIND_CLUSTER}" >/dev/null 2>&1 || true
    "${HERE}/docker.sh" stop
  fi
  exit "${rc}"
}
trap cleanup EXIT

if [[ "${KIND_OFFLINE}" == auto ]]; then
  KIND_OFFLINE=0
  if ! command -v kind >/dev/null || docker image inspect "${NODE_IMAGE}" >/dev/null 2>&1; then KIND_OFFLINE=1; fi
fi
helm="${HELM:-$("${ROOT}/hack/helm/install.sh" | tail -n1)}"
config="${KIND_DIR}/kind-config.yaml"
build_args=()
if [[ "${KIND_OFFLINE}" == 1 ]]; then
  log "offline: images built here (hack/kind/build-images.sh), node image ${NODE_IMAGE}"
  "${HERE}/host-packages.sh"
  KIND="$("${HERE}/build-binaries.sh" --print-kind)" || KIND="$("${HERE}/build-binaries.sh" | tail -n1)/kind-${KIND_VERSION}"
  "${HERE}/build-images.sh" node ray
  build_args=(--network none --build-arg PYTHON_IMAGE="rso-kind/python:${DEBIAN_SUITE}"
    --build-arg BUILDER_IMAGE="$("${HERE}/build-images.sh" operator-wheels | tail -n1)")
  # No kindnetd (its source is on no module proxy): the node's own CNI configuration
  # (bridge + host-local over the pod subnet, baked into the node image) on one node.
  "${PY}" - "${HERE}/kind-config.yaml" "${config}" "${ETCD_VERSION#v}-0" <<'PYEOF'
import sys, yaml
src, dst, etcd = sys.argv[1:]
config = yaml.safe_load(open(src))
config["nodes"] = [n for n in config["nodes"] if n["role"] == "control-plane"]
config["networking"]["disableDefaultCNI"] = True
config.setdefault("kubeadmConfigPatches", []).append(
    "kind: ClusterConfiguration\netcd:\n  local:\n    imageTag: " + etcd + "\n")
yaml.safe_dump(config, open(dst, "w"), sort_keys=False)
PYEOF
  image_args=(--image "${NODE_IMAGE}")
else
  KIND=kind
  cp "${HERE}/kind-config.yaml" "${config}"
  image_args=()
fi

# A cluster whose engine was stopped under it (its node not running, or restarted by an
# engine this run had to start) does not come back: it is made anew.
if "${KIND}" get clusters 2>/dev/null | grep -qx "${KIND_CLUSTER}" && { [[ -n "${RSO_DOCKERD_PID:-}" ]] \
    || [[ "$(docker inspect -f '{{.State.Running}}' "${KIND_CLUSTER}-control-plane" 2>/dev/null)" != true ]]; }; then
  log "cluster ${KIND_CLUSTER} is left from an engine that stopped: deleting it"
  "${KIND}" delete cluster --name "${KIND_CLUSTER}"
fi
if ! "${KIND}" get clusters 2>/dev/null | grep -qx "${KIND_CLUSTER}"; then
  start=${SECONDS}
  "${KIND}" create cluster --name "${KIND_CLUSTER}" --config "${config}" "${image_args[@]}" --wait 180s
  CLUSTER_CREATED=1
  log "cluster up in $(( SECONDS - start )) s"
fi
"${KIND}" get kubeconfig --name "${KIND_CLUSTER}" > "${KIND_DIR}/kubeconfig"
export KUBECONFIG="${KIND_DIR}/kubeconfig"
kctl() { "${KUBECTL}" --kubeconfig "${KUBECONFIG}" "$@"; }

# The suite's traffic client dials pod IPs from this machine: offline, route the pod
# subnet to the (single) node, inside the kind network. Nothing is NATed.
if [[ "${KIND_OFFLINE}" == 1 ]]; then
  node_ip="$(docker inspect -f '{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}' "${KIND_CLUSTER}-control-plane")"
  if ! ip route show "${KIND_POD_CIDR}" | grep -q "via ${node_ip} "; then
    ip route replace "${KIND_POD_CIDR}" via "${node_ip}" && ROUTE_ADDED=1
  fi
fi

docker build -t "${KIND_IMAGE}" "${build_args[@]}" .
"${KIND}" load docker-image "${KIND_IMAGE}" --name "${KIND_CLUSTER}"
if [[ "${KIND_OFFLINE}" == 1 ]]; then
  "${KIND}" load docker-image "rayproject/ray:${RAY_VERSION}" --name "${KIND_CLUSTER}"
fi
# A Deployment kept from an earlier run runs the image of that run under the same tag: it
# is restarted. A fresh install starts one pod of this image, and none races it for the Lease.
existing="$(kctl -n "${NAMESPACE}" get deployment -o name 2>/dev/null | head -n1 || true)"
"${helm}" upgrade --install rayservice-operator helm-chart/rayservice-operator \
  --kubeconfig "${KUBECONFIG}" --namespace "${NAMESPACE}" --create-namespace \
  --set image.repository="${KIND_IMAGE%:*}" --set image.tag="${KIND_IMAGE##*:}" --wait=false
deployment="$(kctl -n "${NAMESPACE}" get deployment -o name | head -n1)"
if [[ -n "${existing}" ]]; then kctl -n "${NAMESPACE}" rollout restart "${deployment}"; fi
kctl -n "${NAMESPACE}" rollout status "${deployment}" --timeout "${KIND_ROLLOUT_TIMEOUT}" || {
  kctl -n "${NAMESPACE}" describe pods
  kctl -n "${NAMESPACE}" logs "${deployment}" --all-containers --tail 50
  exit 1
}
# A failed scenario's story is in the operator's log too: shown (with its pods) when one fails.
E2E_DASHBOARD_MODE=service E2E_POD_CIDR="${KIND_POD_CIDR}" "${PY}" -m pytest tests/e2e "$@" || {
  rc=$?
  kctl -n "${NAMESPACE}" get pods -o wide
  kctl -n "${NAMESPACE}" logs "${deployment}" --all-containers --tail 400
  exit "${rc}"
}
