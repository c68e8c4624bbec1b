"""Intermittent queries with row positions as the clock: the claimed guarantee must hold.

``DPIntermittentQueries`` declares what its times are (``clock``). Row positions shift when a row
is removed, so for the positions clock the transform must claim, and calibrate for, a relation
that positions support. These tests read the claim (epsilon, neighbouring relation, noise scale)
from the transform configured for positions, then measure the mechanism on worst-case
neighbouring inputs for a position clock **under the claimed relation**:

* replace-one (positions fixed): the row at one position has key ``a`` in ``D`` and key ``b`` in
  ``D'``; the released increments of ``a`` and ``b`` at that row's batch differ by ``+-1``;
* add/remove: ``D'`` is ``D`` without its first row, every later row renumbered, so at each batch
  boundary the first row of the next interval moves into the earlier one.

The mechanism is the core :class:`~beam_dpsketch.sketches.intermittent.sketch.UseAndKeepSketch` (what the
transform runs in its single-key step), Count-Min of depth 1, calibrated as the transform is
(cell noise of scale ``transform.noise_scale``). Trials are vectorised: one sketch holds ``TRIALS``
independent trials on disjoint cells (each trial's keys hash to cells no other key uses, and every
cell's draw is independent), so each trial's released values are distributed as in a run of its
own. The Clopper-Pearson lower bound (``privacy_audit``, failure 1e-6) must not exceed the
claimed epsilon.

A small Beam run checks the plumbing: the released noise standard deviations, epsilon and
relation of the positions clock are those of the replace-one calibration.
"""

from __future__ import annotations

import math
from fractions import Fraction

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.testing.util import assert_that
from collect import DumpToFile
from privacy_audit import FAILURE, epsilon_lower_bound

from beam_dpsketch.hashing import hash_keys, row_buckets
from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.sketches.intermittent.sketch import UseAndKeepSketch, discrete_laplace_variance
from beam_dpsketch.transforms.intermittent import DPIntermittentQueries, QuerySchedule

EPS = 1.0
WIDTH = 1 << 14
BATCHES = 6
# Batch k is at position 2k: intervals (2k-2, 2k] hold two rows each.
TIMES = [2 * k for k in range(1, BATCHES + 1)]
TRIALS = 2000
RUNS = 8  # packed sketches per neighbour: 16000 trials on each side


def _distinct_cell_keys() -> np.ndarray:
    """Integer keys whose depth-1 cells are pairwise distinct (every cell of the table once)."""
    candidates = np.arange(400_000, dtype=np.int64)
    h1, h2 = hash_keys(candidates, 0)
    cells = row_buckets(h1, h2, 1, WIDTH)[0]
    _, first = np.unique(cells, return_index=True)
    assert first.size == WIDTH
    return candidates[np.sort(first)]


KEYS = _distinct_cell_keys()


def _claim(**clock: str) -> tuple[float, str, Fraction]:
    """The transform's claimed epsilon, neighbouring relation and core epsilon ``depth/scale``."""
    schedule = QuerySchedule([(t, [0]) for t in TIMES])
    t = DPIntermittentQueries(
        WIDTH,
        1,
        PrivacyBudget.pure(EPS),
        queries=schedule,
        sketch="count-min",
        noise_source=NoiseSource.insecure_for_tests(1),
        label="claim",
        **clock,
    )
    p = beam.Pipeline(runner="FnApiRunner")
    _ = p | beam.Create([(1, 0)]) | t  # applying it charges the accountant (nothing runs)
    relation = str(t.charge.details["neighbouring_relation"])
    core_epsilon = Fraction(1) / Fraction(t.noise_scale)
    return t.charge.total_cost.epsilon, relation, core_epsilon


def _release(rows: np.ndarray, queries: np.ndarray, epsilon: Fraction, run: str) -> np.ndarray:
    """Answers ``(trials, batches, queries per trial)`` of the core fed ``rows`` by position.

    ``rows[i, j]`` is the key of trial ``i`` at position ``j + 1`` (``-1``: no row there).
    """
    source = NoiseSource.insecure_for_tests(20260611)
    sketch = UseAndKeepSketch(
        WIDTH,
        1,
        PrivacyBudget.pure(float(epsilon)),
        noise_source=source,
        release_prefix=("position-clock", run),
        kind="count_min",
    )
    positions = np.arange(1, rows.shape[1] + 1)
    previous, out = 0, []
    for t in TIMES:
        delta = rows[:, (positions > previous) & (positions <= t)].ravel()
        sketch.update(delta[delta >= 0])
        out.append(sketch.answer(queries.ravel()).estimates.reshape(queries.shape))
        previous = t
    return np.stack(out, axis=1)


def _increments(answers: np.ndarray) -> np.ndarray:
    """Released value of each queried cell minus its value at the previous batch."""
    return np.diff(answers, axis=1, prepend=0.0)


