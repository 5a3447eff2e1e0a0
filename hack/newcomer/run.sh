#!/usr/bin/env bash
# The README's "Two commands" on a fresh machine: a test of record, run by hand, as root.
#
# A fresh Debian root filesystem (debootstrap --variant=minbase) gets only the README's
# prerequisites (its one apt-get line, read from the README under test; Go 1.26 from the Go module proxy, which
# serves the official toolchains as the module golang.org/toolchain), a clone of one
# commit of this repository in /root/rayservice-operator, and then, as root in that
# directory, `make test` and `make run`, as a newcomer would type them. It reports:
#   - the wall time of the whole run and of `make test`, its exit status, the pytest counts
#     (build/coverage/junit.xml) and the total coverage (build/coverage/coverage.json);
#   - whether `make run` brought config/samples/ray_v1_rayservice.yaml to Ready (its
#     Ready condition True), after how many seconds, and how it stopped on Ctrl-C (SIGINT
#     to its process group, as a terminal sends it: it tears its cluster down).
# The summary is printed, and written as one JSON object on the last line of stdout and
# into OUT/summary.json; the logs (prerequisites, make test, make run, its cluster) go to OUT.
#
# Usage: hack/newcomer/run.sh [OPTION]...
#   --rev REV           the commit to test (default HEAD); only committed work is tested
#   --repo DIR          the repository to clone it from (default: the one holding this script)
#   --root DIR          the run's root filesystem: a new or empty directory (default: a fresh
#                       one under /var/tmp); removed at the end unless --keep. The root of an
#                       earlier run with --keep is reused as it is (kept again): quick
#                       re-checks, not a fresh machine (the summary says "reused": true)
#   --out DIR           logs and summary.json (default build/newcomer/<UTC time> in the repo)
#   --keep              keep the root filesystem (its path is in the summary)
#   --only-setup        prepare the root (prerequisites, Go, clone, machine checks), run
#                       `make doctor` if the Makefile has it, and stop
#   --shell             the same, then a login shell in /root/rayservice-operator; commands
#                       can be piped in: echo 'time make venv' | hack/newcomer/run.sh --shell
#   --skip-test         no `make test`, only the `make run` check (with a reused root: after
#                       a run whose `make test` built everything; not a test of record)
#   --ready-timeout S   seconds `make run` has to bring the sample to Ready (default 600)
#   --manager-flags F   `make run MANAGER_FLAGS='F'`: other addresses than 127.0.0.1:8080 and
#                       :8081 for the manager's metrics and probes, when the host uses those
#   --go VERSION        the Go toolchain, e.g. 1.26.8 (default: the newest 1.26 patch)
#   --packages "P..."   the apt-get line's packages instead of the README's
#   --refresh           debootstrap again even though the cached tarball exists
#   -h, --help          this text
#
# The machine: debootstrap (installed with apt-get if missing) writes a pristine root once,
# cached as the tarball NEWCOMER_CACHE/rootfs-<suite>.tar (NEWCOMER_CACHE defaults to
# ${XDG_CACHE_HOME:-$HOME/.cache}/rayservice-operator/newcomer; the Go toolchain zips are
# cached beside it, checked against the checksum database); every run unpacks a fresh copy.
# The run adds what an installed machine has and debootstrap does not write: Debian's
# updates and security sources, /etc/hosts, the host's /etc/resolv.conf and, where the host
# has them, its registry settings (the PIP_* variables, GOPROXY, GOFLAGS, GONOSUMDB,
# GOSUMDB, GOPRIVATE, GONOPROXY, GOINSECURE, the http(s)/no proxy variables, /etc/pip.conf,
# $PIP_CONFIG_FILE, and the local CA certificates in /usr/local/share/ca-certificates,
# which the ca-certificates package adds to the system's bundle). Everything runs inside `env -i` login shells (bash -l: Debian's
# root PATH plus /usr/local/go/bin from ~/.profile, as go.dev/doc/install says; HOME=/root).
# The mounts are a real machine's - /proc, /sys, /dev (and a private /dev/shm), /dev/pts,
# /run as tmpfs, the root itself a mount point (`ip netns exec` makes / a slave mount);
# /tmp is the root's own directory - all made in a mount namespace of the run's own
# (unshare --mount), so none can outlive it; on exit, failure or Ctrl-C the processes left
# in the root are killed, everything is unmounted, and findmnt must show nothing left.
# The network is the host's (that is how the registries are reached): `make run` binds
# 127.0.0.1:8080 and :8081, and the test pod networks (network namespaces, seen only in
# the root's /run; veths and routes in the host's network) pick a /20 no one else routes.
# The host needs: bash, git, python3, tar, util-linux (unshare, findmnt), coreutils
# (chroot), curl (else python3 downloads), ~10 GB free under the root's directory for `make test`.
#
# Environment: NEWCOMER_CACHE (above), NEWCOMER_SUITE (default bookworm), NEWCOMER_MIRROR
# (default http://deb.debian.org/debian), NEWCOMER_SECURITY_MIRROR (default
# http://deb.debian.org/debian-security).
# Exit status: 0 all good; 1 `make test` failed or the sample did not become Ready (or, with
# --only-setup, `make doctor` failed); 2 usage; 3 the machine could not be prepared (then
# the project was not tested); 130 interrupted.
set -euo pipefail

# The README's prerequisites are its one apt-get line, read from the README of the commit
# under test (readme_packages), so this run installs exactly what a newcomer is told to.
readme_packages() {  # repo sha
  git -C "$1" show "$2:README.md" | sed -n 's/^apt-get update && apt-get install -y //p' | head -n 1
}

