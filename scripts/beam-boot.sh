#!/usr/bin/env bash
# Build Apache Beam's Python SDK worker entry point ("boot", the program that Beam's SDK container
# images run as /opt/apache/beam/boot) once into a per-user cache outside the repository and print
# its path. A later call finds the binary and returns at once.
#
# The boot program is what installs a pipeline's staged packages (--extra_package, --setup_file,
# --requirements_file) into a worker before it starts the Python SDK harness: Beam's Python worker
# pool (apache_beam.runners.worker.worker_pool_main) does not install them itself and runs this
# program when given --container_executable. Dataflow, Flink and Spark workers run the same program
# inside the SDK container. It comes from the same Go module as Prism (see scripts/prism.sh), so it
# needs only Go and the Go module proxy. Override the version with BEAM_BOOT_VERSION and the
# location with BEAM_DPSKETCH_BOOT_DIR.
set -euo pipefail

version="${BEAM_BOOT_VERSION:-v2.77.0}"
dir="${BEAM_DPSKETCH_BOOT_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/beam-dpsketch/beam-boot/$version}"
bin="$dir/boot"

if [[ -x "$bin" ]]; then
  echo "$bin"
  exit 0
fi

if ! command -v go >/dev/null 2>&1; then
  echo "beam-boot.sh: Go is not installed; install Go >= 1.26 (https://go.dev/doc/install)" >&2
  exit 1
fi

mkdir -p "$dir"
# Install into a temporary directory first so that an interrupted build never leaves a partial
# binary where the check above would accept it.
tmp="$(mktemp -d "$dir/.build.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
echo "beam-boot.sh: building Beam's Python boot program $version into $dir (first run only)" >&2
GOBIN="$tmp" go install "github.com/apache/beam/sdks/v2/python/container@$version" >&2
mv "$tmp/container" "$bin"
echo "$bin"
