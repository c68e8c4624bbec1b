"""Which answers DPSlidingWindowFrequencies emits depends only on the public schedule.

Every query time ``t = every, 2 every, ...`` up to the last step holding an element is answered,
whether or not any data fell in the queried window: every query key gets an estimate, a
heavy-hitter query gets one (possibly empty) list, ``with_metadata`` gives one release per time.
Under the transform's replace-one relation (one key substituted; positions, or event times, fixed)
that schedule is public, so two neighbouring streams produce outputs with the same times and keys.
Batch runs use the FnApiRunner; the streaming run uses TestStream on the DirectRunner with
``--streaming``.
"""

from __future__ import annotations

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing import test_stream as ts
from apache_beam.testing.util import assert_that
from apache_beam.transforms.window import TimestampedValue
from collect import DumpToFile

from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.transforms import DPSlidingWindowFrequencies
from beam_dpsketch.transforms.sliding import SlidingLayout

# Event times (seconds; step s is [s - 1, s)): two events at the start, one at step 41. Every
# window of a query at 15..40 (length 10) is empty.
TIMES = [0.5, 1.5, 40.5]
QUERY_TIMES = [5, 10, 15, 20, 25, 30, 35, 40]


def transform(name: str, **kwargs) -> DPSlidingWindowFrequencies:
    options = {"query_keys": ["a", "b", "zz"], **kwargs}
    return DPSlidingWindowFrequencies(
        10,
        16,
        2,
        PrivacyBudget.zcdp(1.0),
        release_every=5,
        mode="time",
        origin=0,
        noise_source=NoiseSource.insecure_for_tests(11),
        label=name,
        layout=SlidingLayout(block=5, alpha="1/2"),
        **options,
    )


def run_batch(branches: dict, out_dir) -> dict:
    """``name -> (keys, transform)`` branches over the event TIMES, in one FnApiRunner run."""
    p = beam.Pipeline(runner="FnApiRunner")
    dumps = {}
    for name, (keys, dp) in branches.items():
        rows = [TimestampedValue(k, t) for k, t in zip(keys, TIMES, strict=True)]
        dumps[name] = DumpToFile(out_dir / f"{name}.pickle")
        out = p | f"Create{name}" >> beam.Create(rows) | f"DP{name}" >> dp
        assert_that(out, dumps[name], label=f"Check{name}")
    p.run().wait_until_finish()
    return {name: d.load() for name, d in dumps.items()}


def test_queries_over_empty_windows_are_answered_in_every_output_shape(tmp_path):
    got = run_batch(
        {
            "freq": (["a", "b", "a"], transform("freq")),
            # Replace-one neighbour: the key of the event at step 41 substituted.
            "freq_neighbour": (["a", "b", "b"], transform("freq_neighbour")),
            "hh": (
                ["a", "b", "a"],
                transform("hh", query_keys=None, candidates=["a", "b"], gamma=0.9),
            ),
            "meta": (["a", "b", "a"], transform("meta", with_metadata=True)),
        },
        tmp_path,
    )
    expected = sorted((t, k) for t in QUERY_TIMES for k in ["a", "b", "zz"])
    assert sorted((t, k) for t, k, _ in got["freq"]) == expected
    assert sorted((t, k) for t, k, _ in got["freq_neighbour"]) == expected
    # One list per query time, empty or not (the threshold 0.9 * 10 leaves most empty).
    assert sorted(t for t, _ in got["hh"]) == QUERY_TIMES
    assert all(isinstance(records, list) for _, records in got["hh"])
    meta = sorted(got["meta"], key=lambda r: r.step)
    assert [r.step for r in meta] == QUERY_TIMES
    assert all([k for k, _ in r.records] == ["a", "b", "zz"] for r in meta)


def test_streaming_answers_queries_over_empty_windows(tmp_path):
    stream = (
        ts.TestStream()
        .advance_watermark_to(0)
        .add_elements([TimestampedValue("a", 0.5), TimestampedValue("b", 1.5)])
        .advance_watermark_to(20)
        .advance_watermark_to(40)
        .add_elements([TimestampedValue("a", 40.5)])
        .advance_watermark_to(60)
        .advance_watermark_to_infinity()
    )
    dump = DumpToFile(tmp_path / "stream.pickle")
    p = beam.Pipeline(options=PipelineOptions(["--streaming"]))
    assert_that(p | stream | transform("stream"), dump)
    p.run().wait_until_finish()
    got = sorted((t, k) for t, k, _ in dump.load())
    assert got == sorted((t, k) for t in QUERY_TIMES for k in ["a", "b", "zz"])


@pytest.mark.parametrize("every", [4, 7])
def test_count_mode_answers_every_scheduled_position(tmp_path, every):
    n = 30
    dp = DPSlidingWindowFrequencies(
        10,
        16,
        2,
        PrivacyBudget.zcdp(1.0),
        release_every=every,
        query_keys=["never-seen"],
        noise_source=NoiseSource.insecure_for_tests(11),
        label=f"count-{every}",
        layout=SlidingLayout(block=5, alpha="1/2"),
    )
    dump = DumpToFile(tmp_path / "count.pickle")
    p = beam.Pipeline(runner="FnApiRunner")
    assert_that(p | beam.Create([(i, "a") for i in range(1, n + 1)]) | dp, dump)
    p.run().wait_until_finish()
    assert sorted(t for t, _, _ in dump.load()) == list(range(every, n + 1, every))
