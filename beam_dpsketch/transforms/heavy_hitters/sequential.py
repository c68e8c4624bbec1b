"""Sequential PMG: one Algorithm-1 sketch per window on one worker, released with PMG.

Lebeda and Tětek, "Better Differentially Private Approximate Histograms and Heavy Hitters using
the Misra-Gries Sketch" (PODS 2023), Algorithm 2 (discrete variant of Section 5.2): the most
accurate release (noise ``O(1/eps)``, threshold ``O(log(1/delta)/eps)``), but one worker
sketches the whole window, and a trigger must fire once per window.

:func:`sketch_check_facts` states the budget split and error bound shared with the merged
releases (:mod:`~beam_dpsketch.transforms.heavy_hitters.merged`).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Iterable
from typing import Any

import apache_beam as beam
from apache_beam.coders import BytesCoder
from apache_beam.transforms.timeutil import TimeDomain
from apache_beam.transforms.userstate import ReadModifyWriteStateSpec, TimerSpec, on_timer

from beam_dpsketch.noise import NoiseStream
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.privacy.calibration import discrete_laplace_scale, noise_lattice
from beam_dpsketch.transforms.combiners import MergeSketchesCombineFn
from beam_dpsketch.transforms.heavy_hitters.mechanism import (
    HeavyHitterMechanism,
    design_b_windowing,
)
from beam_dpsketch.transforms.heavy_hitters.sketch_layer import (
    DEFAULT_K,
    ERROR_CONFIDENCE,
    NEIGHBOURING_ELEMENT,
    HeavyHitterRelease,
    MisraGries,
    pmg,
    pmg_parameters,
    sketch_check_calibration,
)
from beam_dpsketch.transforms.windowing_rules import WindowingRequirement

__all__ = ["Sequential", "sketch_check_facts", "sequential_sketch_fn"]


# Numbers the timer (and state) names of the sequential sketch step of each application.
_SEQUENTIAL_IDS = itertools.count()


def sequential_sketch_fn(
    k: int,
    sketch_type: type = MisraGries,
    finish: Callable[[Any, Any], Any] | None = None,
) -> beam.DoFn:
    """A stateful ``DoFn``: one Algorithm-1 sketch per window, fed every key batch of the window
    in arrival order (or one sketch of ``sketch_type``, built as ``sketch_type(k)``, with
    ``update``, ``to_bytes`` and ``from_bytes``). Each key of the input (``(key, batch)`` pairs)
    has its own sketch; it leaves as is, or as ``finish(key, sketch)`` when ``finish`` is given.

    The sketch lives in keyed state (its bytes, ``O(k)``) and leaves when the watermark passes
    the end of the window, so memory does not grow with the window's elements: a
    ``GroupByKey`` onto one key would hold all of them on the in-process runners. Each call
    makes its own class with its own timer and state names: Beam 2.77's FnApiRunner fires only
    one of two same-named watermark timers of one pipeline, so two applications sharing a name
    would silently lose a release.
    """
    n = next(_SEQUENTIAL_IDS)
    state_param = beam.DoFn.StateParam(ReadModifyWriteStateSpec(f"sketch_{n}", BytesCoder()))
    end_spec = TimerSpec(f"end_{n}", TimeDomain.WATERMARK)
    end_param = beam.DoFn.TimerParam(end_spec)

    class SequentialSketch(beam.DoFn):
        def process(
            self,
            element: tuple[int, Any],
            window=beam.DoFn.WindowParam,
            state=state_param,
            end=end_param,
        ) -> None:
            data = state.read()
            sketch = sketch_type.from_bytes(data) if data else sketch_type(k)
            state.write(sketch.update(element[1]).to_bytes())
            if not data:
                end.set(window.max_timestamp())

        @on_timer(end_spec)
        def flush(self, key=beam.DoFn.KeyParam, state=state_param) -> Iterable[Any]:
            data = state.read()
            state.clear()
            if data:
                sketch = sketch_type.from_bytes(data)
                yield sketch if finish is None else finish(key, sketch)

    return SequentialSketch()


def sketch_check_facts(
    release_epsilon: float,
    test_epsilon: float,
    count_check_epsilon: float,
    budget_epsilon: float,
) -> dict[str, Any]:
    """The budget split and per-value error bound of a sequential or merged release (public)."""
    return {
        "budget_split": (
            f"epsilon {release_epsilon:.6g} for the release + "
            f"{test_epsilon:.6g} for a noisy test of whether the sketch is exact "
            f"(min(distinct keys, k + 1), sensitivity 1) + {count_check_epsilon:.6g} for a "
            "noisy upper bound on the element count (sensitivity 1); discrete Laplace, basic "
            f"composition, {budget_epsilon:g} in all"
        ),
        "error_bound": (
            f"per key, with probability >= {ERROR_CONFIDENCE:g}: f(x) in [count - t, count + t "
            "+ s], t the noise quantile, s = 0 when the test finds the sketch exact (at most "
            "about 3k/4 distinct keys), else the noisy upper bound on rows/(k+1) (the sketch's "
            "most undercount); computed from released values only"
        ),
    }


class Sequential(HeavyHitterMechanism):
    """Sequential PMG (element level, strict mode): one sketch per window, one worker.

    All elements of a window reach a single Algorithm-1 sketch (keyed state on one worker,
    :func:`sequential_sketch_fn`), which PMG releases
    (:func:`~beam_dpsketch.sketches.misra_gries.pmg`, discrete noise on a lattice finer than a
    count, with a stated per-value error bound). Needs a trigger that fires once per window:
    several panes would reach the release as a merge of sketches, which PMG cannot release.

    Parameters
    ----------
    k
        Counters of the window's sketch (default
        :data:`~beam_dpsketch.sketches.misra_gries.DEFAULT_K`).

    Notes
    -----
    **Privacy guarantee.** ``(epsilon, delta)``-DP per release under add/remove of one element
    (Lebeda and Tětek, Algorithm 2, Lemmas 3-6); the two checks behind the error bound spend a
    small share of epsilon (basic composition).
    """

    key = "sequential"
    # The sketch lives in keyed state and leaves on an end-of-window timer.
    needs_state_and_timers = True

    def __init__(self, k: int | None = None) -> None:
        super().__init__(DEFAULT_K if k is None else k)

    def combine_fn(self) -> beam.CombineFn:
        k = self.k
        return MergeSketchesCombineFn(lambda: MisraGries(k))

    def prepare(self, keys: beam.PCollection) -> beam.PCollection:
        return (
            keys
            | "OneShard" >> beam.Map(lambda batch: (0, batch))
            | "SequentialSketch"
            >> beam.ParDo(sequential_sketch_fn(self.k))
            .with_input_types(tuple[int, Any])
            .with_output_types(MisraGries)
        )

    def release_object(
        self, accumulator: Any, budget: PrivacyBudget, stream: NoiseStream
    ) -> HeavyHitterRelease:
        return pmg(accumulator, budget, stream, error_confidence=ERROR_CONFIDENCE)

    def calibration(self, budget: PrivacyBudget) -> dict[str, Any]:
        check = sketch_check_calibration(budget.epsilon, self.k)  # type: ignore[arg-type]
        # PMG's default release: discrete noise on the lattice of step 1/g (g from the scale
        # 1/eps of the release's slice), values and threshold read in counts.
        g = noise_lattice(float(discrete_laplace_scale(1, check.release_epsilon)))
        scale, tau, _ = pmg_parameters(
            check.release_epsilon,
            budget.delta,  # type: ignore[arg-type]
            noise="discrete_laplace",
            threshold_form="union_bound",
            draws=6,
            lattice=g,
        )
        out: dict[str, Any] = {
            "noise": "discrete_laplace",
            "noise_scale": float(scale / g),
            "threshold": float(tau / g),
            "sensitivity": "Lebeda and Tetek, sensitivity lemmas of Sections 5-8, for " + self.key,
            "neighbouring_relation": NEIGHBOURING_ELEMENT,
        }
        out.update(
            sketch_check_facts(
                float(g / scale), check.test_epsilon, check.count_epsilon, budget.epsilon
            )
        )
        return out

    def windowing_requirement(self, defaulted_by: str | None = None) -> WindowingRequirement:
        # With several panes the release step could receive several Algorithm-1 sketches of
        # one window in one pane, whose merge PMG cannot release.
        design_b = design_b_windowing("mechanism 'design-b'", user_level=False)
        return dataclasses.replace(
            design_b,
            who="mechanism 'sequential'",
            triggers="once",
            why="it releases one Algorithm-1 sketch per window",
            instead=(("mechanism='design-b'", design_b),),
        )
