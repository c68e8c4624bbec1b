"""No record value leaves DPQuantiles / DPFrequencies through a failure or an error message.

Whether a pipeline succeeds is a release, and so is the text of an error: Beam logs it and
returns it as the job's error. DPQuantiles therefore maps every number into the declared bounds
one record at a time (clamping; NaN to ``upper``; the floor of a fraction in an integer domain),
which keeps the sensitivity, instead of failing on one out-of-range value; and the errors that
remain (a record that is not a number, a weight outside ``{-1, 0, 1}``, a failing user function,
the core sketches' own domain checks) name the parameter, never the value.

Runners: FnApiRunner for every pipeline. Noise keys are fresh seeded insecure test keys with the
same label in both runs of a comparison, so equal inputs give equal outputs.
"""

from __future__ import annotations

import json

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.testing.util import assert_that
from collect import DumpToFile

from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.pipelines.cli import main
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.sketches import DyadicCountSketch, FloatDomain
from beam_dpsketch.transforms import DPFrequencies, DPQuantiles
from beam_dpsketch.transforms.quantiles import QuantileTree

BUDGET = PrivacyBudget.zcdp(0.5)
QS = [0.0, 0.25, 0.5, 0.75, 1.0]
SECRET = 987654321  # a record value that must never appear in a message


def _quantiles(tmp_path, name, data, lower=0, upper=255, **kwargs):
    """DPQuantiles of ``data`` on the FnApiRunner, with seed 7 and label "q" in every run."""
    out = DumpToFile(tmp_path / f"{name}.pickle")
    transform = DPQuantiles(
        QS,
        lower,
        upper,
        BUDGET,
        tree=QuantileTree(width=16, depth=3),
        noise_source=NoiseSource.insecure_for_tests(7),
        label="q",
        **kwargs,
    )
    with beam.Pipeline(runner="FnApiRunner") as p:
        assert_that(p | beam.Create(data, reshuffle=False) | transform, out)
    return sorted((r.quantile, r.value) for r in out.load())


INSIDE = list(range(10, 250, 8))  # 30 values in [0, 255]


@pytest.mark.parametrize(
    ("outside", "mapped"),
    [
        ([SECRET, -SECRET, 2**62], [255, 0, 255]),  # clamped
        ([float("nan"), float("inf"), -float("inf"), 3.7, 300.5], [255, 255, 0, 3, 255]),
    ],
    ids=["integers", "floats"],
)
def test_values_outside_the_bounds_are_mapped_not_fatal(tmp_path, outside, mapped):
    got = _quantiles(tmp_path, "raw", INSIDE + outside)
    assert got == _quantiles(tmp_path, "mapped", INSIDE + mapped)


def test_batches_are_clamped_like_records(tmp_path):
    # numpy batches take the vectorised path; same map, same release.
    batches = [np.array(INSIDE[:15], dtype=np.int64), np.array(INSIDE[15:] + [SECRET, -7])]
    clamped = [np.array(INSIDE[:15], dtype=np.int64), np.array(INSIDE[15:] + [255, 0])]
    assert _quantiles(tmp_path, "raw", batches) == _quantiles(tmp_path, "mapped", clamped)


def test_float_domain_clamps_and_maps_nan_to_upper(tmp_path):
    inside = [0.5 * i for i in range(20)]  # [0, 9.5]
    kwargs = {"lower": 0.0, "upper": 10.0, "resolution": 0.5}
    got = _quantiles(tmp_path, "raw", [*inside, 1e9, -3.0, float("nan")], **kwargs)
    assert got == _quantiles(tmp_path, "mapped", [*inside, 10.0, 0.0, 10.0], **kwargs)


def test_refusing_out_of_range_values_is_not_configurable():
    with pytest.raises(ValueError, match="clamp"):
        DPQuantiles([0.5], 0, 10, BUDGET, clamp=False)


def test_cli_quantiles_clamps_out_of_range_values(tmp_path, capsys):
    def run(name, values):
        path = tmp_path / f"{name}.csv"
        path.write_text("delay\n" + "".join(f"{v}\n" for v in values))
        code = main(
            [
                "quantiles",
                "--input",
                str(path),
                "--column",
                "delay",
                "--q",
                "0.5",
                "1",
                "--lower",
                "0",
                "--upper",
                "255",
                "--epsilon",
                "1",
                "--format",
                "json",
                "--insecure-test-seed",
                "3",
            ]
        )
        out, err = capsys.readouterr()
        assert str(SECRET) not in err
        assert code == 0, err
        return json.loads(out)

    assert run("raw", [*INSIDE, SECRET]) == run("clamped", [*INSIDE, 255])


# --------------------------------------------------------------------------------------------
# The errors that remain name no value
# --------------------------------------------------------------------------------------------


def _failure(transform, data) -> str:
    with pytest.raises(Exception) as info:  # noqa: PT011 - Beam wraps the worker's error
        with beam.Pipeline(runner="FnApiRunner") as p:
            _ = p | beam.Create(data, reshuffle=False) | transform
    return str(info.value)


def _secret_key(record):
    return {"public": record}["secret"]  # KeyError('secret'): the message quotes its key


def test_pipeline_data_errors_name_the_parameter_not_the_value():
    text = _failure(
        DPQuantiles([0.5], 0, 255, BUDGET, value_fn=lambda r: r),
        [1, 2, f"record-{SECRET}"],
    )
    assert "value_fn" in text and str(SECRET) not in text
    text = _failure(
        DPFrequencies(64, 3, BUDGET, key_fn=lambda r: r[0], weight_fn=lambda r: r[1]),
        [("a", 1), ("b", SECRET)],
    )
    assert "weight" in text and str(SECRET) not in text
    text = _failure(DPQuantiles([0.5], 0, 255, BUDGET, value_fn=_secret_key), [1])
    assert "value_fn" in text and "secret" not in text


def test_core_domain_errors_name_the_bounds_not_the_values():
    with pytest.raises(ValueError, match=r"\[0, 255\]") as info:
        DyadicCountSketch(0, 255, 16, 3).update([5, SECRET])
    assert str(SECRET) not in str(info.value)
    with pytest.raises(TypeError) as info:
        DyadicCountSketch(0, 255, 16, 3).update([5, f"record-{SECRET}"])
    assert str(SECRET) not in str(info.value)
    domain = FloatDomain(0.0, 10.0, 0.5)
    with pytest.raises(ValueError, match="outside") as info:
        domain.to_int([1.0, float(SECRET)])
    assert str(SECRET) not in str(info.value) and "9.87" not in str(info.value)
    with pytest.raises(ValueError, match="NaN") as info:
        domain.to_int([1.0, 2.0, float("nan")])
    assert "[2]" not in str(info.value)  # nor the position of the NaN
