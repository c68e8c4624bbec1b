"""Errors of the position-clocked transforms name the parameter, never a value from the data.

An exception message leaves the pipeline (logs, the runner's job status), outside the release
boundary. Bad input here carries distinctive values (a position 98765, a batch of 1234 times,
a key 2**32 + 4242); the messages must still explain what is wrong, without echoing them.
"""

from __future__ import annotations

import apache_beam as beam
import numpy as np
import pytest

from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.sketches.continual.heavy_hitters import HierarchicalLazySketch
from beam_dpsketch.transforms.continual import ContinualDPSketch
from beam_dpsketch.transforms.intermittent import DPIntermittentQueries, QuerySchedule


def _pipeline_error(elements: list, transform: beam.PTransform) -> str:
    p = beam.Pipeline(runner="FnApiRunner")
    _ = p | beam.Create(elements, reshuffle=False) | transform
    with pytest.raises(Exception) as info:
        p.run().wait_until_finish()
    return str(info.value)


def _continual(horizon: int) -> ContinualDPSketch:
    return ContinualDPSketch(
        16,
        3,
        horizon,
        PrivacyBudget.approx(0.5, 1e-6),
        query_keys=["a"],
        sketch="count-min",
        release_every=horizon,
        noise_source=NoiseSource.insecure_for_tests(1),
    )


@pytest.mark.parametrize(
    ("horizon", "elements", "secret", "says"),
    [
        (100, [(98765, "a")], "98765", "beyond the declared horizon T=100"),
        (100, [(-98765, "a")], "98765", "position must be an int >= 0"),
        (10**6, [(87654, "a"), (87654, "b")], "87654", "a time step arrived twice"),
        (10**6, [(0, np.arange(87700)), (87654, "a")], "87654", "arrived after it was processed"),
    ],
)
def test_continual_element_errors_do_not_echo_positions(horizon, elements, secret, says):
    message = _pipeline_error(elements, _continual(horizon))
    assert says in message
    assert secret not in message


def test_intermittent_batch_error_does_not_echo_counts():
    times, keys = np.arange(1, 1235, dtype=np.int64), np.arange(1233, dtype=np.int64)
    t = DPIntermittentQueries(
        32,
        3,
        PrivacyBudget.pure(1.0),
        queries=QuerySchedule([(10, [1])]),
        clock="positions",
        noise_source=NoiseSource.insecure_for_tests(1),
    )
    message = _pipeline_error([(times, keys)], t)
    assert "as many times as keys" in message
    assert "1234" not in message and "1233" not in message


def test_heavy_hitter_key_range_error_does_not_echo_keys():
    sketch = HierarchicalLazySketch(
        32,
        8,
        64,
        3,
        100,
        PrivacyBudget.approx(0.5, 1e-3),
        release_prefix="hh",
        noise_source=NoiseSource.insecure_for_tests(1),
    )
    with pytest.raises(ValueError) as info:
        sketch.update_batch([3, 2**32 + 4242])
    assert "[0, 2**32)" in str(info.value)
    assert "4242" not in str(info.value) and str(2**32 + 4242) not in str(info.value)
