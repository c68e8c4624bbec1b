"""The rows of ``DPFrequencies(output="rows")`` release nothing the default output does not.

A :class:`~beam_dpsketch.transforms.records.ReleasedSketch` decodes to exactly the sketch that
``output="object"`` releases under the same noise, declared-key rows hold exactly the released
``PrivateKeyCounts`` with their public bound, and on worst-case neighbouring inputs (one more
element of a declared key; one more record of weight 1 in the turnstile model) every field of a
row other than the noisy values and the error bound read off them is equal. The row path is
therefore post-processing of the audited sketch release (``test_dp_linear_sketch_laplace.py``,
``test_dp_public_keys.py``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.util import assert_that

from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.sketches.linear.key_counts import PrivateKeyCounts
from beam_dpsketch.sketches.linear.private import PrivateCountSketch
from beam_dpsketch.transforms import DPFrequencies
from beam_dpsketch.transforms.records import BoundedKeyEstimate, ReleasedSketch
from tests.collect import DumpToFile
from tests.transform_cases import CASES, EPS, KEYS

RUNNER = "FnApiRunner"


def _run(make: Any, rows: list[Any], tmp_path: Path, name: str) -> list[Any]:
    dump = DumpToFile(str(tmp_path / f"{name}.pkl"))
    options = PipelineOptions(["--direct_running_mode=in_memory"])
    with beam.Pipeline(runner=RUNNER, options=options) as p:
        release = p | beam.Create(rows, reshuffle=False) | make
        assert_that(release, dump)
    return dump.load()


def _frequencies(output: str, label: str = "rows-or-object", **options: Any) -> DPFrequencies:
    return DPFrequencies(
        64,
        3,
        EPS,
        noise_source=NoiseSource.insecure_for_tests(7),
        label=label,
        output=output,
        **options,
    )


#: ``output="rows"`` on a worst-case neighbouring pair: the declared keys, and the turnstile
#: sketch of the frequencies cases of ``tests/transform_cases.py``.
NEIGHBOURS: dict[str, tuple[Any, list[Any], list[Any]]] = {
    "key-rows": (
        lambda: _frequencies("rows", "neighbours", query_keys=["k1", "k2"]),
        KEYS,
        # One more element of a declared key: the neighbour that changes a released count.
        ["k1"],
    ),
    "sketch-row": (
        lambda: _frequencies(
            "rows",
            "neighbours",
            key_fn=lambda r: r[0],
            weight_fn=lambda r: r[1],
            sketch="count-min",
        ),
        CASES["frequencies-turnstile"].base,
        CASES["frequencies-turnstile"].extra,
    ),
}


def test_sketch_row_decodes_to_the_sketch_the_default_output_releases(tmp_path: Path) -> None:
    # Same label and test key: the two runs draw the same noise.
    (sketch,) = _run(_frequencies("object"), KEYS, tmp_path, "object")
    (row,) = _run(_frequencies("rows"), KEYS, tmp_path, "rows")
    assert isinstance(sketch, PrivateCountSketch)
    assert type(row) is ReleasedSketch
    assert row.decode() == sketch
    assert row.sketch_bytes() == sketch.to_bytes()
    assert (row.kind, row.width, row.depth, row.seed) == ("count-sketch", 64, 3, 0)
    assert (row.epsilon, row.rho, row.neighbouring) == (1.0, None, "add_remove")
    assert (row.noise, row.noise_scale) == (sketch.noise, sketch.scale)
    assert row.error_bound == sketch.error_bound(0.95) and row.confidence == 0.95
    assert list(row.decode().estimate(["k1", "nobody"])) == list(sketch.estimate(["k1", "nobody"]))
    assert "base64 chars" in repr(row) and row.sketch not in repr(row)


def test_key_rows_hold_the_counts_the_default_output_releases(tmp_path: Path) -> None:
    keys = ["k1", "k2", "not-in-the-data"]
    (counts,) = _run(_frequencies("object", query_keys=keys), KEYS, tmp_path, "object")
    rows = _run(_frequencies("rows", query_keys=keys), KEYS, tmp_path, "rows")
    assert isinstance(counts, PrivateKeyCounts)
    assert all(type(r) is BoundedKeyEstimate for r in rows)
    assert {r.key: r.estimate for r in rows} == counts.as_dict()
    bound = counts.error_bound(0.95)
    assert all(r.lower == r.estimate - bound and r.upper == r.estimate + bound for r in rows)
    assert all(r.confidence == 0.95 for r in rows)


def _public(row: Any) -> tuple[Any, ...]:
    """What a row of ``output="rows"`` states besides the noisy values it carries."""
    if isinstance(row, ReleasedSketch):
        return row._replace(sketch="", error_bound=0.0)
    return (row.key, row.upper - row.lower, row.confidence)


@pytest.mark.parametrize("name", sorted(NEIGHBOURS))
def test_row_metadata_is_the_same_on_neighbouring_inputs(name: str, tmp_path: Path) -> None:
    """Worst-case neighbours (a new key, or a record of weight 1 added): the row's fields other
    than the noisy sketch or counts and the error bound read off them are equal, so the rows
    release nothing the sketch does not; the sketch is the default output's (tests above)."""
    make, base_input, extra = NEIGHBOURS[name]
    base = _run(make(), base_input, tmp_path, "base")
    plus = _run(make(), base_input + extra, tmp_path, "plus")
    assert sorted(map(_public, base), key=repr) == sorted(map(_public, plus), key=repr)
    assert len(base) == len(plus) >= 1
