"""Every DP transform's release goes to a DataFrame and to Beam's JSON and Parquet writers as it is.

For each case of ``tests/transform_cases.py`` whose output is rows (everything but contribution
bounding, which releases nothing, and ``DPFrequencies``, whose default release is a private
sketch), and for ``DPFrequencies(output="rows")`` on the same inputs, the release PCollection
is handed, with no ``Map`` in between, to ``apache_beam.dataframe.convert.to_dataframe``, to
``beam.io.WriteToJson``, to the Parquet writer of the DataFrame (``to_parquet``) and to
``WriteReleaseToParquet`` (Beam's ``WriteToParquet`` with the schema of ``parquet_schema``);
every file read back holds the released rows, field by field (JSON with
``double_precision=15``: pandas' default keeps 10 significant digits). Rows whose every field
has a concrete type (``CountEstimate``) also go to ``beam.io.WriteToParquet`` with the Arrow
schema Beam derives from the row schema.

Windowed releases carry their window with ``WithWindowBounds``, to a DataFrame and to Parquet;
``WithWindowBounds`` refuses the global window and release objects, and the Parquet writer
needs the public type of the keys. That ``output="rows"`` releases the default output's values
is tested in ``tests/privacy/test_leak_release_rows.py``.
"""

from __future__ import annotations

import glob
import json
import math
from pathlib import Path
from typing import Any

import apache_beam as beam
import pyarrow as pa
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.util import assert_that
from apache_beam.typehints import schemas

from beam_dpsketch.io import WriteReleaseToParquet, parquet_schema
from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.serialization import SketchFormatError
from beam_dpsketch.sketches.linear.private import PrivateCountSketch
from beam_dpsketch.transforms import DPFrequencies
from beam_dpsketch.transforms.records import (
    WINDOWED_TYPES,
    BoundedKeyEstimate,
    CountEstimate,
    KeyEstimate,
    ReleasedSketch,
    TimedHeavyHitters,
    WindowedBoundedKeyEstimate,
    WithWindowBounds,
)
from tests.collect import DumpToFile
from tests.transform_cases import CASES, EPS, KEYS, NEW_KEY, Case

pytest.importorskip("pandas")
pq = pytest.importorskip("pyarrow.parquet")

RUNNER = "FnApiRunner"
#: Releases that are not rows: contribution bounding keeps input rows, DPFrequencies releases a
#: private sketch (see ``beam_dpsketch.transforms.records``).
NOT_ROWS = {"bounding", "frequencies", "frequencies-turnstile"}


def _frequencies_rows(label: str, **options: Any) -> DPFrequencies:
    return DPFrequencies(
        64,
        3,
        EPS,
        noise_source=NoiseSource.insecure_for_tests(25),
        label=label,
        output="rows",
        **options,
    )


#: ``DPFrequencies(output="rows")`` on the inputs of the two frequencies cases.
ROWS_CASES: dict[str, Case] = {
    "frequencies-rows": Case(
        lambda label: _frequencies_rows(label, query_keys=["k1", "k2"]),
        CASES["frequencies"].base,
        CASES["frequencies"].extra,
    ),
    "frequencies-turnstile-rows": Case(
        lambda label: _frequencies_rows(
            label, key_fn=lambda r: r[0], weight_fn=lambda r: r[1], sketch="count-min"
        ),
        CASES["frequencies-turnstile"].base,
        CASES["frequencies-turnstile"].extra,
    ),
}
ALL_CASES = {**CASES, **ROWS_CASES}
ROW_CASES = sorted(set(ALL_CASES) - NOT_ROWS)


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
        assert all(_same(got[f], want[f]) for f in fields), [
            (f, got[f], want[f]) for f in fields if not _same(got[f], want[f])
        ]


@pytest.mark.parametrize("name", ROW_CASES)
def test_release_goes_to_dataframe_json_and_parquet_as_it_is(name: str, tmp_path: Path) -> None:
    from apache_beam.dataframe.convert import to_dataframe

    case = ALL_CASES[name]
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
        # The keys of every case are strings: key_type is the public type of its keys.
        _ = release | "Release" >> WriteReleaseToParquet(
            str(tmp_path / "rel" / "part"), key_type=str
        )
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
    for folder in ("frame", "rel", "pq") if _concrete(element_type) else ("frame", "rel"):
        files = sorted(glob.glob(str(tmp_path / folder / "part*")))
        assert files, folder
        table_rows = [row for f in files for row in pq.read_table(f).to_pylist()]
        _check(table_rows, released, fields)
    files = sorted(glob.glob(str(tmp_path / "rel" / "part*")))
    written_schema = pq.read_schema(files[0]).remove_metadata()
    assert written_schema == parquet_schema(element_type, key_type=str)


