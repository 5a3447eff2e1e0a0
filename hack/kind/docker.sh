#!/usr/bin/env bash
# A Docker engine for `make kind-e2e`, and the `kind` network it runs nodes on.
#
#   docker.sh start   if $DOCKER_HOST's (or the default) engine answers, use it; else, as
#                     root with Debian's dockerd installed, start one of our own: its data
#                     root under ~/.cache/rayservice-operator/kind/docker, its socket
#                     /run/rso-docker/docker.sock, no iptables rules, no NAT, no default
#                     bridge, and hack/kind/runc-bounded as its runtime (see that file).
#                     Then make sure the `kind` network exists (198.19.0.0/24, no NAT).
#                     Prints `export DOCKER_HOST=...` for the caller to eval, and, when
#                     it started the engine, `export RSO_DOCKERD_PID=<its pid>`.
#   docker.sh stop    stop the engine $RSO_DOCKERD_PID names, if set: only the one this
#                     caller's `start` started (never one another run started).
#   docker.sh can-run exit 0 when an engine answers or one could be started here.
# $DOCKERD names the engine's binary (default: dockerd on PATH).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CACHE="${XDG_CACHE_HOME:-${HOME}/.cache}/rayservice-operator/kind"
RUN_DIR=/run/rso-docker
OWN_HOST="unix://${RUN_DIR}/docker.sock"
KIND_NETWORK_SUBNET="${KIND_NETWORK_SUBNET:-198.19.0.0/24}"
log() { echo "[kind-docker] $*" >&2; }

answers() { DOCKER_HOST="$1" docker info >/dev/null 2>&1; }

current_host() {
  if [[ -n "${DOCKER_HOST:-}" ]] && answers "${DOCKER_HOST}"; then echo "${DOCKER_HOST}"; return; fi
  if answers "unix:///var/run/docker.sock"; then echo "unix:///var/run/docker.sock"; return; fi
  if answers "${OWN_HOST}"; then echo "${OWN_HOST}"; return; fi
  return 1
}

DOCKERD="${DOCKERD:-dockerd}"
can_start() { [[ "$(id -u)" == 0 ]] && command -v "${DOCKERD}" >/dev/null && command -v docker >/dev/null; }

start() {
  local host pid
  if ! host="$(current_host)"; then
    can_start || { log "no Docker engine answers, and none can be started here (needs root and dockerd)"; exit 1; }
    mkdir -p "${RUN_DIR}" "${CACHE}/docker"
    log "starting dockerd (data root ${CACHE}/docker/data, socket ${OWN_HOST})"
    "${DOCKERD}" --data-root "${CACHE}/docker/data" --exec-root "${RUN_DIR}/exec" \
      --pidfile "${RUN_DIR}/dockerd.pid" -H "${OWN_HOST}" \
      --iptables=false --ip-masq=false --bridge=none \
      --add-runtime "rso-runc=${HERE}/runc-bounded" --default-runtime rso-runc \
      >"${CACHE}/docker/dockerd.log" 2>&1 &
    pid=$!
    for _ in $(seq 60); do answers "${OWN_HOST}" && break; sleep 0.5; done
    answers "${OWN_HOST}" || { tail -20 "${CACHE}/docker/dockerd.log" >&2; kill "${pid}"; exit 1; }
    host="${OWN_HOST}"
    echo "export RSO_DOCKERD_PID=${pid}"
  fi
  if ! DOCKER_HOST="${host}" docker network inspect kind >/dev/null 2>&1; then
    DOCKER_HOST="${host}" docker network create kind --subnet "${KIND_NETWORK_SUBNET}" \
      -o com.docker.network.bridge.enable_ip_masquerade=false >/dev/null
    log "created the kind network (${KIND_NETWORK_SUBNET})"
  fi
  echo "export DOCKER_HOST=${host}"
}

stop() {
  local pid="${RSO_DOCKERD_PID:-}"
  [[ -n "${pid}" ]] || return 0
  if kill -0 "${pid}" 2>/dev/null; then
    log "stopping the dockerd started for this run (pid ${pid})"
    kill "${pid}"
    for _ in $(seq 60); do kill -0 "${pid}" 2>/dev/null || break; sleep 0.5; done
  fi
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  can-run) current_host >/dev/null || can_start ;;
  *) echo "usage: $0 start|stop|can-run" >&2; exit 2 ;;
esac
