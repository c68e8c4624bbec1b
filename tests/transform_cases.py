"""Every public DP transform on a small worst-case pair of neighbouring inputs.

``CASES`` maps a name to a :class:`Case`: a factory of the transform (given its label) and the
inputs ``base`` and ``base + extra``, where ``extra`` is the worst-case neighbour's addition (a
new key, an extreme value, or one privacy unit holding more than its contribution bound). Noise
comes from a fixed insecure test key, so two runs of a case draw the same noise. Tests that
must cover every transform (metrics, seeded-release stability) share these cases.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import apache_beam as beam
from apache_beam.transforms.window import TimestampedValue

from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import PrivacyBudget, PrivacyUnit
from beam_dpsketch.transforms import (
    BoundContributions,
    ContinualDPSketch,
    DPCount,
    DPFrequencies,
    DPHeavyHitters,
    DPHistogram,
    DPIntermittentQueries,
    DPQuantiles,
    DPSlidingWindowFrequencies,
    DPTopKeys,
    QuerySchedule,
)
from beam_dpsketch.transforms.heavy_hitters import UserPurePP
from beam_dpsketch.transforms.quantiles import QuantileTree
from beam_dpsketch.transforms.sliding import SlidingLayout

EPS = PrivacyBudget.pure(1.0)
APPROX = PrivacyBudget.approx(1.0, 1e-6)
N = 400
SELECTION_KEY = b"all-metrics-selection-key-000001"


@dataclass(frozen=True)
class Case:
    """One DP transform and its worst-case neighbouring inputs ``base`` and ``base + extra``."""

    make: Callable[[str], beam.PTransform]
    base: list[Any]
    extra: list[Any]
    #: A larger input on which the transform releases something at its fixed noise (``base`` is
    #: kept small for the neighbouring tests); ``None``: ``base``.
    seeded: list[Any] | None = None

    @property
    def seeded_input(self) -> list[Any]:
        return self.base if self.seeded is None else self.seeded


def _source() -> NoiseSource:
    return NoiseSource.insecure_for_tests(25)


KEYS = [f"k{i % 13}" for i in range(N)]
NEW_KEY = ["a-key-no-one-else-has"]
# 80 units with 2 rows each in 7 keys; the added unit has 5 rows in 5 new keys (bound: 2).
UNITS = [(f"u{u}", f"k{(u + i) % 7}") for u in range(80) for i in range(2)]
NEW_UNIT = [("the-added-unit", f"n{i}") for i in range(5)]
# Ten times the data, for the seeded-release cases whose thresholds the small inputs miss.
MANY_KEYS = [f"k{i % 13}" for i in range(10 * N)]
MANY_UNITS = [(f"u{u}", f"k{(u + i) % 7}") for u in range(800) for i in range(2)]
POSITIONED = list(enumerate(KEYS, start=1))
NEXT_POSITION = [(N + 1, NEW_KEY[0])]
TIMED = [TimestampedValue(k, t / 10 + 0.05) for t, k in enumerate(KEYS)]
NEXT_TIME = [TimestampedValue(NEW_KEY[0], N / 10 + 0.05)]


#: The histogram mechanisms at each level they support.
ELEMENT_LEVEL = ("design-b", "sequential", "merged-gshm", "merged-laplace", "select-then-count")
USER_LEVEL = ("pamg-gshm", "user-exact", "select-then-count")
#: Histogram mechanisms the leak audits run but ``tests/golden/seeded_releases.json`` does not
#: record: that file's seeded values are fixed, and a case joins :data:`CASES` only when the
#: file is regenerated as a whole.
EXTRA_ELEMENT_LEVEL = ("space-saving", "design-d", "untrusted-shards")
EXTRA_USER_LEVEL = ("user-pure-pp",)
#: Mechanisms that need a declared public parameter, built as objects (k = 16, as the cases).
DECLARED_MECHANISMS = {
    # Every key of UNITS, NEW_UNIT and MANY_UNITS.
    "user-pure-pp": lambda: UserPurePP(
        16, universe=[f"k{i}" for i in range(7)] + [f"n{i}" for i in range(5)]
    ),
}


#: Element-level mechanisms whose keys carry more than the key: ``untrusted-shards`` takes
#: ``(holder, key)`` pairs (here the holder is a public function of the key).
ELEMENT_KEY_FNS = {"untrusted-shards": lambda key: (f"h{len(key) % 3}", key)}


def _histogram(mechanism: str, user_level: bool) -> Case:
    def make(label: str) -> beam.PTransform:
        declared = DECLARED_MECHANISMS.get(mechanism)
        options: dict[str, Any] = {
            "mechanism": mechanism if declared is None else declared(),
            "noise_source": _source(),
            "label": label,
            "selection_key": SELECTION_KEY,
        }
        if mechanism in ELEMENT_KEY_FNS and not user_level:
            options["key_fn"] = ELEMENT_KEY_FNS[mechanism]
        if user_level:
            options.update(
                privacy_unit=PrivacyUnit(id=lambda r: r[0], max_contributions=2),
                key_fn=lambda r: r[1],
            )
        return DPHistogram(16, APPROX, **options)

    if user_level:
        return Case(make, UNITS, NEW_UNIT, MANY_UNITS)
    return Case(make, KEYS, NEW_KEY, MANY_KEYS)


CASES: dict[str, Case] = {
    "count": Case(lambda label: DPCount(EPS, noise_source=_source(), label=label), KEYS, NEW_KEY),
    "count-user": Case(
        lambda label: DPCount(
            EPS,
            privacy_unit=PrivacyUnit(id=lambda r: r[0], max_contributions=2),
            selection_key=SELECTION_KEY,
            noise_source=_source(),
            label=label,
        ),
        UNITS,
        NEW_UNIT,
    ),
    **{f"histogram-{m}": _histogram(m, user_level=False) for m in ELEMENT_LEVEL},
    **{f"histogram-user-{m}": _histogram(m, user_level=True) for m in USER_LEVEL},
    "heavy-hitters": Case(
        lambda label: DPHeavyHitters(
            16, APPROX, top=3, mechanism="design-b", noise_source=_source(), label=label
        ),
        KEYS,
        NEW_KEY,
        MANY_KEYS,
    ),
    "frequencies": Case(
        lambda label: DPFrequencies(
            64, 3, EPS, query_keys=["k1", "k2"], noise_source=_source(), label=label
        ),
        KEYS,
        NEW_KEY,
    ),
    "frequencies-turnstile": Case(
        lambda label: DPFrequencies(
            64,
            3,
            EPS,
            key_fn=lambda r: r[0],
            weight_fn=lambda r: r[1],
            noise_source=_source(),
            label=label,
        ),
        [(k, 1 if i % 5 else -1) for i, k in enumerate(KEYS)],
        [(NEW_KEY[0], 1)],
    ),
    "quantiles": Case(
        lambda label: DPQuantiles(
            [0.25, 0.5, 0.9],
            0,
            1023,
            EPS,
            tree=QuantileTree(width=64),
            noise_source=_source(),
            label=label,
        ),
        list(range(N)),
        [1023],
    ),
    "quantiles-records": Case(
        lambda label: DPQuantiles(
            [0.5],
            0.0,
            100.0,
            EPS,
            resolution=0.5,
            tree=QuantileTree(width=64),
            value_fn="v",
            weight_fn="w",
            noise_source=_source(),
            label=label,
        ),
        [{"v": i / 4, "w": 1} for i in range(N)],
        [{"v": 100.0, "w": 1}],
    ),
    "continual": Case(
        lambda label: ContinualDPSketch(
            16,
            3,
            1024,
            PrivacyBudget.approx(0.5, 1e-6),
            query_keys=["k1", "k2"],
            release_every=64,
            noise_source=_source(),
            label=label,
        ),
        POSITIONED,
        NEXT_POSITION,
        # Positions from 0: the continual release waits for every position before a step.
        list(enumerate(KEYS)),
    ),
    "sliding-count": Case(
        lambda label: DPSlidingWindowFrequencies(
            60,
            32,
            2,
            PrivacyBudget.zcdp(1.0),
            release_every=25,
            query_keys=["k1", "k2"],
            noise_source=_source(),
            label=label,
            layout=SlidingLayout(block=10, alpha="1/2"),
        ),
        POSITIONED,
        NEXT_POSITION,
    ),
    "sliding-time": Case(
        lambda label: DPSlidingWindowFrequencies(
            10,
            32,
            2,
            PrivacyBudget.zcdp(1.0),
            release_every=5,
            mode="time",
            origin=0,
            query_keys=["k1", "k2"],
            noise_source=_source(),
            label=label,
            layout=SlidingLayout(block=5, alpha="1/2"),
        ),
        TIMED,
        NEXT_TIME,
    ),
    "intermittent": Case(
        lambda label: DPIntermittentQueries(
            32,
            3,
            EPS,
            queries=QuerySchedule([(100, ["k1"]), (250, ["k1", "k2"]), (500, ["k2"])]),
            clock="positions",
            noise_source=_source(),
            label=label,
        ),
        POSITIONED,
        NEXT_POSITION,
    ),
    "bounding": Case(
        lambda label: BoundContributions(
            lambda r: r[0],
            2,
            key_fn=lambda r: r[1],
            max_partitions=2,
            selection_key=SELECTION_KEY,
        ),
        UNITS,
        NEW_UNIT,
    ),
}

#: The cases of :data:`EXTRA_ELEMENT_LEVEL` and :data:`EXTRA_USER_LEVEL`, and of the transforms
#: added after the golden seeded releases were recorded.
EXTRA_CASES: dict[str, Case] = {
    **{f"histogram-{m}": _histogram(m, user_level=False) for m in EXTRA_ELEMENT_LEVEL},
    **{f"histogram-user-{m}": _histogram(m, user_level=True) for m in EXTRA_USER_LEVEL},
    "top-keys": Case(
        lambda label: DPTopKeys(
            3, APPROX, width=64, depth=3, max_key_bytes=24, noise_source=_source(), label=label
        ),
        KEYS,
        NEW_KEY,
    ),
}