def _run(make: Any, rows: list[Any], tmp_path: Path, name: str) -> list[Any]:
    dump = DumpToFile(str(tmp_path / f"{name}.pkl"))
    options = PipelineOptions(["--direct_running_mode=in_memory"])
    with beam.Pipeline(runner=RUNNER, options=options) as p:
        release = p | beam.Create(rows, reshuffle=False) | make
        assert_that(release, dump)
    return dump.load()


def _frequencies(output: str, **options: Any) -> DPFrequencies:
    return DPFrequencies(
        64,
        3,
        EPS,
        noise_source=NoiseSource.insecure_for_tests(7),
        label="rows-or-object",
        output=output,
        **options,
    )


def test_output_must_be_object_or_rows() -> None:
    with pytest.raises(ValueError, match="^output must be one of"):
        DPFrequencies(64, 3, EPS, output="row")


WINDOW_FIELD_NAMES = ["window_start", "window_end", "pane_index"]
WINDOWED_INPUT = [beam.window.TimestampedValue(k, t / 40) for t, k in enumerate(KEYS)]


def test_windowed_rows_carry_their_window_to_a_dataframe_and_parquet(tmp_path: Path) -> None:
    from apache_beam.dataframe.convert import to_dataframe

    dump = DumpToFile(str(tmp_path / "windowed.pkl"))
    options = PipelineOptions(["--direct_running_mode=in_memory"])
    with beam.Pipeline(runner=RUNNER, options=options) as p:
        release = (
            p
            | beam.Create(WINDOWED_INPUT, reshuffle=False)
            | beam.WindowInto(beam.window.FixedWindows(5))
            | _frequencies("rows", query_keys=["k1", "k2"])
        )
        # The transform adds the bounds itself; WithWindowBounds then changes nothing.
        assert release.element_type is WindowedBoundedKeyEstimate
        assert (release | WithWindowBounds()) is release
        assert_that(release, dump)
        frame = to_dataframe(release)
        assert list(frame.columns) == [*BoundedKeyEstimate._fields, *WINDOW_FIELD_NAMES]
        frame.to_parquet(str(tmp_path / "frame" / "part"), index=False)
        _ = release | WriteReleaseToParquet(str(tmp_path / "rel" / "part"), key_type=str)
    released = dump.load()
    # 400 keys at 40 per second: windows [0, 5) and [5, 10), one on-time pane each.
    windows = sorted({(r.window_start, r.window_end, r.pane_index) for r in released})
    assert windows == [(0.0, 5.0, 0), (5.0, 10.0, 0)]
    assert sorted((r.window_start, r.key) for r in released) == [
        (0.0, "k1"),
        (0.0, "k2"),
        (5.0, "k1"),
        (5.0, "k2"),
    ]
    assert all(r.error_bound == BoundedKeyEstimate(*r[:5]).error_bound for r in released)
    fields = list(WindowedBoundedKeyEstimate._fields)
    for folder in ("frame", "rel"):
        files = sorted(glob.glob(str(tmp_path / folder / "part*")))
        _check([row for f in files for row in pq.read_table(f).to_pylist()], released, fields)


def test_window_bounds_are_refused_in_the_global_window_and_on_objects() -> None:
    p = beam.Pipeline(runner=RUNNER)
    keys = p | beam.Create(KEYS)
    with pytest.raises(ValueError, match="global window, which has no bounds"):
        _ = keys | "Rows" >> _frequencies("rows") | WithWindowBounds()
    windowed = keys | beam.WindowInto(beam.window.FixedWindows(5))
    with pytest.raises(ValueError, match='output="rows"'):
        _ = windowed | "Object" >> _frequencies("object") | "Bounds" >> WithWindowBounds()


def test_parquet_needs_the_key_type_and_refuses_other_keys(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="^key_type: the release's field 'key'"):
        parquet_schema(BoundedKeyEstimate)
    with pytest.raises(ValueError, match="^key_type must be one of"):
        WriteReleaseToParquet(str(tmp_path / "x"), key_type=float)
    with pytest.raises(ValueError, match="^row_type:"):
        parquet_schema(PrivateCountSketch, key_type=str)
    # A count row has no key: no key_type needed.
    assert parquet_schema(CountEstimate).names == ["count"]
    options = PipelineOptions(["--direct_running_mode=in_memory"])
    with pytest.raises(Exception, match="key_type: a released key is not of type int") as info:
        with beam.Pipeline(runner=RUNNER, options=options) as p:
            _ = (
                p
                | beam.Create(KEYS + NEW_KEY)
                | _frequencies("rows", query_keys=["k1", NEW_KEY[0]])
                | WriteReleaseToParquet(str(tmp_path / "keys" / "part"), key_type=int)
            )
    assert NEW_KEY[0] not in str(info.value)


