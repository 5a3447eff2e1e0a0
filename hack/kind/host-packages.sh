#!/usr/bin/env bash
# The Debian packages the offline kind build needs on this machine, installed when missing
# (as root with apt-get; otherwise named, exit 1), as .ci/run installs what the tests need:
#   docker.io                    dockerd, the engine hack/kind/docker.sh starts when none answers
#   debootstrap                  the Debian root filesystems of the node, Python and Ray images
#   libseccomp-dev, pkg-config   runc's seccomp support (cgo); only while runc is not built
# Nothing is installed when everything is there. Run by `make kind-images` and by
# hack/kind/e2e.sh before an offline build; never by .ci/run (it only uses what is built).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "${HERE}/versions.env"
log() { echo "[kind-packages] $*" >&2; }
missing=()
if ! command -v dockerd >/dev/null && ! docker info >/dev/null 2>&1; then missing+=(docker.io); fi
command -v debootstrap >/dev/null || missing+=(debootstrap)
if [[ ! -x "$("${HERE}/build-binaries.sh" --print-bin-dir)/runc-${RUNC_VERSION}" ]]; then
  command -v pkg-config >/dev/null || missing+=(pkg-config)
  pkg-config --exists libseccomp 2>/dev/null || missing+=(libseccomp-dev)
fi
(( ${#missing[@]} )) || exit 0
if [[ "$(id -u)" != 0 ]] || ! command -v apt-get >/dev/null; then
  log "missing: ${missing[*]} (apt-get install ${missing[*]})"
  exit 1
fi
log "installing ${missing[*]}"
{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"; } >&2