# Programs that `make test` and `make run` call (the Makefile, the hack/ scripts they run,
# the tests and their harnesses); the run lists those missing from the prepared root
# (missing_programs in the summary). Not here: git (hack/golden, KUBERAY_SOURCE builds),
# docker, kind, kubectl on PATH, gcc, pkg-config (make kind-e2e and friends).
PROGRAMS="bash sh make python3 go openssl ip sysctl ps pgrep wget flock unshare setsid
  realpath mktemp sha256sum install awk sed grep sort head tail tr cut wc date sleep kill
  id uname"

words() { tr '\n' ' ' <<<"$1"; }
# with_names PIDS: "PID(command)" for each.
with_names() { local p; for p in $1; do printf '%s(%s) ' "${p}" "$(cat "/proc/${p}/comm" 2>/dev/null)"; done; }
log() { printf '[newcomer] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 3; }
usage() { sed -n '2,/^set -euo pipefail/{/^set /d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"; }

export LC_ALL=C
SELF="$(realpath -- "${BASH_SOURCE[0]}")"
SUITE="${NEWCOMER_SUITE:-bookworm}"
MIRROR="${NEWCOMER_MIRROR:-http://deb.debian.org/debian}"
SECURITY_MIRROR="${NEWCOMER_SECURITY_MIRROR:-http://deb.debian.org/debian-security}"
CACHE="${NEWCOMER_CACHE:-${XDG_CACHE_HOME:-${HOME}/.cache}/rayservice-operator/newcomer}"
REPO_IN=/root/rayservice-operator   # the clone, as the chroot sees it

now() { printf '%s' "${EPOCHREALTIME}"; }
since() { awk -v a="$1" -v b="${EPOCHREALTIME}" 'BEGIN { printf "%.1f", b - a }'; }
# state KEY VALUE: one line of the run's state file (read by the summary).
state() { printf '%s=%s\n' "$1" "$2" >>"${NC_STATE}"; }

# The dev:inode of a directory: a process whose /proc/PID/root is that is in the root.
dir_id() { stat -L -c %d:%i -- "$1"; }
root_pids() {
  local id p
  id="$(dir_id "${NC_ROOT}")" || return 0
  for p in /proc/[0-9]*; do
    [[ "$(stat -L -c %d:%i -- "${p}/root" 2>/dev/null)" == "${id}" ]] && echo "${p#/proc/}"
  done
  return 0
}

# ---------------------------------------------------------------------------------------
# Inside the run's own mount namespace (the script again, under unshare --mount).
# ---------------------------------------------------------------------------------------
R=""        # the root filesystem
ENV_BASE=0  # ENV_IN's entries before the host's settings
RUN_PID=""  # make run's process (group) id while it runs

# inside CMD: run CMD with bash -l in the root, in /root, with the newcomer's environment.
inside() { chroot "${R}" /usr/bin/env -i "${ENV_IN[@]}" /bin/bash -lc "cd; $1"; }

mounted() { findmnt -rn -o TARGET | awk -v r="${R}" '$0 == r || index($0, r "/") == 1'; }

inner_cleanup() {
  local code=$? pids left i
  trap '' INT TERM HUP
  set +e
  if [[ -n "${RUN_PID}" ]] && kill -0 "${RUN_PID}" 2>/dev/null; then
    log "stopping make run (SIGINT to its process group)"
    stop_make_run 60
  fi
  for i in 1 2; do
    pids="$(root_pids)"
    [[ -n "${pids}" ]] || break
    if ((i == 1)); then
      log "processes left in the root, SIGTERM: $(with_names "${pids}")"
      # shellcheck disable=SC2086 # one word per pid
      kill -TERM ${pids} 2>/dev/null
      sleep 5
    else
      log "still there, SIGKILL: $(with_names "${pids}")"
      # shellcheck disable=SC2086
      kill -KILL ${pids} 2>/dev/null
      sleep 1
    fi
  done
  if [[ -n "${R}" && -n "$(mounted)" ]]; then
    umount -R "${R}" 2>/dev/null || { log "umount -R ${R} failed; detaching (lazy)"; umount -R -l "${R}"; }
  fi
  left="$(mounted)"
  if [[ -n "${left}" ]]; then
    log "ERROR: still mounted: $(words "${left}")"
    state mounts_left_inside "$(wc -l <<<"${left}")"
  else
    state mounts_left_inside 0
  fi
  exit "${code}"
}

mount_all() {
  log "mounting /proc, /sys, /dev, /dev/pts, /dev/shm, /run in ${R}"
  mount --bind "${R}" "${R}"   # `ip netns exec` remounts / as a slave: / must be a mount
  mount -t proc proc "${R}/proc"
  mount --rbind /sys "${R}/sys" && mount --make-rslave "${R}/sys"
  mount --rbind /dev "${R}/dev" && mount --make-rslave "${R}/dev"   # /dev/pts with it
  mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs "${R}/dev/shm"
  mount -t tmpfs -o mode=755,nosuid,nodev tmpfs "${R}/run"
  mkdir -m 1777 "${R}/run/lock"
  # A directory a passed PIP_* setting names (PIP_FIND_LINKS=/opt/wheels, say) is there
  # as on the host, read-only; pip would only warn without it, but not behave the same.
  local entry path
  for entry in "${ENV_IN[@]:ENV_BASE}"; do
    [[ "${entry}" == PIP_* ]] || continue
    for path in ${entry#*=}; do
      if [[ "${path}" == /* && -d "${path}" && ! -e "${R}${path}" ]]; then
        mkdir -p "${R}${path}"
        mount --bind "${path}" "${R}${path}" && mount -o remount,bind,ro "${R}${path}"
        log "${entry%%=*}: the host's ${path}, read-only"
      fi
    done
  done
}

# The newcomer's environment: a login's basics plus the host's registry settings.
build_env() {
  local name
  ENV_IN=(HOME=/root USER=root LOGNAME=root SHELL=/bin/bash "TERM=${TERM:-dumb}" LANG=C.UTF-8
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin)
  ENV_BASE=${#ENV_IN[@]}
  while IFS= read -r name; do
    ENV_IN+=("${name}=${!name}")
  done < <(compgen -e | grep -E '^(PIP_[A-Z0-9_]+|GOPROXY|GOFLAGS|GONOSUMDB|GOSUMDB|GOPRIVATE|GONOPROXY|GOINSECURE|https?_proxy|HTTPS?_PROXY|no_proxy|NO_PROXY)$' | sort)
  if ((${#ENV_IN[@]} > ENV_BASE)); then
    log "passing the host's registry settings:" "${ENV_IN[@]:ENV_BASE}"
  fi
}

# The pristine root, as debootstrap writes it, cached as a tarball; a fresh copy of it in R.
restore_root() {
  local tarball="${CACHE}/rootfs-${SUITE}.tar" build="${CACHE}/rootfs-${SUITE}" t
  mkdir -p "${CACHE}"
  if [[ -n "${NC_REFRESH}" || ! -f "${tarball}" ]]; then
    if ! command -v debootstrap >/dev/null 2>&1; then
      log "installing debootstrap on the host (apt-get)"
      if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null; }; then
        die "could not install debootstrap"
      fi
    fi
    rm -rf --one-file-system -- "${build}"
    log "debootstrap --variant=minbase ${SUITE} ${build} ${MIRROR} (log: ${NC_OUT}/debootstrap.log)"
    t="$(now)"
    debootstrap --variant=minbase "${SUITE}" "${build}" "${MIRROR}" >"${NC_OUT}/debootstrap.log" 2>&1 \
      || { tail -n 20 "${NC_OUT}/debootstrap.log" >&2; die "debootstrap failed"; }
    tar -C "${build}" --numeric-owner -cf "${tarball}.tmp" .
    mv -f "${tarball}.tmp" "${tarball}"
    rm -rf --one-file-system -- "${build}"
    state debootstrap_seconds "$(since "${t}")"
    log "debootstrap: $(since "${t}") s; cached as ${tarball}"
  fi
  t="$(now)"
  tar -C "${R}" --numeric-owner -xpf "${tarball}"
  chmod 755 "${R}"
  state restore_seconds "$(since "${t}")"
  log "fresh root from ${tarball}: $(since "${t}") s"
}

# What an installed machine has and debootstrap does not write.
configure_root() {
  local codename="${SUITE}"
  cp -L /etc/resolv.conf "${R}/etc/resolv.conf"
  printf '%s\n' "127.0.0.1	localhost" "127.0.1.1	$(cat "${R}/etc/hostname" 2>/dev/null || echo debian)" \
    "::1	localhost ip6-localhost ip6-loopback" >"${R}/etc/hosts"
  printf '%s\n' "deb ${MIRROR} ${codename} main" "deb ${MIRROR} ${codename}-updates main" \
    "deb ${SECURITY_MIRROR} ${codename}-security main" >"${R}/etc/apt/sources.list"
  if [[ -f /etc/pip.conf ]]; then cp /etc/pip.conf "${R}/etc/pip.conf"; fi
  # The host's local CAs (Debian's place for them; ca-certificates' postinst adds them to
  # /etc/ssl/certs): a network whose TLS to the registries is intercepted needs them.
  if [[ -d /usr/local/share/ca-certificates ]] && [[ -n "$(ls -A /usr/local/share/ca-certificates)" ]]; then
    mkdir -p "${R}/usr/local/share/ca-certificates"
    cp -R /usr/local/share/ca-certificates/. "${R}/usr/local/share/ca-certificates/"
    log "the host's local CA certificates: $(cd /usr/local/share/ca-certificates && find . -type f | sed 's|^\./||' | paste -sd ' ')"
  fi
  if [[ -n "${PIP_CONFIG_FILE:-}" && -f "${PIP_CONFIG_FILE}" ]]; then
    mkdir -p "${R}$(dirname -- "${PIP_CONFIG_FILE}")"
    cp "${PIP_CONFIG_FILE}" "${R}${PIP_CONFIG_FILE}"
  fi
}

install_prerequisites() {
  local t line
  line="apt-get update && apt-get install -y ${NC_PACKAGES}"
  log "prerequisites: ${line} (log: ${NC_OUT}/prerequisites.log)"
  state prerequisites "${line}"
  t="$(now)"
  if ! inside "export DEBIAN_FRONTEND=noninteractive; ${line}" </dev/null >"${NC_OUT}/prerequisites.log" 2>&1; then
    tail -n 20 "${NC_OUT}/prerequisites.log" >&2
    die "the prerequisites did not install"
  fi
  state prerequisites_seconds "$(since "${t}")"
  log "prerequisites installed: $(since "${t}") s"
}

# fetch URL FILE: with curl, else python3.
fetch() {
  if command -v curl >/dev/null 2>&1; then
    curl -fsSL --retry 3 -o "$2" "$1"
  else
    python3 -c 'import shutil, sys, urllib.request
with urllib.request.urlopen(sys.argv[1], timeout=120) as r, open(sys.argv[2], "wb") as f:
    shutil.copyfileobj(r, f)' "$1" "$2"
  fi
}

# Go: the official toolchain, as the module golang.org/toolchain@v0.0.1-goX.linux-ARCH from
# the Go module proxy (the go command's own way to fetch one), checked against the checksum
# database, unpacked into /usr/local/go; ~/.profile puts /usr/local/go/bin on PATH.
install_go() {
  local arch proxy version module zip t h1 want
  case "$(uname -m)" in
    x86_64) arch=amd64 ;;
    aarch64) arch=arm64 ;;
    *) die "no Go toolchain for $(uname -m) here" ;;
  esac
  proxy="$(tr ',|' '\n' <<<"${GOPROXY:-https://proxy.golang.org}" | grep -m1 -E '^https?://' || true)"
  proxy="${proxy%/}"
  [[ -n "${proxy}" ]] || proxy=https://proxy.golang.org
  t="$(now)"
  if [[ -n "${NC_GO}" ]]; then
    version="v0.0.1-go${NC_GO#go}.linux-${arch}"
  else
    version="$(fetch_list "${proxy}" | grep -E "^v0\.0\.1-go1\.26\.[0-9]+\.linux-${arch}$" | sort -V | tail -n 1)"
    [[ -n "${version}" ]] || die "no go1.26 toolchain listed by ${proxy}"
  fi
  module="golang.org/toolchain@${version}"
  zip="${CACHE}/go/${version}.zip"
  mkdir -p "${CACHE}/go"
  if [[ ! -f "${zip}" ]]; then
    log "downloading ${module} from ${proxy}"
    fetch "${proxy}/golang.org/toolchain/@v/${version}.zip" "${zip}.tmp" || die "could not download ${module}"
    if [[ "${GOSUMDB:-}" == off ]]; then
      log "GOSUMDB=off: not checking ${module} against the checksum database"
    else
      want="$( { fetch_sum "${proxy}/sumdb/sum.golang.org/lookup/${module}" \
        || fetch_sum "https://sum.golang.org/lookup/${module}"; } \
        | awk -v v="${version}" '$1 == "golang.org/toolchain" && $2 == v { print $3 }')"
      [[ -n "${want}" ]] || die "no checksum for ${module} from the checksum database"
      h1="$(go_h1 "${zip}.tmp")"
      [[ "${h1}" == "${want}" ]] || die "${module}: checksum ${h1}, the database says ${want}"
    fi
    mv -f "${zip}.tmp" "${zip}"
  fi
  python3 - "${zip}" "golang.org/toolchain@${version}/" "${R}/usr/local/go" <<'EOF'
import os, sys, zipfile
zpath, prefix, dest = sys.argv[1:]
with zipfile.ZipFile(zpath) as z:
    for info in z.infolist():
        if not info.filename.startswith(prefix):
            sys.exit(f"{info.filename}: not under {prefix}")
        rel = info.filename[len(prefix):]
        if not rel or rel.startswith("/") or ".." in rel.split("/"):
            sys.exit(f"{info.filename}: unsafe path")
        path = os.path.join(dest, rel)
        if info.is_dir():
            os.makedirs(path, exist_ok=True)
            continue
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with z.open(info) as src, open(path, "wb") as out:
            while chunk := src.read(1 << 20):
                out.write(chunk)
        os.chmod(path, (info.external_attr >> 16) & 0o777 or 0o644)
EOF
  # go.dev/doc/install: "Add /usr/local/go/bin to the PATH environment variable" (~/.profile).
  # shellcheck disable=SC2016 # for the login shell to expand
  printf '%s\n' 'export PATH=$PATH:/usr/local/go/bin' >>"${R}/root/.profile"
  state go "${version#v0.0.1-}"
  state go_module "${module}"
  state go_install_seconds "$(since "${t}")"
  log "Go (${module}) in /usr/local/go: $(since "${t}") s"
}
fetch_list() { local f; f="$(mktemp)"; fetch "$1/golang.org/toolchain/@v/list" "${f}" && cat "${f}"; rm -f "${f}"; }
fetch_sum() { local f; f="$(mktemp)"; fetch "$1" "${f}" 2>/dev/null && cat "${f}"; local c=$?; rm -f "${f}"; return "${c}"; }
# go_h1 ZIP: the module zip's "h1:" hash, as go.sum and the checksum database have it.
go_h1() {
  python3 - "$1" <<'EOF'
import base64, hashlib, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    lines = "".join(f"{hashlib.sha256(z.read(n)).hexdigest()}  {n}\n" for n in sorted(z.namelist()))
print("h1:" + base64.b64encode(hashlib.sha256(lines.encode()).digest()).decode())
EOF
}

clone_repo() {
  local t
  t="$(now)"
  git clone --quiet --no-checkout --no-hardlinks -- "${NC_REPO}" "${R}${REPO_IN}"
  git -C "${R}${REPO_IN}" -c advice.detachedHead=false checkout --quiet --detach "${NC_SHA}" \
    || die "${NC_SHA} is not in a branch or tag of ${NC_REPO}"
  state clone_seconds "$(since "${t}")"
  log "cloned ${NC_SHA} into ${REPO_IN}: $(since "${t}") s"
}

# The machine is what it should be (else it is this script's fault, not the project's):
# the tools, the registries from inside, the pod network's namespaces. Caches in /tmp/nc-check.
check_machine() {
  local t
  t="$(now)"
  log "checking the machine (log: ${NC_OUT}/machine-check.log)"
  if ! inside 'set -ex
    go version; python3 --version; openssl version; make --version | head -n 1
    export GOMODCACHE=/tmp/nc-check/gomod GOCACHE=/tmp/nc-check/gocache PIP_CACHE_DIR=/tmp/nc-check/pip
    python3 -m venv /tmp/nc-check/venv && /tmp/nc-check/venv/bin/pip --version
    /tmp/nc-check/venv/bin/pip download --no-deps --dest /tmp/nc-check/dl six
    mkdir -p /tmp/nc-check/mod && cd /tmp/nc-check/mod && go mod init nccheck 2>&1
    go mod download -json golang.org/x/text@latest | grep -E "\"(Version|Zip)\""
    ip netns add nc-check && ip netns exec nc-check ip -brief link && ip netns del nc-check
    cd / && rm -rf /tmp/nc-check' </dev/null >"${NC_OUT}/machine-check.log" 2>&1; then
    tail -n 20 "${NC_OUT}/machine-check.log" >&2
    die "the prepared machine failed its check"
  fi
  grep -E '^(go version|Python|OpenSSL|GNU Make|pip )' "${NC_OUT}/machine-check.log" | sed 's/^/[newcomer]   /' >&2
  state machine_check_seconds "$(since "${t}")"
  local missing
  missing="$(inside "for p in ${PROGRAMS//$'\n'/ }; do command -v \"\${p}\" >/dev/null || echo \"\${p}\"; done" \
    </dev/null 2>/dev/null | tr '\n' ' ')"
  missing="${missing% }"
  state missing_programs "${missing}"
  log "programs the project calls that this machine lacks: ${missing:-none}"
}

doctor() {
  local code=0
  if ! grep -qE '^doctor:' "${R}${REPO_IN}/Makefile"; then
    log "the Makefile has no doctor target"
    return 0
  fi
  inside "cd ${REPO_IN} && make doctor" </dev/null 2>&1 | tee "${NC_OUT}/make-doctor.log" || code=${PIPESTATUS[0]}
  state doctor_exit "${code}"
}

make_test() {
  local t code=0
  log "make test (log: ${NC_OUT}/make-test.log)"
  t="$(now)"
  set +e
  inside "cd ${REPO_IN} && make test" </dev/null 2>&1 | tee "${NC_OUT}/make-test.log"
  code=${PIPESTATUS[0]}
  set -e
  state make_test_seconds "$(since "${t}")"
  state make_test_exit "${code}"
  log "make test: exit ${code} after $(since "${t}") s"
}

# stop_make_run SECONDS: Ctrl-C (SIGINT to the process group), then SIGTERM, SIGKILL.
stop_make_run() {
  local deadline=$((SECONDS + $1)) code=0 t
  t="$(now)"
  kill -INT -- "-${RUN_PID}" 2>/dev/null || kill -INT "${RUN_PID}" 2>/dev/null || true
  while kill -0 "${RUN_PID}" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.2; done
  if kill -0 "${RUN_PID}" 2>/dev/null; then
    log "make run still running $1 s after SIGINT: SIGTERM, then SIGKILL"
    state make_run_stopped_by SIGTERM
    kill -TERM -- "-${RUN_PID}" 2>/dev/null || true
    while kill -0 "${RUN_PID}" 2>/dev/null && ((SECONDS < deadline + 10)); do sleep 0.2; done
    kill -KILL -- "-${RUN_PID}" 2>/dev/null || true
  fi
  wait "${RUN_PID}" 2>/dev/null || code=$?
  state make_run_exit "${code}"
  state make_run_stop_seconds "$(since "${t}")"
  RUN_PID=""
}

make_run() {
  local t deadline kubectl="" status ready="" applied="" running="" netns
  local get='{.status.conditions[?(@.type=="Ready")].status} {.status.serviceStatus}'
  # The root shares the host's network (the registries are reached through it): make run's
  # manager binds 127.0.0.1:8080 and :8081 (MANAGER_FLAGS) and fails if the host uses them.
  local busy ports="8080 8081" run="make run"
  if [[ -n "${NC_MANAGER_FLAGS}" ]]; then
    run="make run MANAGER_FLAGS='${NC_MANAGER_FLAGS}'"
    ports="$(grep -oE ':[0-9]+' <<<"${NC_MANAGER_FLAGS}" | tr -d : | paste -sd ' ')"
  fi
  # shellcheck disable=SC2086 # one argument per port
  busy="$(python3 -c 'import socket, sys
for port in sys.argv[1:]:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", int(port)))
        except OSError:
            print(port)' ${ports} | paste -sd ' ')"
  state make_run_ports_busy "${busy}"
  [[ -z "${busy}" ]] || log "WARNING: 127.0.0.1 port(s) ${busy} already in use on this host: make run's manager needs them (--manager-flags)"
  log "${run} in the background (log: ${NC_OUT}/make-run.log); waiting up to ${NC_READY_TIMEOUT} s for the sample to be Ready"
  t="$(now)"
  deadline=$((SECONDS + NC_READY_TIMEOUT))
  # A session of its own: its process group gets the SIGINT a terminal's Ctrl-C would send.
  # A background job starts with SIGINT and SIGQUIT ignored (no job control here); a
  # terminal's foreground job does not: env gives them back their default action.
  state make_run_command "${run}"
  setsid chroot "${R}" /usr/bin/env -i --default-signal=INT,QUIT "${ENV_IN[@]}" \
    /bin/bash -lc "cd ${REPO_IN} && exec ${run}" \
    </dev/null >"${NC_OUT}/make-run.log" 2>&1 &
  RUN_PID=$!
  state make_run_ready false
  while ((SECONDS < deadline)); do
    kill -0 "${RUN_PID}" 2>/dev/null || { log "make run exited before the sample was Ready"; break; }
    if [[ -z "${kubectl}" ]] && grep -q '^running rayservice-manager' "${NC_OUT}/make-run.log"; then
      kubectl="$(inside "cd ${REPO_IN} && hack/controlplane/build.sh --print-bin-dir")/kubectl"
      kubectl="${kubectl} --kubeconfig ${REPO_IN}/.cluster/kubeconfig"
      state make_run_manager_seconds "$(since "${t}")"
    fi
    if [[ -n "${kubectl}" && -z "${applied}" ]]; then
      if inside "cd ${REPO_IN} && ${kubectl} apply -f config/samples/ray_v1_rayservice.yaml" \
        >>"${NC_OUT}/kubectl.log" 2>&1; then
        applied="$(now)"
        state make_run_applied_seconds "$(since "${t}")"
      fi
    fi
    if [[ -n "${applied}" ]]; then
      status="$(inside "${kubectl} get rayservice rayservice-sample -o jsonpath='${get}'" 2>>"${NC_OUT}/kubectl.log" || true)"
      if [[ -z "${running}" && "${status}" == *Running* ]]; then
        running=1
        state make_run_service_running_seconds "$(since "${t}")"
      fi
      if [[ "${status}" == True* ]]; then
        ready=1
        state make_run_ready true
        state make_run_ready_seconds "$(since "${t}")"
        state make_run_apply_to_ready_seconds "$(since "${applied}")"
        log "the sample RayService is Ready after $(since "${t}") s ($(since "${applied}") s after kubectl apply)"
        break
      fi
    fi
    sleep 2
  done
  if [[ -n "${kubectl}" ]]; then
    inside "${kubectl} get rayservices,rayclusters,pods,services -o wide" >"${NC_OUT}/objects.txt" 2>&1 || true
    inside "${kubectl} get rayservice rayservice-sample -o yaml" >"${NC_OUT}/rayservice-sample.yaml" 2>&1 || true
  fi
  [[ -n "${ready}" ]] || log "the sample RayService did not become Ready (timeout ${NC_READY_TIMEOUT} s)"
  if kill -0 "${RUN_PID}" 2>/dev/null; then
    log "Ctrl-C to make run (SIGINT to its process group)"
    stop_make_run 120
  else
    local code=0
    wait "${RUN_PID}" || code=$?
    state make_run_exit "${code}"
    RUN_PID=""
  fi
  state make_run_leftover_processes "$(root_pids | wc -l)"
  netns="$(inside 'ip netns list' 2>/dev/null | awk '{print $1}' | tr '\n' ' ')"
  state make_run_leftover_netns "${netns% }"
  log "make run stopped: exit $(sed -n 's/^make_run_exit=//p' "${NC_STATE}" | tail -n 1);" \
    "left: $(root_pids | wc -l) processes, network namespaces: ${netns:-none}"
}

inner_main() {
  R="${NC_ROOT}"
  trap inner_cleanup EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  trap 'exit 129' HUP
  build_env
  if [[ -z "${NC_REUSE}" ]]; then
    restore_root
    configure_root
  fi
  mount_all
  if [[ -z "${NC_REUSE}" ]]; then
    install_prerequisites
    install_go
    clone_repo
    check_machine
    # What the setup found, for the summaries of runs that reuse this root.
    grep -E '^(go|go_module|prerequisites|missing_programs)=' "${NC_STATE}" >"${R}/.newcomer-prepared"
  else
    cat "${R}/.newcomer-prepared" >>"${NC_STATE}"
  fi
  state setup_seconds "$(since "${NC_START}")"
  if [[ -n "${NC_ONLY_SETUP}${NC_SHELL}" ]]; then doctor; fi
  if [[ -n "${NC_SHELL}" ]]; then
    log "a login shell in ${REPO_IN} (exit to end the run)"
    chroot "${R}" /usr/bin/env -i "${ENV_IN[@]}" /bin/bash -lc "cd ${REPO_IN} && exec bash -l" || true
    return 0
  fi
  [[ -n "${NC_ONLY_SETUP}" ]] && return 0
  if [[ -z "${NC_SKIP_TEST}" ]]; then make_test; fi
  make_run
}

# ---------------------------------------------------------------------------------------
# On the host: the options, the run's namespace, the checks after it, the summary.
# ---------------------------------------------------------------------------------------
summary() {
  python3 - "${NC_STATE}" "${NC_OUT}" <<'EOF'
import json, os, sys, xml.etree.ElementTree as ET
state_file, out = sys.argv[1:]
s = {}
with open(state_file) as f:
    for line in f:
        key, _, value = line.rstrip("\n").partition("=")
        s[key] = value
def num(key):
    v = s.get(key)
    if v in (None, ""):
        return None
    return float(v) if "." in v else int(v)
counts = {"tests": None, "passed": None, "failed": None, "errors": None, "skipped": None}
junit = os.path.join(out, "junit.xml")
if os.path.exists(junit):
    root = ET.parse(junit).getroot()
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    total = {k: sum(int(x.get(k, 0)) for x in suites) for k in ("tests", "failures", "errors", "skipped")}
    counts = {"tests": total["tests"], "failed": total["failures"], "errors": total["errors"],
              "skipped": total["skipped"],
              "passed": total["tests"] - total["failures"] - total["errors"] - total["skipped"]}
coverage = None
cov = os.path.join(out, "coverage.json")
if os.path.exists(cov):
    with open(cov) as f:
        coverage = round(json.load(f)["totals"]["percent_covered"], 2)
only_setup = s.get("only_setup") == "1"
skip_test = s.get("skip_test") == "1"
summary = {
    "rev": s.get("rev"), "suite": s.get("suite"), "go": s.get("go"), "go_module": s.get("go_module"),
    "prerequisites": s.get("prerequisites"), "only_setup": only_setup, "skip_test": skip_test,
    "reused": s.get("reused") == "1",
    "wall_seconds": num("wall_seconds"),
    "setup": {k: num(k + "_seconds") for k in
              ("debootstrap", "restore", "prerequisites", "go_install", "clone", "machine_check", "setup")},
    "missing_programs": s.get("missing_programs", "").split() if "missing_programs" in s else None,
    "doctor_exit": num("doctor_exit"),
}
if not only_setup and not skip_test:
    summary["make_test"] = {"exit_status": num("make_test_exit"), "seconds": num("make_test_seconds"),
                            **counts, "coverage_percent": coverage}
if not only_setup:
    summary["make_run"] = {
        "command": s.get("make_run_command"), "ready": s.get("make_run_ready") == "true", "ready_seconds": num("make_run_ready_seconds"),
        "manager_started_seconds": num("make_run_manager_seconds"),
        "apply_to_ready_seconds": num("make_run_apply_to_ready_seconds"),
        "service_running_seconds": num("make_run_service_running_seconds"),
        "exit_status": num("make_run_exit"), "stop_seconds": num("make_run_stop_seconds"),
        "stopped_by": s.get("make_run_stopped_by", "SIGINT" if "make_run_stop_seconds" in s else None),
        "leftover_processes": num("make_run_leftover_processes"),
        "leftover_netns": s.get("make_run_leftover_netns", "").split(),
        "ports_busy": s.get("make_run_ports_busy", "").split(),
    }
summary |= {"mounts_left": num("mounts_left"), "setup_error": s.get("setup_error") == "1",
            "interrupted": s.get("interrupted") == "1", "exit_status": num("exit_status"),
            "root": s.get("root"), "root_kept": s.get("root_kept") == "1", "out": out}
with open(os.path.join(out, "summary.json"), "w") as f:
    json.dump(summary, f, indent=2)
    f.write("\n")
t = summary.get("make_test") or {}
r = summary.get("make_run") or {}
print(f"newcomer run of {summary['rev']} on {summary['suite']} with {summary['go']}"
      + (" (in a reused root: not a fresh machine)" if summary["reused"] else ""))
print(f"  prerequisites: {summary['prerequisites']}")
print("  setup (s): " + ", ".join(f"{k} {v}" for k, v in summary["setup"].items() if v is not None))
print("  programs the project calls, missing here: " + ("not checked" if summary['missing_programs'] is None else ' '.join(summary['missing_programs']) or 'none'))
if summary["doctor_exit"] is not None:
    print(f"  make doctor: exit {summary['doctor_exit']}")
if "make_test" in summary:
    print(f"  make test: exit {t['exit_status']} in {t['seconds']} s; {t['passed']} passed, {t['failed']} failed, "
          f"{t['errors']} errors, {t['skipped']} skipped; coverage {t['coverage_percent']}%")
if "make_run" in summary:
    ready = (f"the sample Ready after {r['ready_seconds']} s ({r['apply_to_ready_seconds']} s after apply)"
             if r["ready"] else "the sample NOT Ready")
    print(f"  {r['command']}: {ready}; stopped by {r['stopped_by']} in {r['stop_seconds']} s, exit "
          f"{r['exit_status']}; left {r['leftover_processes']} processes, netns {r['leftover_netns'] or 'none'}")
print(f"  wall time {summary['wall_seconds']} s; mounts left {summary['mounts_left']}; "
      f"root {summary['root']}{' (kept)' if summary['root_kept'] else ' (removed)'}; out {out}")
print(json.dumps(summary, separators=(",", ":")))
EOF
}

main() {
  local rev=HEAD repo="" root="" out="" keep="" only_setup="" shell="" skip_test="" timeout=600 go=""
  local refresh="" manager_flags=""
  local packages=""
  while (($#)); do
    case "$1" in
      --rev) rev="${2:?--rev needs a value}"; shift ;;
      --repo) repo="${2:?--repo needs a value}"; shift ;;
      --root) root="${2:?--root needs a value}"; shift ;;
      --out) out="${2:?--out needs a value}"; shift ;;
      --keep) keep=1 ;;
      --only-setup) only_setup=1 ;;
      --shell) shell=1 ;;
      --skip-test) skip_test=1 ;;
      --ready-timeout) timeout="${2:?--ready-timeout needs a value}"; shift ;;
      --manager-flags) manager_flags="${2:?--manager-flags needs a value}"; shift ;;
      --go) go="${2:?--go needs a value}"; shift ;;
      --packages) packages="${2:?--packages needs a value}"; shift ;;
      --refresh) refresh=1 ;;
      -h | --help) usage; exit 0 ;;
      *) usage >&2; log "unknown argument: $1"; exit 2 ;;
    esac
    shift
  done
  [[ "${timeout}" =~ ^[0-9]+$ ]] || { log "--ready-timeout: seconds, not '${timeout}'"; exit 2; }
  ((EUID == 0)) || { log "run as root (chroot, mounts, network namespaces)"; exit 2; }
  local tool
  for tool in git python3 tar unshare chroot findmnt stat awk; do
    command -v "${tool}" >/dev/null 2>&1 || die "the host needs ${tool}"
  done

  local start sha reuse=""
  start="$(now)"
  repo="$(realpath -- "${repo:-$(dirname -- "${SELF}")/../..}")"
  sha="$(git -C "${repo}" rev-parse --verify --quiet "${rev}^{commit}")" || { log "no commit ${rev} in ${repo}"; exit 2; }
  packages="${packages:-$(readme_packages "${repo}" "${sha}")}"
  [[ -n "${packages}" ]] || { log "README.md of ${sha} names no 'apt-get update && apt-get install -y' line"; exit 2; }
  out="${out:-${repo}/build/newcomer/$(date -u +%Y%m%dT%H%M%SZ)}"
  mkdir -p "${out}"
  out="$(realpath -- "${out}")"
  if [[ -z "${root}" ]]; then
    root="$(mktemp -d /var/tmp/rayservice-newcomer.XXXXXX)"
  else
    mkdir -p "${root}"
    root="$(realpath -- "${root}")"
    if [[ -f "${root}/.newcomer-prepared" ]]; then
      reuse=1 keep=1
      log "reusing the prepared root ${root} as it is (kept; not a fresh machine)"
      local cloned
      cloned="$(git -C "${root}${REPO_IN}" rev-parse HEAD)" || die "no clone in ${root}${REPO_IN}"
      [[ "${cloned}" == "${sha}" ]] || log "its clone is ${cloned}, not ${rev} (${sha}): testing ${cloned}"
      sha="${cloned}"
    elif [[ -n "$(ls -A -- "${root}")" ]]; then
      log "--root ${root} is neither empty nor the kept root of an earlier run"
      exit 2
    fi
  fi
  [[ "${root}" != / ]] || { log "--root / ?"; exit 2; }

  export NC_ROOT="${root}" NC_OUT="${out}" NC_STATE="${out}/state" NC_REPO="${repo}" NC_SHA="${sha}"
  export NC_ONLY_SETUP="${only_setup}" NC_SHELL="${shell}" NC_READY_TIMEOUT="${timeout}" NC_GO="${go}"
  export NC_PACKAGES="${packages}" NC_REFRESH="${refresh}" NC_REUSE="${reuse}" NC_START="${start}"
  export NC_SKIP_TEST="${skip_test}" NC_MANAGER_FLAGS="${manager_flags}"
  : >"${NC_STATE}"
  state rev "${sha}"
  state suite "${SUITE}"
  state root "${root}"
  state only_setup "$([[ -n "${only_setup}${shell}" ]] && echo 1 || echo 0)"
  state reused "$([[ -n "${reuse}" ]] && echo 1 || echo 0)"
  state skip_test "$([[ -n "${skip_test}" ]] && echo 1 || echo 0)"
  local what="(${rev})"
  [[ -z "${reuse}" ]] || what="(the clone in the reused root)"
  log "newcomer run of ${sha} ${what} in ${root}; output in ${out}"

  local interrupted="" inner=0
  trap 'interrupted=1' INT
  trap 'interrupted=1' TERM
  NC_INNER=1 unshare --mount --propagation private -- "${BASH}" "${SELF}" || inner=$?
  trap - INT TERM

  # After the run's namespace is gone: nothing mounted under the root in the host's view,
  # no process left in the root; then the root goes (unless kept) and the summary is written.
  local left pids
  left="$(findmnt -rn -o TARGET | awk -v r="${root}" '$0 == r || index($0, r "/") == 1')"
  state mounts_left "$(grep -c . <<<"${left}" || true)"
  [[ -z "${left}" ]] || log "ERROR: still mounted after the run: $(words "${left}")"
  pids="$(NC_ROOT="${root}" root_pids)"
  [[ -z "${pids}" ]] || log "ERROR: processes still in the root after the run: $(with_names "${pids}")"
  local f
  for f in build/coverage/junit.xml build/coverage/coverage.json .cluster/log .cluster/raysim.log; do
    if [[ -f "${root}${REPO_IN}/${f}" ]]; then
      cp "${root}${REPO_IN}/${f}" "${out}/$(sed 's|^\.cluster/log$|cluster.log|; s|.*/||' <<<"${f}")"
    fi
  done
  if [[ -n "${keep}" || -n "${left}" || -n "${pids}" ]]; then
    state root_kept 1
    log "root kept: ${root}"
  else
    rm -rf --one-file-system -- "${root}"
  fi

  local code=0
  if [[ -n "${interrupted}" || "${inner}" == 130 || "${inner}" == 143 ]]; then
    code=130; state interrupted 1
  elif ((inner != 0)); then
    code=3; state setup_error 1
  elif [[ -n "${only_setup}" ]]; then
    [[ "$(sed -n 's/^doctor_exit=//p' "${NC_STATE}")" =~ ^0?$ ]] || code=1
  elif [[ -z "${shell}" ]]; then
    [[ -n "${skip_test}" ]] || grep -qx 'make_test_exit=0' "${NC_STATE}" || code=1
    grep -qx 'make_run_ready=true' "${NC_STATE}" || code=1
  fi
  [[ -z "${left}" ]] || code=3
  state exit_status "${code}"
  state wall_seconds "$(since "${start}")"
  summary
  exit "${code}"
}

if [[ -n "${NC_INNER:-}" ]]; then
  unset NC_INNER
  inner_main
else
  main "$@"
fi
