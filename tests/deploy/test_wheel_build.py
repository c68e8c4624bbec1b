"""``python -m build`` makes an sdist and a wheel with the C extensions; without a C compiler the
package still builds and installs, and then uses the pure-Python fallbacks, with the same results.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
from conftest import REPO, run

pytestmark = pytest.mark.deploy

EXTENSIONS = ("beam_dpsketch/murmur3", "beam_dpsketch/sketches/misra_gries/kernel")
FALLBACKS = (
    "beam_dpsketch/murmur3_fallback.py",
    "beam_dpsketch/sketches/misra_gries/kernel_fallback.py",
)

# What an installed copy reports: where it was imported from, which modules it uses, and
# results of both compiled paths (hashes of a list of str, a Misra-Gries sketch of str keys).
PROBE = r"""
import json, logging, sys
logging.basicConfig(level=logging.DEBUG, stream=sys.stderr)
import numpy as np
import beam_dpsketch
from beam_dpsketch import hashing
from beam_dpsketch.sketches import MisraGries
from beam_dpsketch.sketches.misra_gries import sketch
keys = [f"key-{r}" for r in (np.random.default_rng(3).zipf(1.3, 5000) % 400).tolist()]
h1, h2 = hashing.hash_keys(keys, 99)
print(json.dumps({
    "file": beam_dpsketch.__file__,
    "murmur3": hashing.murmur3.__name__,
    "kernel": sketch.kernel.__name__,
    "hashes": [h1.tolist()[:50], h2.tolist()[:50]],
    "sketch": MisraGries(20).update(keys).to_bytes().hex(),
}))
"""


def names(archive: Path) -> list[str]:
    if archive.suffix == ".whl":
        with zipfile.ZipFile(archive) as z:
            return z.namelist()
    with tarfile.open(archive) as t:
        return [n.split("/", 1)[1] for n in t.getnames() if "/" in n]


def installed_probe(
    archive: Path, target: Path, python: Path, env: dict[str, str] | None = None
) -> dict:
    """Install ``archive`` alone into ``target`` and run the probe against that copy with
    ``python``, an interpreter whose environment has the dependencies but not beam-dpsketch."""
    run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--disable-pip-version-check"]
        + ["--target", str(target), str(archive)],
        env={**os.environ, **(env or {})},
    )
    # Run outside the repository by the worker venv's interpreter: the copy under test is the
    # only beam_dpsketch it can import (the driver's venv holds the checkout as an editable
    # install, whose import hook would find the checkout's compiled modules).
    done = subprocess.run(
        [str(python), "-c", PROBE],
        cwd=target.parent,
        env={**os.environ, "PYTHONPATH": str(target)},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["log"] = done.stderr
    assert Path(result["file"]).is_relative_to(target)
    return result


def test_wheel_and_sdist_contents(dist: dict[str, Path]) -> None:
    wheel = names(dist["wheel"])
    for ext in EXTENSIONS:
        assert [n for n in wheel if n.startswith(ext + ".") and n.endswith(".so")], ext
    for name in (*FALLBACKS, "beam_dpsketch/pipelines/data/flights_2001_sample.parquet"):
        assert name in wheel
    # A platform wheel: it carries compiled code for this interpreter.
    assert (
        "-cp311-" in dist["wheel"].name
        or f"-cp{sys.version_info[0]}{sys.version_info[1]}-" in dist["wheel"].name
    )
    sdist = names(dist["sdist"])
    for name in ("setup.py", "pyproject.toml", *(e + ".c" for e in EXTENSIONS), *FALLBACKS):
        assert name in sdist, name
    assert not [n for n in sdist if n.endswith(".so")]


def test_installed_wheel_uses_the_extensions(
    dist: dict[str, Path], worker_venv: Path, tmp_path: Path
) -> None:
    result = installed_probe(dist["wheel"], tmp_path / "site", worker_venv / "bin" / "python")
    assert result["murmur3"] == "beam_dpsketch.murmur3"
    assert result["kernel"] == "beam_dpsketch.sketches.misra_gries.kernel"
    assert "beam_dpsketch.murmur3: compiled extension" in result["log"]


def test_without_a_compiler_the_sdist_installs_and_matches(
    dist: dict[str, Path], wheel_without_compiler: Path, worker_venv: Path, tmp_path: Path
) -> None:
    python = worker_venv / "bin" / "python"
    # The wheel pip built from the sdist with a failing compiler has no compiled module ...
    assert not [n for n in names(wheel_without_compiler) if n.endswith(".so")]
    # ... and installing the sdist directly with a failing compiler works too.
    no_cc = {"CC": "/bin/false", "LDSHARED": "/bin/false"}
    fallback = installed_probe(dist["sdist"], tmp_path / "from-sdist", python, env=no_cc)
    assert not list((tmp_path / "from-sdist").rglob("*.so"))
    assert fallback["murmur3"] == "beam_dpsketch.murmur3_fallback"
    assert fallback["kernel"] == "beam_dpsketch.sketches.misra_gries.kernel_fallback"
    # Not silent: the DEBUG line says the compiled module could not be imported.
    assert "beam_dpsketch.murmur3: pure-Python fallback" in fallback["log"]
    assert "compiled extension not importable" in fallback["log"]
    compiled = installed_probe(dist["wheel"], tmp_path / "compiled", python)
    assert fallback["hashes"] == compiled["hashes"]
    assert fallback["sketch"] == compiled["sketch"]
    assert REPO not in Path(fallback["file"]).parents
