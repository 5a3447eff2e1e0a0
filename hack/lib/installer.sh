# Shared by the cached installers under hack/ (helm, Traefik, the Gateway API CRDs, Kopf):
# their command line, the "already installed" check and the one-installer-at-a-time lock.
# Source it, then, in order:
#   installer NAME RESULT PRINT_FLAG HELP_LINES "$@"
#       NAME: the log prefix ("[NAME] ...", on stderr); RESULT: what the installer makes
#       (a binary, a directory), the last line on stdout; PRINT_FLAG: the flag that prints
#       RESULT and exits (--print-bin, ...); HELP_LINES: the range of the script's header
#       -h/--help prints ("2,20"); then the script's own arguments: the flag, -h/--help, or
#       nothing (anything else exits 2)
#   installed() { ...; }    # true once RESULT is complete (its stamp, written last, exists)
#   done_if_installed       # prints RESULT and exits 0 when it is there
#   lock_or_wait LOCKFILE   # one installer per version: a second waits for the first ...
#   done_if_installed       # ... then finds its stamp
# shellcheck shell=bash

log() { echo "[${NAME}] $*" >&2; }

installer() {
  NAME="$1" RESULT="$2" PRINT_FLAG="$3" HELP_LINES="$4"
  shift 4
  case "${1:-}" in
    "${PRINT_FLAG}") echo "${RESULT}"; exit 0 ;;
    -h|--help) sed -n "${HELP_LINES}p" "$0" | sed 's/^# \{0,1\}//' >&2; exit 0 ;;
    "") ;;
    *) log "unknown argument: $1"; exit 2 ;;
  esac
}

done_if_installed() {
  if installed; then
    echo "${RESULT}"
    exit 0
  fi
}

need_go() {
  command -v go >/dev/null 2>&1 || { log "ERROR: 'go' not found in PATH (needed to build ${NAME})"; exit 1; }
}

lock_or_wait() {
  mkdir -p "$(dirname "$1")"
  exec 9>"$1"
  if ! flock -n 9; then
    log "another installer is making ${NAME}; waiting ..."
    flock 9
  fi
}
