"""DP SpaceSaving: worst-case neighbours (Clopper-Pearson), error bounds, and against PMG.

The worst case for the release is a label monitored on one side only with the largest count
the structure allows, ``floor(n/k) + 1``: only the cut keeps it hidden. Its release is the
event audited, with every count of the other labels as a second family of events.
"""

from __future__ import annotations

import itertools
from collections import Counter

import numpy as np
import pytest
from privacy_audit import FAILURE, epsilon_lower_bound

from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.sketches.misra_gries import MisraGries, pmg
from beam_dpsketch.sketches.space_saving import CUTS, SpaceSaving, dp_space_saving

SRC = NoiseSource.insecure_for_tests(2930)
EPS, DELTA = 1.0, 1e-3
RUNS = 3000


def worst_pair(k: int) -> tuple[list[int], list[int], int]:
    """The first (stream, one element removed) pair of small streams over 4 keys where a label
    monitored on one side only has count ``floor(n/k) + 1``: (side with it, other side, label)."""
    for length in range(2, 8):
        for big in itertools.product(range(4), repeat=length):
            for i in range(length):
                small = big[:i] + big[i + 1 :]
                for side, other in ((big, small), (small, big)):
                    a = SpaceSaving(k).update(list(side)).to_dict()
                    b = SpaceSaving(k).update(list(other)).to_dict()
                    for x in set(a) - set(b):
                        if a[x] == len(side) // k + 1:
                            return list(side), list(other), x
    raise AssertionError("no worst pair found")


@pytest.mark.parametrize("cut", CUTS)
def test_a_label_on_one_side_only_stays_hidden(cut):
    side, other, label = worst_pair(2)
    budget = PrivacyBudget.approx(EPS, DELTA)

    def releases(stream: list[int], tag: str) -> list[dict]:
        sketch = SpaceSaving(2).update(stream)
        return [
            dict(dp_space_saving(sketch, budget, SRC.stream((cut, tag, r)), cut=cut).items)
            for r in range(RUNS)
        ]

    on_side, on_other = releases(side, "side"), releases(other, "other")
    events = {"unstable label released": lambda out: label in out}
    for x in range(4):
        for v in range(0, 6):
            events[f"{x} released with value >= {v}"] = lambda out, x=x, v=v: out.get(x, -1) >= v
    # Every event, both directions: the failure rate is shared over all of them.
    failure = FAILURE / (2 * len(events))
    for name, event in events.items():
        h1 = sum(event(o) for o in on_side)
        h2 = sum(event(o) for o in on_other)
        for a, b in ((h1, h2), (h2, h1)):
            bound = epsilon_lower_bound(a, RUNS, b, RUNS, DELTA, failure=failure)
            assert bound <= EPS, (name, h1, h2, bound)


def zipf_stream(n: int, s: float, seed: int) -> list[int]:
    keys = np.random.default_rng(seed).zipf(s, size=n)
    return keys[keys < 10**6].tolist()


@pytest.mark.parametrize("cut", CUTS)
def test_released_values_are_within_their_bounds(cut):
    # Each bound holds at 95 % per value; the values of a release share the cut's draw, so
    # count coverage over many releases and values.
    budget = PrivacyBudget.approx(1.0, 1e-6)
    stream = zipf_stream(20_000, 1.3, seed=1)
    truth = Counter(stream)
    sketch = SpaceSaving(64).update(stream)
    covered = total = 0
    for r in range(40):
        released = dp_space_saving(sketch, budget, SRC.stream(("bounds", cut, r)), cut=cut)
        for row in released.estimates():
            total += 1
            covered += row.lower <= truth[row[0]] <= row.upper
    assert total > 200
    assert covered / total >= 0.95


def are(released: dict, truth: Counter) -> float:
    """Average relative error of the released values."""
    return float(np.mean([abs(v - truth[x]) / truth[x] for x, v in released.items()]))


def test_against_sequential_pmg_at_equal_k_and_budget():
    # SpaceSaving over-counts by at most its minimum where Misra-Gries under-counts by up to
    # n/(k+1): the released values are far closer to the truth, and every true heavy hitter is
    # kept. With the reporting cut n/k of Holland's experiments (2k counters each), PMG's
    # under-counts drop true heavy hitters below the cut at low skew; SpaceSaving keeps them.
    budget = PrivacyBudget.approx(1.0, 1e-6)
    recall: dict[str, list[float]] = {"ss": [], "pmg": []}
    for seed, (s, k) in enumerate(((1.1, 64), (1.3, 64), (1.5, 128))):
        stream = zipf_stream(50_000, s, seed)
        truth = Counter(stream)
        n = len(stream)
        ss = SpaceSaving(2 * k).update(stream)
        mg = MisraGries(2 * k).update(stream)
        heavy = {x for x, f in truth.items() if f >= n / k}
        for r in range(3):
            got = dict(dp_space_saving(ss, budget, SRC.stream(("vs", seed, r))).items)
            base = dict(pmg(mg, budget, SRC.stream(("pmg", seed, r))).items)
            assert heavy <= set(got)
            assert are(got, truth) < are(base, truth) / 2
            for name, rel in (("ss", got), ("pmg", base)):
                reported = {x: v for x, v in rel.items() if v >= n / k}
                recall[name].append(len(heavy & set(reported)) / len(heavy))
                if name == "ss":
                    assert are(reported, truth) < 0.01
    assert all(a >= b for a, b in zip(recall["ss"], recall["pmg"], strict=True))
    assert min(recall["ss"]) == 1.0 > min(recall["pmg"])