def _replace_one_events(core_epsilon: Fraction, run: int) -> tuple[int, int]:
    """Hits on ``D`` and ``D'`` for replace-one at the position of batch 3's second row.

    Per trial: keys ``a, b`` queried at every batch, filler ``f`` elsewhere. Event: the
    increment of ``a`` at batch 3 is ``>= 1`` and that of ``b`` is ``<= 0`` (likelihood ratio
    ``exp(2/scale)`` per trial, the largest a replacement allows).
    """
    a, b, f = (KEYS[i * TRIALS : (i + 1) * TRIALS] for i in range(3))
    rows = np.repeat(f[:, None], TIMES[-1], axis=1)
    where = TIMES[2] - 1  # position 6, the last row of interval 3
    d, d2 = rows.copy(), rows.copy()
    d[:, where], d2[:, where] = a, b
    queries = np.stack([a, b], axis=1)
    hits = []
    for rows_x, name in ((d, "D"), (d2, "D'")):
        inc = _increments(_release(rows_x, queries, core_epsilon, f"replace/{name}/{run}"))
        hits.append(int(np.count_nonzero((inc[:, 2, 0] >= 1) & (inc[:, 2, 1] <= 0))))
    return hits[0], hits[1]


def _removal_events(core_epsilon: Fraction, run: int) -> tuple[int, int]:
    """Hits on ``D'`` and ``D`` for removing the first row of a position-clocked stream.

    Per trial: ``D`` is ``r, f, y_1, f, y_2, ..., f, y_B`` (``y_k`` at position ``2k + 1``, the
    first row after batch ``k``); ``D'`` drops ``r``, so ``y_k`` moves to position ``2k`` and
    into batch ``k``. Event on the ``2B`` released increments that differ: at least ``2B - 2``
    of them lie on the ``D'`` side (``y_k`` up at batch ``k``, down at batch ``k + 1``, ``r``
    down at batch 1).
    """
    per = BATCHES + 2
    block = KEYS[: TRIALS * per].reshape(TRIALS, per)
    r, y, f = block[:, 0], block[:, 1 : BATCHES + 1], block[:, BATCHES + 1]
    n = TIMES[-1] + 1
    d = np.repeat(f[:, None], n, axis=1)
    d[:, 0] = r
    for j in range(BATCHES):
        d[:, TIMES[j]] = y[:, j]  # position TIMES[j] + 1
    d2 = np.full_like(d, -1)
    d2[:, :-1] = d[:, 1:]
    queries = block[:, : BATCHES + 1]  # r, y_1 .. y_B
    hits = []
    for rows_x, name in ((d2, "D'"), (d, "D")):
        inc = _increments(_release(rows_x, queries, core_epsilon, f"remove/{name}/{run}"))
        votes = (inc[:, 0, 0] <= 0).astype(np.int64)
        for j in range(BATCHES):
            votes += inc[:, j, j + 1] >= 1
            if j + 1 < BATCHES:
                votes += inc[:, j + 1, j + 1] <= 0
        hits.append(int(np.count_nonzero(votes >= 2 * BATCHES - 2)))
    return hits[0], hits[1]


def _measure(events, core_epsilon: Fraction) -> tuple[float, int, int]:
    hits = np.sum([events(core_epsilon, run) for run in range(RUNS)], axis=0)
    n = TRIALS * RUNS
    return epsilon_lower_bound(int(hits[0]), n, int(hits[1]), n, failure=FAILURE), *hits


def test_positions_clock_claim_holds_on_worst_case_neighbours():
    epsilon, relation, core_epsilon = _claim(clock="positions")
    if relation.startswith("add/remove"):
        bound, *hits = _measure(_removal_events, core_epsilon)
    else:
        assert relation.startswith("replace one element"), relation
        bound, *hits = _measure(_replace_one_events, core_epsilon)
    assert bound <= epsilon, (relation, epsilon, bound, hits)


def test_positions_clock_cannot_claim_add_remove():
    # Why the positions clock claims replace-one: at its own calibration, removing one row (which
    # renumbers the later rows) already spends measurably more than epsilon.
    epsilon, relation, core_epsilon = _claim(clock="positions")
    assert "add/remove is not covered" in relation
    bound, *hits = _measure(_removal_events, core_epsilon)
    assert bound > epsilon, (bound, hits)


def test_event_time_clock_claims_add_remove_with_times_fixed():
    epsilon, relation, core_epsilon = _claim(clock="event_time")
    assert relation == "add/remove one element; every other element's time unchanged"
    assert (epsilon, core_epsilon) == (EPS, Fraction(1))


@pytest.mark.parametrize(("clock", "scale"), [("positions", 2 * 3 / EPS), ("event_time", 3 / EPS)])
def test_beam_run_releases_the_calibration_of_its_clock(clock, scale, tmp_path):
    # Noise standard deviations depend only on public use counts: deterministic, whatever key.
    schedule = QuerySchedule([(2, ["a", "b"]), (4, ["a"])])
    out = DumpToFile(str(tmp_path / "out.pickle"))
    t = DPIntermittentQueries(
        16,
        3,
        PrivacyBudget.pure(EPS),
        queries=schedule,
        clock=clock,
        with_metadata=True,
        noise_source=NoiseSource.insecure_for_tests(2),
        label="plumbing",
    )
    with beam.Pipeline(runner="FnApiRunner") as p:
        assert_that(p | beam.Create([(1, "a"), (2, "b"), (3, "a"), (4, "c")]) | t, out)
    records = sorted(out.load(), key=lambda r: (r.time, r.key))
    assert [(r.time, r.key, r.batch) for r in records] == [(2, "a", 1), (2, "b", 1), (4, "a", 2)]
    one_use = math.sqrt(discrete_laplace_variance(Fraction(scale)))
    stds = [r.noise_std for r in records]
    assert stds == pytest.approx([one_use, one_use, one_use * math.sqrt(2)])
    assert {r.epsilon for r in records} == {EPS}
    assert t.noise_scale == pytest.approx(scale)
    assert t.neighbouring_relation in t.explain()
