"""One contract at the sketch layer: the same mistake raises the same exception at every layer.

A parameter of the wrong type raises ``TypeError`` and a value out of range ``ValueError``,
whether it is given to a Beam transform, to a sketch spec or to the sketch class the transform
adapts, with the same wording (everything goes through ``beam_dpsketch.checks``). Sketch kinds
are spelt ``"count-min"`` / ``"count-sketch"`` everywhere.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy.budget import PrivacyBudget
from beam_dpsketch.sketches import CountMinSketch
from beam_dpsketch.sketches.continual import LazySketch
from beam_dpsketch.sketches.intermittent import UseAndKeepSketch
from beam_dpsketch.sketches.linear import PrivateCountMinSketch, PrivateCountSketch
from beam_dpsketch.sketches.linear.calibration import linear_sensitivity, user_level
from beam_dpsketch.sketches.misra_gries import MisraGries
from beam_dpsketch.sketches.prefix_tree import PrefixTreeSketch
from beam_dpsketch.sketches.quantiles.dyadic import DyadicCountSketch
from beam_dpsketch.sketches.sliding.dpsw import DPSWSketch
from beam_dpsketch.transforms.combiners import SketchSpec
from beam_dpsketch.transforms.continual import ContinualDPSketch
from beam_dpsketch.transforms.frequencies import DPFrequencies
from beam_dpsketch.transforms.intermittent import DPIntermittentQueries, QuerySchedule
from beam_dpsketch.transforms.quantiles import DPQuantiles, QuantileTree
from beam_dpsketch.transforms.sliding import DPSlidingWindowFrequencies
from beam_dpsketch.transforms.top_keys import DPTopKeys

SRC = NoiseSource.insecure_for_tests(1)
PURE = PrivacyBudget.pure(1.0)
APPROX = PrivacyBudget.approx(0.5, 1e-6)
ZCDP = PrivacyBudget.zcdp(0.5)

# Each entry builds one object from (width, depth, seed); transforms and the sketch classes they
# adapt side by side.
BUILDERS = {
    "CountMinSketch": lambda w, d, s: CountMinSketch(w, d, s),
    "SketchSpec.count_min": lambda w, d, s: SketchSpec.count_min(w, d, s),
    "DPFrequencies": lambda w, d, s: DPFrequencies(w, d, PURE, seed=s),
    "DyadicCountSketch": lambda w, d, s: DyadicCountSketch(0, 100, w, d, s),
    "PrefixTreeSketch": lambda w, d, s: PrefixTreeSketch(w, d, 8, s),
    "DPTopKeys": lambda w, d, s: DPTopKeys(3, APPROX, width=w, depth=d, seed=s),
    "DPQuantiles": lambda w, d, s: DPQuantiles(
        [0.5],
        0,
        100,
        PURE,
        tree=QuantileTree(width=w, depth=d, seed=s),
    ),
    "LazySketch": lambda w, d, s: LazySketch(w, d, 16, APPROX, release_prefix="p", seed=s),
    "ContinualDPSketch": lambda w, d, s: ContinualDPSketch(
        w, d, 16, query_keys=[1], budget=APPROX, seed=s
    ),
    "DPSWSketch": lambda w, d, s: DPSWSketch.paper_experiments(20, ZCDP, width=w, depth=d, seed=s),
    "DPSlidingWindowFrequencies": lambda w, d, s: DPSlidingWindowFrequencies(
        20, w, d, release_every=5, budget=ZCDP, seed=s
    ),
    "UseAndKeepSketch": lambda w, d, s: UseAndKeepSketch(
        w, d, PURE, noise_source=SRC, release_prefix="p", seed=s
    ),
    "DPIntermittentQueries": lambda w, d, s: DPIntermittentQueries(
        w, d, PURE, queries=QuerySchedule([(10, [1])]), clock="positions", seed=s
    ),
}

MISTAKES = [
    # (width, depth, seed), exception, message
    (("5", 3, 0), TypeError, "width must be an int, got str"),
    ((0, 3, 0), ValueError, "width must be in [1, "),
    ((64, 2.0, 0), TypeError, "depth must be an int, got float"),
    ((64, 65, 0), ValueError, "depth must be in [1, 64], got 65"),
    ((64, 3, -1), ValueError, "seed must be in [0, "),
    ((64, 3, np.bool_(True)), TypeError, "seed must be an int, got bool"),
]


@pytest.mark.parametrize("builder", sorted(BUILDERS))
@pytest.mark.parametrize("args,exc,message", MISTAKES)
def test_shape_mistakes_raise_alike_at_every_layer(builder, args, exc, message):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        with pytest.raises(exc) as info:
            BUILDERS[builder](*args)
    assert str(info.value).startswith(message), str(info.value)


def test_counter_count_mistakes_raise_alike():
    for build in (MisraGries, SketchSpec.misra_gries):
        with pytest.raises(TypeError, match="^k must be an int, got str"):
            build("5")
        with pytest.raises(ValueError, match="^k must be in \\[1, "):
            build(0)


def test_quantile_level_mistakes_raise_alike():
    sketch = DyadicCountSketch(0, 100, 64, 3).update(np.arange(100))
    with pytest.raises(TypeError, match="^q must be a real number, got str"):
        sketch.quantile("0.5")
    with pytest.raises(TypeError, match="^quantiles must be a real number, got str"):
        DPQuantiles(["0.5"], 0, 100, PURE)
    with pytest.raises(ValueError, match="^quantiles must be in \\[0, 1\\], got 1.5"):
        DPQuantiles([1.5], 0, 100, PURE)


def test_release_option_mistakes_in_linear_sketches():
    exact = CountMinSketch(64, 3).update(np.array([1, 2, 2]))
    released = PrivateCountMinSketch.release(exact, PURE, SRC.stream("contract"))
    with pytest.raises(TypeError, match="^top must be an int, got str"):
        released.heavy_hitters([1, 2], top="5")
    with pytest.raises(ValueError, match="^top must be >= 1, got 0"):
        released.heavy_hitters([1, 2], top=0)
    with pytest.raises(TypeError, match="^threshold must be a real number, got str"):
        released.heavy_hitters([1, 2], threshold="3")
    with pytest.raises(TypeError, match="^confidence must be a real number, got str"):
        released.error_bound("0.95")
    with pytest.raises(ValueError, match="^confidence must be in \\(0, 1\\)"):
        released.error_bound(1.5)
    with pytest.raises(TypeError, match="^offset must be a bool, got int"):
        PrivateCountMinSketch.release(exact, PURE, SRC.stream("c2"), offset=1)
    with pytest.raises(TypeError, match="^k must be an int, got str"):
        user_level("2")


def test_linear_sketch_kinds_use_the_public_names():
    assert PrivateCountMinSketch.SKETCH_KIND == "count-min"
    assert PrivateCountSketch.SKETCH_KIND == "count-sketch"
    assert linear_sensitivity("count-sketch", "replace", 4) == 4.0
    with pytest.warns(DeprecationWarning, match="use kind='count-sketch'"):
        assert linear_sensitivity("count_sketch", "replace", 4) == 4.0
    with pytest.raises(ValueError, match="^kind must be one of"):
        linear_sensitivity("cs", "replace", 4)
