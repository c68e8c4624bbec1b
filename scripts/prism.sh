#!/usr/bin/env bash
# Build Apache Beam's Prism runner (a Go binary) once into a per-user cache outside the repository
# and print its path. A later call finds the binary and returns at once, so `make test` can call it
# on every run.
#
# Beam's Python PrismRunner would otherwise download a release zip from GitHub at run time; this
# script needs only Go (>= 1.26, or an older Go that may fetch that toolchain) and the Go module proxy. Override the version with PRISM_VERSION
# and the location with BEAM_DPSKETCH_PRISM_DIR.
set -euo pipefail

version="${PRISM_VERSION:-v2.77.0}"
dir="${BEAM_DPSKETCH_PRISM_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/beam-dpsketch/prism/$version}"
bin="$dir/prism"

if [[ -x "$bin" ]]; then
  echo "$bin"
  exit 0
fi

if ! command -v go >/dev/null 2>&1; then
  echo "prism.sh: Go is not installed; install Go >= 1.26 (https://go.dev/doc/install)" >&2
  exit 1
fi

mkdir -p "$dir"
# Install into a temporary directory first so that an interrupted build never leaves a partial
# binary where the check above would accept it.
tmp="$(mktemp -d "$dir/.build.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
echo "prism.sh: building prism $version into $dir (first run only)" >&2
GOBIN="$tmp" go install "github.com/apache/beam/sdks/v2/go/cmd/prism@$version" >&2
mv "$tmp/prism" "$bin"
echo "$bin"
