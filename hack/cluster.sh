#!/usr/bin/env bash
# The local control plane behind `make cluster-up` and `make cluster-down`.
#
#   hack/cluster.sh up     start it in the background, wait until it is ready, print its kubeconfig
#   hack/cluster.sh down   stop it, and leave no process and no pod network behind
#
# Environment (the Makefile passes its variables of the same names):
#   CLUSTER_DIR           where pid, log, state and kubeconfig live (default .cluster)
#   PY                    a python with this project installed (default .venv/bin/python)
#   CLUSTER_BIN_DIR       the control-plane binaries (default: hack/controlplane/build.sh --print-bin-dir)
#   CLUSTER_UP_TIMEOUT    seconds `up` waits for the control plane to be ready (default 120)
#   CLUSTER_DOWN_TIMEOUT  seconds `down` waits after SIGTERM before it sends SIGKILL (default 30)
#   CLUSTER_FLAGS         more flags for `python -m runtime.testing.controlplane up`
#                         (e.g. --no-pod-network when not root)
#
# up: a control plane already running from CLUSTER_DIR is reused. Otherwise whatever a
#   previous run left is cleaned up (as `down` does), the old log, state and kubeconfig are
#   removed BEFORE the harness starts - so the readiness check (the harness's `KUBECONFIG=`
#   line) can only ever see the new log - and the harness starts in a session of its own.
#   If it exits during start-up, or is not ready within CLUSTER_UP_TIMEOUT seconds, what it
#   started is stopped as `down` stops it, the log's last lines are shown, and `up` exits 1.
# down: SIGTERM to the harness (it stops its components and removes its pod network); after
#   CLUSTER_DOWN_TIMEOUT seconds SIGKILL to its process group, said so. Then any process
#   whose command line names the run's work dir is killed, pod networks whose harness is gone
#   are removed (`python -m runtime.testing.controlplane reap`), and the work dir goes.
#   The pid file is removed only once all of that is gone; otherwise `down` exits 1 and
#   keeps it, so a later `down` can try again.
# Start-up takes ~10 s on a 2-core machine; the harness itself gives each component 60 s.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${ROOT}"

DIR="$(realpath -m -- "${CLUSTER_DIR:-.cluster}")"
PY="${PY:-.venv/bin/python}"
UP_TIMEOUT="${CLUSTER_UP_TIMEOUT:-120}"
DOWN_TIMEOUT="${CLUSTER_DOWN_TIMEOUT:-30}"
KILL_TIMEOUT=10  # seconds for SIGKILLed processes to disappear
LOG_LINES=30     # lines of the log shown when start-up fails

err() { echo "cluster-${COMMAND}: $*" >&2; }

# alive PID: the process exists and is not a zombie.
alive() {
  local stat
  stat="$(ps -o stat= -p "$1" 2>/dev/null)" || return 1
  [[ "${stat}" != Z* ]]
}

# ours PID: PID is alive and is the harness of this CLUSTER_DIR (not a reused pid).
ours() {
  local cmdline
  # (the redirect's own error, for a pid that is gone, is inside the braces' 2>/dev/null)
  { cmdline="$(tr '\0' ' ' <"/proc/$1/cmdline")"; } 2>/dev/null || return 1
  [[ "${cmdline}" == *"runtime.testing.controlplane up "*"--kubeconfig-out ${DIR}/kubeconfig "* ]]
}

# harness_pid: print the pid from the pid file if it is our live harness.
harness_pid() {
  local pid
  [[ -f "${DIR}/pid" ]] || return 1
  pid="$(<"${DIR}/pid")"
  [[ "${pid}" =~ ^[0-9]+$ ]] && ours "${pid}" && echo "${pid}"
}

state() { sed -n "s/^$1=//p" "${DIR}/state" 2>/dev/null | head -n 1; }

# leftovers WORKDIR: pids of live processes whose command line names the run's work dir.
leftovers() {
  [[ -n "$1" ]] || return 0
  pgrep -f -- "$1/" || true
}

# wait_until SECONDS COMMAND...: poll COMMAND every 0.1 s until it succeeds; 1 on timeout.
wait_until() {
  local deadline=$((SECONDS + $1))
  shift
  until "$@"; do
    ((SECONDS < deadline)) || return 1
    sleep 0.1
  done
}
gone() { ! alive "$1"; }
no_leftovers() { [[ -z "$(leftovers "$1")" ]]; }

