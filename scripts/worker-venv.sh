#!/usr/bin/env bash
# Create, once, a Python virtual environment for Beam SDK workers that do NOT share the driver's
# environment, and print its path: apache-beam at the driver's version plus beam-dpsketch's runtime
# dependencies (read from pyproject.toml), but never beam-dpsketch itself, which must reach the
# workers through Beam's staging (--extra_package, --setup_file, --requirements_file), as on
# Dataflow, Flink or Spark. Used by tests/deploy (make test-deploy).
#
# The venv lives in a per-user cache outside the repository; a later call with the same Beam
# version and dependency list returns at once. Usage: worker-venv.sh [PYTHON] (default: the
# repository's .venv/bin/python, whose apache-beam version is matched). Override the location
# with BEAM_DPSKETCH_WORKER_VENV_DIR.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
python="${1:-$root/.venv/bin/python}"
beam="$("$python" -c 'import importlib.metadata as m; print(m.version("apache-beam"))')"
# The runtime dependencies except apache-beam, which is pinned to the driver's exact version.
deps="$("$python" - "$root/pyproject.toml" <<'PY'
import sys, tomllib
with open(sys.argv[1], "rb") as f:
    project = tomllib.load(f)
deps = [d for d in project["project"]["dependencies"] if not d.lower().startswith("apache-beam")]
# The build requirements too: Beam's boot program installs a staged sdist (--extra_package or
# --setup_file) without build isolation, so the worker builds it with what it has.
print("\n".join(deps + project["build-system"]["requires"]))
PY
)"
spec="apache-beam==$beam
$deps"
dir="${BEAM_DPSKETCH_WORKER_VENV_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/beam-dpsketch/worker-venv-$beam}"
stamp="$dir/.beam-dpsketch-complete"

if [[ -f "$stamp" && "$(cat "$stamp")" == "$spec" ]]; then
  echo "$dir"
  exit 0
fi

echo "worker-venv.sh: creating the worker venv for apache-beam $beam in $dir (first run only)" >&2
rm -rf "$dir"
"$python" -m venv "$dir"
mapfile -t reqs <<<"$spec"
"$dir/bin/python" -m pip install --quiet --disable-pip-version-check "${reqs[@]}" >&2
if (cd / && "$dir/bin/python" -I -c 'import beam_dpsketch') 2>/dev/null; then
  echo "worker-venv.sh: beam_dpsketch is importable in $dir; it must come only from staging" >&2
  exit 1
fi
# The stamp is written last: an interrupted run is redone from scratch.
printf '%s' "$spec" >"$stamp"
echo "$dir"
