"""Continual releases at epsilon >= 1 work with the defaults, in the API and on the command line.

``ContinualDPSketch`` and ``beam-dpsketch continual`` default to the analytic Gaussian
calibration, which accepts every ``epsilon > 0``: at eps 1, 2 and 8 both run (FnApiRunner), their
noise scale is the default calibration's sigma, and that sigma meets ``(epsilon, delta)`` by the
exact Gaussian privacy profile (checked with scipy). The classical ``paper`` calibration stays
available and refuses ``epsilon >= 1``.
"""

from __future__ import annotations

import json
import math

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing.util import assert_that
from collect import DumpToFile
from scipy import stats

from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.pipelines.cli import main
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.sketches.continual.binary_mechanism import gaussbm_height, gaussbm_sigma
from beam_dpsketch.transforms.continual import ContinualDPSketch

DELTA = 1e-6
HORIZON = 600


def _exact_delta(l2: float, sigma: float, eps: float) -> float:
    a = l2 / (2.0 * sigma) - eps * sigma / l2
    b = -l2 / (2.0 * sigma) - eps * sigma / l2
    return float(stats.norm.cdf(a) - math.exp(eps + stats.norm.logcdf(b)))


def _lazy_cms_sigma(width: int, depth: int, eps: float) -> float:
    """Sigma of a Lazy Count-Min: trees over ``ceil(T/w)`` pushes, ``m = 2 depth``."""
    local = -(-HORIZON // width)
    sigma = gaussbm_sigma(local, 2 * depth, eps, DELTA)
    assert _exact_delta(math.sqrt(2 * depth * gaussbm_height(local)), sigma, eps) <= DELTA
    return sigma


@pytest.mark.parametrize("eps", [1.0, 2.0, 8.0])
def test_transform_default_runs_at_large_epsilon(eps, tmp_path):
    dump = DumpToFile(str(tmp_path / "out.pickle"))
    keys = (np.arange(HORIZON) % 5).astype(np.int64)
    t = ContinualDPSketch(
        32,
        3,
        HORIZON,
        PrivacyBudget.approx(eps, DELTA),
        query_keys=[0, 1],
        release_every=200,
        noise_source=NoiseSource.insecure_for_tests(3),
        with_metadata=True,
    )
    with beam.Pipeline(runner=FnApiRunner()) as p:
        assert_that(p | beam.Create([(0, keys)], reshuffle=False) | t, dump)
    releases = sorted(dump.load(), key=lambda r: r.t)
    assert [r.t for r in releases] == [200, 400, 600]
    assert {(r.epsilon, r.delta) for r in releases} == {(eps, DELTA)}
    assert releases[0].noise_scale == pytest.approx(_lazy_cms_sigma(32, 3, eps), rel=1e-12)
    assert t.display_parameters()["calibration"] == "analytic"


def test_transform_paper_calibration_still_refuses_epsilon_one():
    with pytest.raises(ValueError, match="epsilon must be < 1 with calibration='paper'"):
        ContinualDPSketch(
            32,
            3,
            HORIZON,
            PrivacyBudget.approx(1.0, DELTA),
            query_keys=[0],
            calibration="paper",
            noise_source=NoiseSource.insecure_for_tests(3),
        )


@pytest.fixture
def csv_file(tmp_path):
    path = tmp_path / "routes.csv"
    path.write_text("route\n" + "".join(f"k{i % 7}\n" for i in range(HORIZON)))
    return path


def _cli(path, eps: str, *extra: str) -> list[str]:
    return [
        "continual",
        "--input",
        str(path),
        "--column",
        "route",
        "--width",
        "32",
        "--horizon",
        str(HORIZON),
        "--release-every",
        "300",
        "--epsilon",
        eps,
        "--delta",
        str(DELTA),
        "--query",
        "k1",
        "--insecure-test-seed",
        "4",
        "--format",
        "json",
        *extra,
    ]


@pytest.mark.parametrize("eps", ["1", "2", "8"])
def test_cli_default_runs_at_large_epsilon(csv_file, capsys, eps):
    code = main(_cli(csv_file, eps))
    out, err = capsys.readouterr()
    assert code == 0, err
    envelope = json.loads(out)
    assert [r["time"] for r in envelope["rows"]] == [300, 600]
    parameters = envelope["parameters"]
    assert parameters["calibration"] == "analytic"
    assert parameters["noise_scale"] == pytest.approx(_lazy_cms_sigma(32, 3, float(eps)), rel=1e-12)


def test_cli_paper_calibration_is_an_explicit_choice(csv_file, capsys):
    code = main(_cli(csv_file, "0.5", "--calibration", "paper"))
    out, err = capsys.readouterr()
    assert code == 0, err
    assert json.loads(out)["parameters"]["calibration"] == "paper"
    code = main(_cli(csv_file, "1", "--calibration", "paper"))
    _, err = capsys.readouterr()
    assert code == 2
    assert "epsilon must be < 1 with calibration='paper'" in err.strip().splitlines()[-1]
