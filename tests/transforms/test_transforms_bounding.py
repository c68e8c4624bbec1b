"""BoundContributions: per-unit, per-window bounds; reproducible keyed selection.

Runners: the FnApiRunner with ``multi_processing`` and 2 workers (the selection must agree across
processes and runs), and the in-process FnApiRunner. Results leave the pipeline as text files
(``WriteToText``), read back here, because matchers run in the workers.
"""

from __future__ import annotations

import ast
import glob
import os
from collections import Counter, defaultdict
from operator import itemgetter

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.transforms import trigger as tr
from apache_beam.transforms.window import FixedWindows, SlidingWindows, TimestampedValue

from beam_dpsketch.transforms import BoundContributions
from beam_dpsketch.transforms.bounding import canonical_id

KEY_A = b"selection-key-A-0123456789abcdef"
KEY_B = b"selection-key-B-0123456789abcdef"


@pytest.fixture(autouse=True)
def _workers_can_import_this_module(monkeypatch):
    # Functions defined here are pickled by reference; multi_processing workers are fresh
    # interpreters that need this directory on their path to unpickle them.
    here = os.path.dirname(os.path.abspath(__file__))
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join(filter(None, [here, os.environ.get("PYTHONPATH")]))
    )


def events() -> list[tuple[int, str, int]]:
    """(user, item, time): 30 users, 0-11 events each, spread over two 10 s windows."""
    rng = np.random.default_rng(7)
    out = []
    for user in range(30):
        for j in range(int(rng.integers(0, 12))):
            out.append((user, f"item{int(rng.integers(0, 6))}", int(rng.integers(0, 20)), j))
    return [(u, item, t * 100 + j) for u, item, t, j in out]  # unique element per event