def test_a_windowed_sketch_row_decodes_and_keeps_its_short_repr(tmp_path: Path) -> None:
    (row,) = _run(_frequencies("rows"), KEYS, tmp_path, "sketch-row")
    windowed = WINDOWED_TYPES[ReleasedSketch](*row, window_start=0.0, window_end=5.0, pane_index=0)
    assert type(windowed).__name__ == "WindowedReleasedSketch"
    assert windowed.decode() == row.decode()
    assert windowed.sketch_bytes() == row.sketch_bytes()
    assert row.sketch not in repr(windowed) and "window_end=5.0" in repr(windowed)
    with pytest.raises(SketchFormatError, match="^sketch must be base64 text$"):
        row._replace(sketch="not base64!").decode()
    with pytest.raises(SketchFormatError, match="^kind must be one of"):
        row._replace(kind="space-saving").decode()


def test_nested_heavy_hitter_rows_go_to_parquet(tmp_path: Path) -> None:
    # The heavy-hitter answers of DPSlidingWindowFrequencies: a list of rows per query time.
    schema = parquet_schema(TimedHeavyHitters, key_type=str)
    fields = [pa.field("key", pa.string(), False), pa.field("estimate", pa.float64(), False)]
    assert schema.field("heavy_hitters").type == pa.list_(pa.struct(fields))
    rows = [
        TimedHeavyHitters(10, [KeyEstimate("k1", 41), KeyEstimate("k2", 12.5)]),
        TimedHeavyHitters(20, []),
    ]
    options = PipelineOptions(["--direct_running_mode=in_memory"])
    with beam.Pipeline(runner=RUNNER, options=options) as p:
        _ = (
            p
            | beam.Create(rows).with_output_types(TimedHeavyHitters)
            | WriteReleaseToParquet(str(tmp_path / "hh" / "part"), key_type=str)
        )
    files = sorted(glob.glob(str(tmp_path / "hh" / "part*")))
    written = sorted((r for f in files for r in pq.read_table(f).to_pylist()), key=repr)
    assert written == [
        {
            "time": 10.0,
            "heavy_hitters": [{"key": "k1", "estimate": 41.0}, {"key": "k2", "estimate": 12.5}],
        },
        {"time": 20.0, "heavy_hitters": []},
    ]


@pytest.mark.parametrize("name", ["count", "histogram-design-b", "heavy-hitters"])
def test_rows_released_in_fixed_windows_carry_their_window(tmp_path: Path, name: str) -> None:
    from apache_beam.dataframe.convert import to_dataframe

    dump = DumpToFile(str(tmp_path / "rows.pkl"))
    keys = CASES[name].seeded_input
    timed = [beam.window.TimestampedValue(k, 10 * i / len(keys)) for i, k in enumerate(keys)]
    with beam.Pipeline(runner=RUNNER) as p:
        release = (
            p
            | beam.Create(timed, reshuffle=False)
            | beam.WindowInto(beam.window.FixedWindows(5))
            | CASES[name].make(f"windowed-{name}")
        )
        assert release.element_type in WINDOWED_TYPES.values()
        assert_that(release, dump)
        frame = to_dataframe(release)
        assert list(frame.columns)[-3:] == list(WINDOW_FIELD_NAMES)
    rows = dump.load()
    # The input spread over 10 seconds: the two 5-second windows each release their own rows.
    assert {(r.window_start, r.window_end, r.pane_index) for r in rows} == {
        (0.0, 5.0, 0),
        (5.0, 10.0, 0),
    }


@pytest.mark.parametrize("row_type", list(WINDOWED_TYPES))
def test_every_windowed_row_prints_its_fields(row_type: type) -> None:
    windowed = WINDOWED_TYPES[row_type]
    values = {name: 1 for name in windowed._fields} | {"sketch": "AAAA"}
    row = windowed(**{name: values[name] for name in windowed._fields})
    text = repr(row)
    assert text.startswith(windowed.__name__ + "(")
    assert all(f"{name}=" in text for name in WINDOW_FIELD_NAMES)
