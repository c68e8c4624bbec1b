"""Design B's count correction (``approx_pp`` with ``count_fraction``): audit on worst-case
neighbours.

The release audited is the one a real ``DPHeavyHitters`` (mechanism ``design-b``) calibrates
when it is applied: its per-release budget and ``count_fraction``, run through
:func:`~beam_dpsketch.sketches.misra_gries.approx_pp` on the exact aggregates of two
neighbouring inputs, each release with a fresh seeded noise stream. A half-and-half budget
split (``count_fraction = 0.5`` of ``epsilon = 2``) makes the count's share large enough that
a broken count noise shows in the whole release too.

* **The DP element count** ``N_hat`` (the count's slice ``eps_c`` of the budget). Neighbours: the
  sharded worst case of Lebeda and Tětek's Section 7 (assumption A-PART), where the extra element
  is alone in its Beam accumulator, so with it Design B folds in one more segment. Event
  ``S = {N_hat >= N(D)}``, the worst case for the discrete Laplace mechanism (probability ratio
  exactly ``e^eps_c``).
* **The whole release** (keys, corrected counts and ``N_hat``; total ``epsilon``). Neighbours: one
  shard whose sketch is exact, ``D`` holding one more element of the heavy key ``x`` than
  ``D'``: Algorithm 3's value of ``x`` moves by ``k`` and ``N`` by 1, in the same direction, so
  both mechanisms' losses add up on ``x``'s corrected count. The release reveals both parts
  (``(k+1) count_x - max(N_hat, 0)`` is the noisy Algorithm 3 value), and the event is
  ``S = {N_hat >= N(D)} and {x released with noisy Algorithm 3 value >= V_x(D)}``: its ratio is
  ``e^(eps_c + k eps_hh / (2(k+1)))``, the most this pair allows.

:func:`privacy_audit.epsilon_lower_bound` turns the counts into a lower confidence bound on the
epsilon really spent (failure probability 1e-6), which must not exceed the claim.
"""

from __future__ import annotations

import apache_beam as beam
from privacy_audit import FAILURE, epsilon_lower_bound

from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.sketches import MisraGries
from beam_dpsketch.sketches.misra_gries import PostProcessedSum, approx_pp
from beam_dpsketch.transforms import DPHeavyHitters
from beam_dpsketch.transforms.heavy_hitters import DesignB, DesignBCombineFn

EPS, DELTA = 2.0, 1e-6
COUNT_FRACTION = 0.5
K = 4
TRIALS = 3000
#: The heavy key and the other keys of the whole-release neighbours (distinct keys <= K, so the
#: single-shard sketch is exact and Algorithm 3's value of X is (K+1) f(X) - N).
X = "x"
BIG = [X] * 60 + ["y"] * 20


def _calibration() -> tuple[PrivacyBudget, float]:
    """The per-release budget and count share a real design-b DPHeavyHitters calibrates."""
    t = DPHeavyHitters(
        K,
        PrivacyBudget.approx(EPS, DELTA),
        mechanism=DesignB(K, count_fraction=COUNT_FRACTION),
        noise_source=NoiseSource.insecure_for_tests(1),
        label="design-b-count",
    )
    p = beam.Pipeline(runner="FnApiRunner")
    _ = p | beam.Create([X]) | t
    assert t.mechanism_name == "design-b"
    step = t.aggregate
    return step.per_release_budget, step.calibrated_mechanism.count_fraction


def _releases(aggregate: PostProcessedSum, budget: PrivacyBudget, cf: float, tag: str):
    for i in range(TRIALS):
        stream = NoiseSource.insecure_for_tests(i).stream(("design-b-count", tag))
        yield approx_pp(
            aggregate, PrivacyBudget.approx(budget.epsilon, budget.delta), stream, count_fraction=cf
        )


def _lone_element_aggregates() -> tuple[PostProcessedSum, PostProcessedSum]:
    """DesignBCombineFn on two accumulators; the second holds one element or nothing."""
    fn = DesignBCombineFn(K, 8)
    out = []
    for with_lone in (True, False):
        first = fn.add_input(fn.create_accumulator(), BIG)
        second = fn.create_accumulator()
        if with_lone:
            second = fn.add_input(second, ["lone"])
        out.append(fn.extract_output(fn.merge_accumulators([first, second])))
    return out[0], out[1]


def test_noisy_count_is_eps_c_private_on_a_lone_element_shard():
    budget, cf = _calibration()
    eps_c = budget.epsilon * cf
    d, d2 = _lone_element_aggregates()
    assert (d.shards, d2.shards) == (2, 1) and d.n == d2.n + 1
    hits_d = sum(r.noisy_count >= d.n for r in _releases(d, budget, cf, "d"))
    hits_d2 = sum(r.noisy_count >= d.n for r in _releases(d2, budget, cf, "d2"))
    bound = epsilon_lower_bound(hits_d, TRIALS, hits_d2, TRIALS, 0.0, FAILURE)
    assert bound <= eps_c, (hits_d, hits_d2, bound, eps_c)


def _event(release, n_d: int, v_d: int) -> bool:
    """``N_hat >= N(D)`` and X released with noisy Algorithm 3 value ``>= V_X(D)``."""
    if release.noisy_count < n_d:
        return False
    count = release.as_dict().get(X)
    if count is None:
        return False
    return round(count * (K + 1)) - max(release.noisy_count, 0) >= v_d


def test_whole_corrected_release_is_private_when_the_heavy_key_loses_an_element():
    budget, _ = _calibration()
    budget_eps = budget.epsilon
    d = PostProcessedSum.from_sketch(MisraGries(K).update(BIG))
    d2 = PostProcessedSum.from_sketch(MisraGries(K).update(BIG[1:]))
    v_d = d.scaled_counts()[X]
    # The worst case of this pair: X's value moves by k, and N by 1, the same way.
    assert v_d - d2.scaled_counts()[X] == K and d.n == d2.n + 1
    hits_d = sum(_event(r, d.n, v_d) for r in _releases(d, budget, COUNT_FRACTION, "whole-d"))
    hits_d2 = sum(_event(r, d.n, v_d) for r in _releases(d2, budget, COUNT_FRACTION, "whole-d2"))
    bound = epsilon_lower_bound(hits_d, TRIALS, hits_d2, TRIALS, budget.delta, FAILURE)
    assert 0.0 < bound <= budget_eps, (hits_d, hits_d2, bound)
