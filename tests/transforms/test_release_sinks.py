"""Every DP transform's release goes to a DataFrame and to Beam's JSON and Parquet writers as it is.

For each case of ``tests/transform_cases.py`` whose output is rows (everything but contribution
bounding, which releases nothing, and ``DPFrequencies``, which releases a private sketch), the
release PCollection is handed, with no ``Map`` in between, to
``apache_beam.dataframe.convert.to_dataframe``, to ``beam.io.WriteToJson`` and to the Parquet
writer of the DataFrame (``to_parquet``); every file read back holds the released rows, field by
field (JSON with ``double_precision=15``: pandas' default keeps 10 significant
digits). Rows whose every field has a concrete type (``CountEstimate``) also go to
``beam.io.WriteToParquet`` with the Arrow schema Beam derives from the row schema.
"""

from __future__ import annotations

import glob
import json
import math
from pathlib import Path
from typing import Any

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.util import assert_that
from apache_beam.typehints import schemas

from tests.collect import DumpToFile
from tests.transform_cases import CASES

pytest.importorskip("pandas")
pq = pytest.importorskip("pyarrow.parquet")

RUNNER = "FnApiRunner"
#: Releases that are not rows: contribution bounding keeps input rows, DPFrequencies releases a
#: private sketch (see ``beam_dpsketch.transforms.records``).
NOT_ROWS = {"bounding", "frequencies", "frequencies-turnstile"}
ROW_CASES = sorted(set(CASES) - NOT_ROWS)


def _concrete(element_type: Any) -> bool:
    """Whether Beam can derive an Arrow schema from the row schema (no ``Any`` field)."""
    schema = schemas.schema_from_element_type(element_type)
    return all(not f.type.HasField("logical_type") for f in schema.fields)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        return math.isclose(float(a), float(b), rel_tol=1e-12, abs_tol=0.0)
    return a == b


def _as_dicts(rows: list[Any]) -> list[dict[str, Any]]:
    return sorted((r._asdict() for r in rows), key=lambda d: json.dumps(d, default=str))


def _check(written: list[dict[str, Any]], released: list[Any], fields: list[str]) -> None:
    assert released, "the case releases something"
    assert all(list(d) == fields for d in written)
    expected = _as_dicts(released)
    written = sorted(written, key=lambda d: json.dumps(d, default=str))
    assert len(written) == len(expected)
    for got, want in zip(written, expected, strict=True):
        assert all(_same(got[f], want[f]) for f in fields), (got, want)


@pytest.mark.parametrize("name", ROW_CASES)
def test_release_goes_to_dataframe_json_and_parquet_as_it_is(name: str, tmp_path: Path) -> None:
    from apache_beam.dataframe.convert import to_dataframe

    case = CASES[name]
    dump = DumpToFile(str(tmp_path / "released.pkl"))
    options = PipelineOptions(["--direct_running_mode=in_memory"])
    with beam.Pipeline(runner=RUNNER, options=options) as p:
        release = p | beam.Create(case.seeded_input, reshuffle=False) | case.make(f"sink-{name}")
        element_type = release.element_type
        fields = list(element_type._fields)
        assert_that(release, dump)
        # pandas writes 10 significant digits unless told otherwise; 15 keeps the estimates.
        json_path = str(tmp_path / "json" / "part")
        _ = release | "Json" >> beam.io.WriteToJson(json_path, double_precision=15)
        frame = to_dataframe(release)
        assert list(frame.columns) == fields
        frame.to_parquet(str(tmp_path / "frame" / "part"), index=False)
        if _concrete(element_type):
            _ = release | "Parquet" >> beam.io.WriteToParquet(str(tmp_path / "pq" / "part"))
    released = dump.load()
    assert all(type(r) is element_type for r in released)

    lines = [
        json.loads(line)
        for f in sorted(glob.glob(str(tmp_path / "json" / "part*")))
        for line in Path(f).read_text().splitlines()
        if line.strip()
    ]
    _check(lines, released, fields)
    for folder in ("frame", "pq") if _concrete(element_type) else ("frame",):
        files = sorted(glob.glob(str(tmp_path / folder / "part*")))
        assert files, folder
        table_rows = [row for f in files for row in pq.read_table(f).to_pylist()]
        _check(table_rows, released, fields)
