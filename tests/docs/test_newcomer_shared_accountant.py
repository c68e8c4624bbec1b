"""A newcomer's task, written from the docs only: three releases on one shared accountant.

The README's quick start says to give each release its own ``budget`` and one shared
``accountant=dps.PrivacyAccountant(total)``; ``docs/guide/python-api.md`` shows it, and says that ``dps.explain_pipeline(accountant)`` states the cost
of every release and that the accountant refuses a pipeline over budget when it is built.
"""

from __future__ import annotations

import apache_beam as beam
import pytest
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing.util import assert_that

import beam_dpsketch as dps


def flights() -> list[dict[str, object]]:
    """Flight records: a route, an origin and a delay in minutes (public range -200..1800)."""
    routes = ["LAX-LAS"] * 400 + ["ORD-LGA"] * 300 + [f"R{i}" for i in range(100)]
    return [
        {"route": route, "origin": route.split("-")[0], "delay": (i * 7) % 120}
        for i, route in enumerate(routes)
    ]


def test_two_heavy_hitter_releases_and_quantiles_share_one_accountant() -> None:
    """The three releases are charged to one budget, and the report lists all three."""
    accountant = dps.PrivacyAccountant(dps.PrivacyBudget.approx(3.0, 3e-6))
    noise = dps.NoiseSource.insecure_for_tests(27)

    def top_two(field: str, label: str) -> dps.DPHeavyHitters:
        return dps.DPHeavyHitters(
            budget=dps.PrivacyBudget.approx(1.0, 1e-6),
            accountant=accountant,
            key_fn=field,
            top=2,
            label=label,
            noise_source=noise,
        )

    routes = top_two("route", "TopRoutes")
    origins = top_two("origin", "TopOrigins")
    delays = dps.DPQuantiles(
        [0.5, 0.9],
        lower=-200,
        upper=1800,
        budget=dps.PrivacyBudget.approx(1.0, 1e-6),
        accountant=accountant,
        value_fn="delay",
        label="Delays",
        noise_source=noise,
    )
    with beam.Pipeline(runner=FnApiRunner()) as p:
        rows = p | beam.Create(flights())
        assert_that(
            rows | routes | "RouteKeys" >> beam.Map(lambda kv: kv[0]),
            lambda keys: sorted(keys) == ["LAX-LAS", "ORD-LGA"] or pytest.fail(str(keys)),
            label="CheckRoutes",
        )
        assert_that(
            rows | origins | "OriginKeys" >> beam.Map(lambda kv: kv[0]),
            lambda keys: sorted(keys) == ["LAX", "ORD"] or pytest.fail(str(keys)),
            label="CheckOrigins",
        )
        # One record per requested quantile.
        assert_that(
            rows | delays | "Quantiles" >> beam.combiners.Count.Globally(),
            lambda counts: counts == [2] or pytest.fail(str(counts)),
            label="CheckQuantiles",
        )
    report = dps.explain_pipeline(accountant)
    for label in ("TopRoutes", "TopOrigins", "Delays"):
        assert label in report, report
    # A fourth release would exceed the shared budget: refused when the pipeline is built.
    with pytest.raises(dps.BudgetExceededError):
        extra = dps.DPCount(dps.PrivacyBudget.pure(0.5), accountant=accountant)
        _ = beam.Pipeline(runner=FnApiRunner()) | beam.Create([1]) | extra
