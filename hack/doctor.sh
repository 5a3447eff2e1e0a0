#!/usr/bin/env bash
# Name every missing prerequisite at once, each with the command that installs it, before
# anything long starts (`make doctor`; the first step of `make test` and `make run`).
# The prerequisites are the README's: Python 3.11+ with its venv module, Go 1.26+, make,
# openssl, iproute2 (`ip`), procps, wget, CA certificates, and for `make test` root (the
# test pod network: network namespaces and veth pairs). Everything else a test or `make run` uses is installed by
# the make targets themselves and cached by version under the user's cache directory
# (the control plane, kwok, Helm, Traefik, the Gateway API CRDs, Ray, Redis, Kopf,
# KubeRay's peer build), so it is not checked here.
#
# Usage:
#   doctor.sh [test|run]    test (default): everything `make test` needs; run: what `make run`
#                           needs (root only for the local pod network, so not required)
#
# Environment: PYTHON (default python3) and GO (default go) are the interpreters checked.
# Exit status: 0 when nothing is missing; 1 after listing every missing prerequisite.
set -euo pipefail

mode="${1:-test}"
case "${mode}" in
  test|run) ;;
  -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "doctor: unknown mode '${mode}' (test or run)" >&2; exit 2 ;;
esac
PYTHON="${PYTHON:-python3}"
GO="${GO:-go}"

missing=()      # one line per missing prerequisite: what, and how to get it
packages=()     # the distribution packages that would install the missing ones

# The package manager of this machine, and a package's name under it.
if command -v apt-get >/dev/null 2>&1; then pm="apt-get update && apt-get install -y"
elif command -v dnf >/dev/null 2>&1; then pm="dnf install -y"
else pm=""; fi
package() {  # debian-name fedora-name
  if [[ "${pm}" == dnf* ]]; then packages+=("$2"); else packages+=("$1"); fi
}

version_at_least() {  # have want: "3.11.2" "3.11" -> true
  [[ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n 1)" == "$2" ]]
}

# Python 3.11+, with venv and ensurepip (Debian splits them out into python3-venv).
if ! command -v "${PYTHON}" >/dev/null 2>&1; then
  missing+=("Python 3.11+ ('${PYTHON}' is not on PATH)"); package python3 python3
  package python3-venv python3-pip
else
  pyver="$("${PYTHON}" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])')"
  if ! version_at_least "${pyver}" 3.11; then
    missing+=("Python 3.11+ (${PYTHON} is ${pyver}; set PYTHON=<a 3.11+ interpreter>)")
  elif ! "${PYTHON}" -c 'import ensurepip, venv' >/dev/null 2>&1; then
    missing+=("Python's venv module with ensurepip (${PYTHON} ${pyver} lacks it)")
    package "python3-venv" "python3-pip"
  fi
fi

# Go 1.26+: it builds the control plane, kwok, Helm and Traefik from the module proxy.
if ! command -v "${GO}" >/dev/null 2>&1; then
  missing+=("Go 1.26+ ('${GO}' is not on PATH): https://go.dev/doc/install")
else
  gover="$("${GO}" env GOVERSION 2>/dev/null | sed 's/^go//')"
  if ! version_at_least "${gover:-0}" 1.26; then
    missing+=("Go 1.26+ (${GO} is ${gover:-unknown}): https://go.dev/doc/install")
  fi
fi

# Programs the tests and the harness run.
command -v make >/dev/null 2>&1 || { missing+=("make"); package make make; }
command -v openssl >/dev/null 2>&1 || {
  missing+=("openssl (certificates for the control plane and the webhooks)"); package openssl openssl
}
command -v ip >/dev/null 2>&1 || {
  missing+=("ip, from iproute2 (the test pod network)"); package iproute2 iproute
}
for tool in flock unshare; do
  command -v "${tool}" >/dev/null 2>&1 || { missing+=("${tool}, from util-linux"); package util-linux util-linux; }
done
# hack/cluster.sh tells a live process by `ps` and finds leftovers with `pgrep`; the
# real-Ray pod network is set up with `sysctl`.
for tool in ps pgrep sysctl; do
  command -v "${tool}" >/dev/null 2>&1 || { missing+=("${tool}, from procps"); package procps procps-ng; }
done
# The real-Ray pods' readiness probes are KubeRay's `wget ... | grep success`, run here.
command -v wget >/dev/null 2>&1 || { missing+=("wget (the real-Ray pods' probes)"); package wget wget; }
# TLS to PyPI and the Go module proxy (Go reads the system's CA bundle).
if [[ ! -s "${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}" && ! -s /etc/pki/tls/certs/ca-bundle.crt ]]; then
  missing+=("the system's CA certificates (Go verifies the module proxy with them)")
  package ca-certificates ca-certificates
fi

if [[ "${mode}" == test && "$(id -u)" != 0 ]]; then
  missing+=("root: the tests build a pod network (network namespaces, veth pairs); run make test as root")
fi

if (( ${#missing[@]} == 0 )); then
  echo "doctor: every prerequisite of make ${mode} is here"
  exit 0
fi
echo "doctor: make ${mode} cannot start; missing:" >&2
for line in "${missing[@]}"; do echo "  - ${line}" >&2; done
if (( ${#packages[@]} )); then
  unique="$(printf '%s\n' "${packages[@]}" | sort -u | tr '\n' ' ')"
  if [[ -n "${pm}" ]]; then
    echo "install them with:  ${pm} ${unique% }" >&2
  else
    echo "install these packages with your distribution's package manager: ${unique% }" >&2
  fi
fi
exit 1
