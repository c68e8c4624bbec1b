"""User-level PURE_PP: worst-case neighbours, checked exactly, and its utility bound.

The release puts discrete Laplace of integer scale ``s`` on the integer values ``V`` of every key
of the declared universe, then keeps the top ``k``: the density ratio of the full noisy vector
between neighbours is at most ``exp(||V - V'||_1 / s)``, and the top ``k`` is post-processing.
So pure ``eps``-DP holds exactly when the largest L1 distance between neighbouring flattened
streams (one user's elements removed) is at most ``eps * s``. The search below runs over a
worst case and seeded random small user streams; it shows that the element-level scale ``2(k+1)/eps`` is not enough,
and that the release's own scale (``2m(k+1)/eps``, Lebeda and Tetek, Section 8, Lemma 4) is.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter

import numpy as np

from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.sketches.misra_gries import (
    MisraGries,
    Universe,
    flatten_users,
    postprocess,
    user_level_pure_pp,
)

SRC = NoiseSource.insecure_for_tests(2929)


def l1(a: dict, b: dict) -> int:
    return sum(abs(a.get(x, 0) - b.get(x, 0)) for x in set(a) | set(b))


def values(users: list[list[int]], k: int) -> dict:
    """The integer values ``V = (k+1) cbar`` of the flattened stream's Algorithm-3 sketch."""
    return postprocess(MisraGries(k).update(flatten_users(users))).scaled_counts()


#: A worst case found by search (k = 3, m = 3): removing the third user moves V by 11, more
#: than the element-level bound 2(k+1) = 8 allows.
WITNESS = [[5], [1, 2], [0, 3, 5], [1, 3, 4], [3, 4], [1, 3, 4], [1, 3, 4], [0, 1]]


def worst_l1(k: int, m: int, symbols: int, tries: int, seed: int) -> int:
    """The largest ``||V - V'||_1`` over the witness and ``tries`` seeded random streams of up
    to 8 users (each a set of 1..m symbols), every user removed in turn."""
    rng = np.random.default_rng(seed)
    sets = [
        list(c) for size in range(1, m + 1) for c in itertools.combinations(range(symbols), size)
    ]
    streams = [WITNESS] + [
        [sets[int(i)] for i in rng.integers(0, len(sets), size=int(rng.integers(1, 9)))]
        for _ in range(tries)
    ]
    worst = 0
    for users in streams:
        full = values(users, k)
        for i in range(len(users)):
            worst = max(worst, l1(full, values(users[:i] + users[i + 1 :], k)))
    return worst


def test_release_scale_covers_the_worst_user_and_the_element_scale_does_not():
    k, m, eps = 3, 3, 1.0
    worst = worst_l1(k, m, symbols=6, tries=3000, seed=29)
    # Lemma 4: strictly below 2m on cbar, i.e. below 2m(k+1) on V.
    assert worst < 2 * m * (k + 1)
    sketch = MisraGries(k).update(flatten_users(WITNESS))
    released = user_level_pure_pp(
        sketch, Universe.from_keys(range(6)), PrivacyBudget.pure(eps), m, SRC.stream("scale")
    )
    scale = released.details["integer_scale"]
    # The density ratio of the whole noisy vector, at worst neighbours: within e^eps.
    assert worst / scale <= eps * (1 + 1e-9)
    # The element-level scale 2(k+1)/eps (the broken calibration) exceeds e^eps there.
    assert worst / (2 * (k + 1) / eps) > eps
    assert released.privacy_unit == "user" and released.delta == 0.0
    assert released.details["m"] == m and "m=3" in released.neighbouring


def zipf_users(n_users: int, m: int, seed: int) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n_users):
        keys = np.minimum(rng.zipf(1.3, size=m), 200) - 1
        out.append(sorted(set(keys.tolist())))
    return out


def test_every_value_is_within_the_stated_bound():
    # Utility of PURE_PP at user level (Section 6 bound with noise 2m/eps): with probability
    # >= 1 - beta every draw is within B = 2m ln(u/beta)/eps; then a released key is within
    # N/(k+1) + B of its count of units, and an unreleased key has count <= N/(k+1) + 2B.
    k, m, eps, u, beta = 16, 3, 1.0, 200, 1e-6
    universe = Universe.from_keys(range(u))
    bound_b = 2 * m * math.log(u / beta) / eps
    for run in range(5):
        users = zipf_users(2000, m, seed=run)
        flat = flatten_users(users)
        truth = Counter(flat)
        slack = len(flat) / (k + 1)
        released = user_level_pure_pp(
            MisraGries(k).update(flat),
            universe,
            PrivacyBudget.pure(eps),
            m,
            SRC.stream(("utility", run)),
        )
        got = dict(released.items)
        assert len(got) == k
        for x, est in got.items():
            assert abs(est - truth[x]) <= slack + bound_b
        for x in range(u):
            if x not in got:
                assert truth[x] <= slack + 2 * bound_b
        # The heaviest keys are released.
        assert {0, 1} <= set(got)