# stop_run [PID]: stop the harness PID (if given) and everything of its run; 1 if something survives.
stop_run() {
  local pid="${1:-}" workdir left
  workdir="$(state workdir)"
  if [[ -n "${pid}" ]] && alive "${pid}"; then
    kill -TERM "${pid}" 2>/dev/null || true
    if ! wait_until "${DOWN_TIMEOUT}" gone "${pid}"; then
      echo "the control plane (pid ${pid}) is still running ${DOWN_TIMEOUT}s after SIGTERM;" \
        "sending SIGKILL to its process group"
      kill -KILL -- "-${pid}" 2>/dev/null || kill -KILL "${pid}" 2>/dev/null || true
      if ! wait_until "${KILL_TIMEOUT}" gone "${pid}"; then
        err "pid ${pid} is still alive after SIGKILL"
        return 1
      fi
    fi
  fi
  # The components die with the harness (PR_SET_PDEATHSIG); make sure of it.
  left="$(leftovers "${workdir}")"
  if [[ -n "${left}" ]]; then
    echo "killing what is left of the run in ${workdir}: pids" ${left}
    # shellcheck disable=SC2086 # one word per pid
    kill -KILL ${left} 2>/dev/null || true
    if ! wait_until "${KILL_TIMEOUT}" no_leftovers "${workdir}"; then
      err "still alive after SIGKILL: pids $(leftovers "${workdir}" | tr '\n' ' ')"
      return 1
    fi
  fi
  "${PY}" -m runtime.testing.controlplane reap || err "could not look for stale pod networks"
  if [[ -n "${workdir}" && "$(basename -- "${workdir}")" == rso-controlplane-* && -d "${workdir}" ]]; then
    rm -rf -- "${workdir}"
  fi
}

up() {
  local pid bin_dir code
  mkdir -p "${DIR}"
  if pid="$(harness_pid)"; then
    echo "already running (pid ${pid}): KUBECONFIG=${DIR}/kubeconfig"
    return 0
  fi
  if [[ -f "${DIR}/pid" || -f "${DIR}/state" ]]; then
    stop_run "" || return 1 # a previous run died without `down`: clean up after it
  fi
  rm -f "${DIR}/pid" "${DIR}/state" "${DIR}/log" "${DIR}/kubeconfig"
  bin_dir="${CLUSTER_BIN_DIR:-$(hack/controlplane/build.sh --print-bin-dir)}"
  # shellcheck disable=SC2086 # CLUSTER_FLAGS is a list of flags
  setsid "${PY}" -m runtime.testing.controlplane up --bin-dir "${bin_dir}" \
    --kubeconfig-out "${DIR}/kubeconfig" --state-out "${DIR}/state" ${CLUSTER_FLAGS:-} \
    </dev/null >"${DIR}/log" 2>&1 &
  pid=$!
  echo "${pid}" >"${DIR}/pid"
  # Ctrl-C (or a TERM) while it starts: the harness runs in a session of its own, so the
  # terminal's SIGINT never reaches it; stop it here rather than leave it running.
  # shellcheck disable=SC2064 # the pid is fixed now
  trap "err 'interrupted during start-up; stopping what it started'; \
    stop_run ${pid} && rm -f '${DIR}/pid' '${DIR}/state'; exit 130" INT TERM
  local deadline=$((SECONDS + UP_TIMEOUT))
  while ! grep -q '^KUBECONFIG=' "${DIR}/log" 2>/dev/null; do
    if ! alive "${pid}"; then
      code=0
      wait "${pid}" || code=$?
      err "the control plane exited during start-up (exit code ${code}); last lines of ${DIR}/log:"
      tail -n "${LOG_LINES}" "${DIR}/log" >&2
      trap - INT TERM
      stop_run "" && rm -f "${DIR}/pid" "${DIR}/state"
      return 1
    fi
    if ((SECONDS >= deadline)); then
      trap - INT TERM
      err "not ready after ${UP_TIMEOUT}s (CLUSTER_UP_TIMEOUT); stopping what it started"
      stop_run "${pid}" && rm -f "${DIR}/pid" "${DIR}/state" && err "stopped"
      err "last lines of ${DIR}/log:"
      tail -n "${LOG_LINES}" "${DIR}/log" >&2
      return 1
    fi
    sleep 0.1
  done
  trap - INT TERM
  grep -E '^(control plane|KUBECONFIG=)' "${DIR}/log"
}

down() {
  local pid=""
  pid="$(harness_pid)" || pid=""
  if [[ -z "${pid}" && ! -f "${DIR}/pid" && ! -f "${DIR}/state" ]]; then
    echo "no control plane running"
    "${PY}" -m runtime.testing.controlplane reap || err "could not look for stale pod networks"
    return 0
  fi
  if ! stop_run "${pid}"; then
    err "not everything stopped; keeping ${DIR}/pid (run it again)"
    return 1
  fi
  rm -f "${DIR}/pid" "${DIR}/state" "${DIR}/kubeconfig"
  echo "control plane stopped"
}

COMMAND="${1:-}"
case "${COMMAND}" in
  up) up ;;
  down) down ;;
  *)
    sed -n '2,5p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
