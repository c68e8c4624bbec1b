"""DPTopKeys in a streaming pipeline on Prism: "the top keys of the last window", no key list.

A ``TestStream`` of page views runs through ``SlidingWindows`` on Prism (``--streaming``) and on
the DirectRunner with ``--streaming`` (Beam's Python TestStream runner); both must release the
same keys and the same noisy estimates for every window (the noise is keyed by transform,
window and pane, so equal inputs draw equal noise), and each window must name its own heavy key.
"""

from __future__ import annotations

from pathlib import Path

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing import test_stream as ts
from apache_beam.testing.util import assert_that
from apache_beam.transforms.window import SlidingWindows, TimestampedValue
from collect import DumpToFile

from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.transforms import DPTopKeys

DIRECT = ["--runner=DirectRunner", "--streaming"]


def views() -> ts.TestStream:
    """Hour 0: /home is the heavy page; hour 1: /search; a tail of single views throughout."""
    s = ts.TestStream().advance_watermark_to(0)
    s = s.add_elements([TimestampedValue("/home", 100 + i % 900) for i in range(600)])
    s = s.add_elements([TimestampedValue(f"/item/{i}", 30 * i) for i in range(100)])
    s = s.advance_watermark_to(1800)
    s = s.add_elements([TimestampedValue("/search", 3700 + i % 900) for i in range(700)])
    return s.advance_watermark_to_infinity()


def run(options: list[str], path: Path) -> dict[int, list[tuple[str, float]]]:
    top = DPTopKeys(
        1,
        PrivacyBudget.approx(1.0, 1e-6),
        width=256,
        depth=3,
        max_key_bytes=8,
        noise_source=NoiseSource.insecure_for_tests(2911),
        with_metadata=True,
        label="top_pages",
    )
    out = DumpToFile(str(path))
    p = beam.Pipeline(options=PipelineOptions(options))
    released = p | views() | beam.WindowInto(SlidingWindows(3600, 1800)) | top
    assert_that(released, out)
    p.run().wait_until_finish()
    return {
        int(r.window_start): [(x.key, round(float(x.estimate), 6)) for x in r.records]
        for r in out.load()
    }


def test_sliding_top_keys_on_prism_equal_the_direct_runner(tmp_path, prism_args):
    got = run([*prism_args, "--streaming"], tmp_path / "prism.pickle")
    ref = run(DIRECT, tmp_path / "direct.pickle")
    assert got == ref
    # Windows [-1800, 1800) and [0, 3600) hold the /home hour; [1800, 5400) and [3600, 7200)
    # the /search hour.
    assert {start: keys[0][0] for start, keys in got.items() if keys} == {
        -1800: "/home",
        0: "/home",
        1800: "/search",
        3600: "/search",
    }