def timestamped(event):
    return TimestampedValue(event, (event[2] // 100) % 20)


class WithWindow(beam.DoFn):
    def process(self, element, window=beam.DoFn.WindowParam):
        yield repr((float(window.start), element))


def run_bound(runner_args, out_dir, selection_key, **kwargs) -> list[tuple[float, tuple]]:
    options = PipelineOptions(runner_args)
    with beam.Pipeline(options=options) as p:
        (
            p
            | beam.Create(events(), reshuffle=False)
            | beam.Map(timestamped)
            | beam.WindowInto(FixedWindows(10))
            | BoundContributions(itemgetter(0), 3, selection_key=selection_key, **kwargs)
            | beam.ParDo(WithWindow())
            | beam.io.WriteToText(os.path.join(out_dir, "kept"))
        )
    lines = []
    for path in sorted(glob.glob(os.path.join(out_dir, "kept*"))):
        with open(path) as f:
            lines.extend(ast.literal_eval(line) for line in f if line.strip())
    return sorted(lines)


def input_per_unit_window() -> Counter:
    return Counter((e[0], float(((e[2] // 100) % 20) // 10 * 10)) for e in events())


MULTI = ["--runner=FnApiRunner", "--direct_running_mode=multi_processing", "--direct_num_workers=2"]


@pytest.mark.slow
def test_multi_processing_bounds_each_unit_per_window_reproducibly(tmp_path):
    first = run_bound(MULTI, str(tmp_path / "a"), KEY_A)
    again = run_bound(MULTI, str(tmp_path / "b"), KEY_A)
    other = run_bound(MULTI, str(tmp_path / "c"), KEY_B)

    available = input_per_unit_window()
    kept = Counter((e[0], start) for start, e in first)
    # No unit exceeds its bound in any window, and a unit keeps min(n, 3) of its n events.
    assert kept == Counter({k: min(n, 3) for k, n in available.items()})
    assert max(kept.values()) == 3
    # Only input elements, each at most once.
    assert set(e for _, e in first) <= set(events())
    assert len({e for _, e in first}) == len(first)
    # Same key, same selection (other process layout, other run); another key, another one.
    assert first == again
    assert first != other
    assert Counter((e[0], s) for s, e in other) == kept


def test_in_process_max_partitions_and_contributions(tmp_path):
    # Each user has 4 items x 3 events; keep at most 2 items and 4 events per user and window.
    data = [(u, f"item{i}", i * 10 + j) for u in range(12) for i in range(4) for j in range(3)]
    with beam.Pipeline(runner="FnApiRunner") as p:
        (
            p
            | beam.Create(data)
            | BoundContributions(
                itemgetter(0),
                4,
                key_fn=itemgetter(1),
                max_partitions=2,
                selection_key=KEY_A,
            )
            | beam.Map(repr)
            | beam.io.WriteToText(str(tmp_path / "kept"))
        )
    kept = [ast.literal_eval(x) for f in glob.glob(str(tmp_path / "kept*")) for x in open(f)]
    by_user = defaultdict(list)
    for e in kept:
        by_user[e[0]].append(e)
    assert set(by_user) == set(range(12))
    for _user, rows in by_user.items():
        items = {r[1] for r in rows}
        assert len(items) == 2  # min(4 distinct, max_partitions)
        assert len(rows) == 4  # min(2 items x 3 events, max_contributions)
    # Partitions are chosen per user (not the same two items for everyone).
    assert len({frozenset(r[1] for r in rows) for rows in by_user.values()}) > 1


def test_numpy_privacy_ids_and_sliding_windows_on_fnapi(tmp_path):
    # numpy scalar ids are converted to Python ints before the GroupByKey (FnApiRunner trap).
    data = [(u, k) for u in range(4) for k in range(5)]
    with beam.Pipeline(runner="FnApiRunner") as p:
        (
            p
            | beam.Create(data)
            | beam.Map(lambda e: TimestampedValue(e, 5))
            | beam.WindowInto(SlidingWindows(10, 5))
            | BoundContributions(lambda e: np.int64(e[0]), 2, selection_key=KEY_B)
            | beam.ParDo(WithWindow())
            | beam.io.WriteToText(str(tmp_path / "kept"))
        )
    kept = [ast.literal_eval(x) for f in glob.glob(str(tmp_path / "kept*")) for x in open(f)]
    per = Counter((e[0], start) for start, e in kept)
    # Time 5 is in windows [0, 10) and [5, 15): each user keeps 2 in each window, and the same
    # 2 (the ranks do not depend on the window).
    assert per == Counter({(u, s): 2 for u in range(4) for s in (0.0, 5.0)})
    for u in range(4):
        assert {e for s, e in kept if e[0] == u and s == 0.0} == {
            e for s, e in kept if e[0] == u and s == 5.0
        }


def test_bad_privacy_id_fails_naming_its_type():
    with pytest.raises(Exception, match="privacy id must be an int, str, bytes"):
        with beam.Pipeline(runner="FnApiRunner") as p:
            p | beam.Create([(None, 1)]) | BoundContributions(itemgetter(0), 1)


def test_records_need_an_element_id(tmp_path):
    data = [{"user": 1, "event": i} for i in range(5)]
    with pytest.raises(Exception, match="element_id_fn"):
        with beam.Pipeline(runner="FnApiRunner") as p:
            p | beam.Create(data) | BoundContributions(itemgetter("user"), 2)
    with beam.Pipeline(runner="FnApiRunner") as p:
        (
            p
            | "records" >> beam.Create(data)
            | BoundContributions(
                itemgetter("user"), 2, element_id_fn=itemgetter("event"), selection_key=KEY_A
            )
            | beam.Map(repr)
            | beam.io.WriteToText(str(tmp_path / "kept"))
        )
    kept = [ast.literal_eval(x) for f in glob.glob(str(tmp_path / "kept*")) for x in open(f)]
    assert len(kept) == 2 and all(k in data for k in kept)


def test_construction_errors():
    with pytest.raises(ValueError, match="max_contributions"):
        BoundContributions(itemgetter(0), 0)
    with pytest.raises(ValueError, match="together"):
        BoundContributions(itemgetter(0), 1, key_fn=itemgetter(1))
    with pytest.raises(ValueError, match="selection_key"):
        BoundContributions(itemgetter(0), 1, selection_key=b"short")
    with pytest.raises(TypeError, match="privacy_id_fn"):
        BoundContributions(3, 1)
    with pytest.raises(TypeError, match="privacy_id_fn"):
        BoundContributions(None, 1)
    # A string is the field name of dict or beam.Row elements.
    assert BoundContributions("user", 1)._privacy_id_fn({"user": "u"}) == "u"
    p = beam.Pipeline(runner="FnApiRunner")
    early = (
        p
        | beam.Create([(1, 1)])
        | beam.WindowInto(
            FixedWindows(10),
            trigger=tr.AfterWatermark(early=tr.AfterCount(1)),
            accumulation_mode=tr.AccumulationMode.ACCUMULATING,
        )
    )
    with pytest.raises(ValueError, match="fires once per window"):
        early | BoundContributions(itemgetter(0), 1)


def test_canonical_id():
    assert canonical_id(np.int64(3)) == 3 and type(canonical_id(np.int64(3))) is int
    assert canonical_id(np.str_("u")) == "u" and type(canonical_id(np.str_("u"))) is str
    assert canonical_id((np.int32(1), "a", bytearray(b"x"))) == (1, "a", b"x")
    assert canonical_id(True) == 1
    with pytest.raises(TypeError, match="float"):
        canonical_id(1.5)
    with pytest.raises(TypeError, match="list"):
        canonical_id([1])
