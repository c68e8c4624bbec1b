"""A small DP pipeline run as a script, for tests/deploy/test_staged_worker.py.

``python staged_pipeline.py OUT_DIR [BEAM PIPELINE OPTIONS...]`` runs a DP count and DP
frequencies of declared keys (releases that do not depend on how a runner bundles) over 6,000
Zipf-distributed string keys with a fixed insecure test noise key, and writes two files into
``OUT_DIR``:

* ``releases.txt``: the values of every released element, one per line;
* ``where.txt``: one JSON line per worker bundle saying where that worker imported
  ``beam_dpsketch`` from (its ``__file__``), which MurmurHash3 and Misra-Gries modules it uses,
  its interpreter (``sys.prefix``, ``sys.executable``), and results of both modules on the
  same keys (hashes and a serialized Misra-Gries sketch).

It runs as ``__main__`` so that Beam pickles the script's own functions by value: a worker that
does not share the driver's environment needs nothing from the repository but what Beam stages.
The DP transforms themselves are pickled by reference, so a worker must import ``beam_dpsketch``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import apache_beam as beam
import numpy as np
from apache_beam.options.pipeline_options import PipelineOptions

from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.transforms import DPCount, DPFrequencies

N_KEYS = 6000


def keys() -> list[str]:
    """Zipf-distributed keys; a fixed seed, so every run has the same input."""
    ranks = np.random.default_rng(7).zipf(1.3, N_KEYS) % 500
    return [f"key-{r}" for r in ranks.tolist()]


def describe(element: Any) -> str:
    """The released values of ``element``: its ``as_dict()`` when it has one (a frequency
    release, whose ``repr`` shows only its calibration), its fields when it is a row, else its
    ``repr``."""
    as_dict = getattr(element, "as_dict", None)
    if callable(as_dict):
        return f"{type(element).__name__}: {sorted(as_dict().items())!r}"
    # A schema'd row: by field name, since a runner that decodes it in another process may give
    # it a generated class name.
    fields = getattr(element, "_fields", None)
    if fields is not None:
        return f"row: {dict(zip(fields, element, strict=True))!r}"
    return repr(element)


def where(_: Any) -> Iterator[str]:
    """Where this worker process imported the library from (runs on the worker)."""
    import beam_dpsketch
    from beam_dpsketch import hashing
    from beam_dpsketch.sketches import MisraGries
    from beam_dpsketch.sketches.misra_gries import sketch

    # Both compiled paths (or their fallbacks) on this worker: MurmurHash3 over a list of str and
    # the Misra-Gries update loop (a batch of at least 1,024 keys). The driver compares them.
    h1, h2 = hashing.hash_keys(keys(), 2026)

    yield json.dumps(
        {
            "file": beam_dpsketch.__file__,
            "murmur3": hashing.murmur3.__name__,
            "kernel": sketch.kernel.__name__,
            "prefix": sys.prefix,
            "executable": sys.executable,
            "hashes": [int(h1.sum(dtype=np.uint64)), int(h2.sum(dtype=np.uint64))],
            "misra_gries": MisraGries(32).update(keys()).to_bytes().hex(),
        }
    )


def main(argv: list[str]) -> None:
    out = Path(argv[0])
    out.mkdir(parents=True, exist_ok=True)
    options = PipelineOptions(argv[1:])
    noise = NoiseSource.insecure_for_tests(25)
    with beam.Pipeline(options=options) as p:
        data = p | "Keys" >> beam.Create(keys())
        count = data | "Count" >> DPCount(
            PrivacyBudget.pure(1.0), noise_source=noise, label="staged-count"
        )
        freqs = data | "Frequencies" >> DPFrequencies(
            256,
            3,
            PrivacyBudget.pure(1.0),
            query_keys=["key-1", "key-2", "key-3"],
            noise_source=noise,
            label="staged-frequencies",
        )
        (
            (count, freqs)
            | "Releases" >> beam.Flatten()
            | "Describe" >> beam.Map(describe)
            | "WriteReleases"
            >> beam.io.WriteToText(str(out / "releases"), ".txt", shard_name_template="")
        )
        (
            p
            | "One" >> beam.Create([None])
            | "Where" >> beam.FlatMap(where)
            | "WriteWhere"
            >> beam.io.WriteToText(str(out / "where"), ".txt", shard_name_template="")
        )


if __name__ == "__main__":
    main(sys.argv[1:])
