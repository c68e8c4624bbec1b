"""The ``user-pure-pp`` heavy-hitter mechanism in a Beam pipeline (FnApiRunner, in-process)."""

from __future__ import annotations

import apache_beam as beam
import pytest
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing.util import assert_that
from collect import DumpToFile

from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import PrivacyBudget, PrivacyUnit
from beam_dpsketch.sketches.misra_gries import MisraGries, flatten_users, user_level_pure_pp
from beam_dpsketch.transforms import DPHeavyHitters
from beam_dpsketch.transforms.heavy_hitters import MECHANISMS, UserPurePP

UNIVERSE = [f"k{i}" for i in range(50)]
UNIT = PrivacyUnit(id=lambda r: r[0], max_contributions=2)


def rows() -> list[tuple[str, str]]:
    """400 users: every user holds k0, half of them k1, a tenth k2, and one more key each."""
    out = []
    for u in range(400):
        out.append((f"u{u}", "k0"))
        if u % 2 == 0:
            out.append((f"u{u}", "k1"))
        if u % 10 == 0:
            out.append((f"u{u}", "k2"))
        out.append((f"u{u}", f"k{3 + u % 47}"))
    return out


@pytest.fixture
def dump(tmp_path):
    return DumpToFile(tmp_path / "output.pickle")


def test_pipeline_releases_the_users_top_keys_with_pure_dp(dump):
    t = DPHeavyHitters(
        budget=PrivacyBudget.pure(1.0),
        mechanism=UserPurePP(8, universe=UNIVERSE),
        privacy_unit=UNIT,
        key_fn=lambda r: r[1],
        top=3,
        noise_source=NoiseSource.insecure_for_tests(29),
        with_metadata=True,
    )
    with beam.Pipeline(runner=FnApiRunner()) as p:
        assert_that(p | beam.Create(rows()) | t, dump)
    (release,) = dump.load()
    keys = [r[0] for r in release.records]
    # Each unit keeps 2 of its keys (chosen by a keyed hash): k0 stays by far the heaviest.
    assert keys[0] == "k0" and len(keys) == 3
    assert release.delta == 0.0
    text = t.explain()
    assert "user-pure-pp" in text and "m=2" in text
    assert "user-pure-pp" in MECHANISMS


def test_calibration_is_what_the_release_reports():
    for budget in (PrivacyBudget.pure(0.5), PrivacyBudget.approx(2.0, 1e-6)):
        for universe, method in ((UNIVERSE, "auto"), (range(10**6), "auto")):
            m = UserPurePP(4, universe=universe, method=method).bind(top=None, max_contributions=3)
            stated = m.calibration(budget)
            acc = MisraGries(4).update(flatten_users([["k0", "k1"], ["k0"]] * 20))
            if not isinstance(universe, list):
                acc = MisraGries(4).update(flatten_users([[0, 1], [0]] * 20))
            released = m.release_object(acc, budget, NoiseSource.insecure_for_tests(3).stream("r"))
            direct = user_level_pure_pp(
                acc,
                universe,
                PrivacyBudget.pure(budget.epsilon),
                3,
                NoiseSource.insecure_for_tests(3).stream("r"),
            )
            assert released.items == direct.items
            assert stated["noise_scale"] == pytest.approx(released.noise.scale, rel=1e-12)
            if stated["threshold"] is None:
                assert released.threshold is None
            else:
                assert stated["threshold"] == pytest.approx(released.threshold, rel=1e-12)
            assert stated["neighbouring_relation"] == released.neighbouring
            assert stated["method"] == released.details["method"]


def test_a_universe_is_required_and_element_level_is_refused():
    with pytest.raises(ValueError, match="universe"):
        UserPurePP(8)
    with pytest.raises(ValueError, match="mechanism"):
        p = beam.Pipeline(runner=FnApiRunner())
        _ = (
            p
            | beam.Create(["a"])
            | DPHeavyHitters(
                budget=PrivacyBudget.pure(1.0), mechanism=UserPurePP(8, universe=UNIVERSE)
            )
        )


def test_keys_outside_the_universe_are_not_counted_and_fail_nothing(tmp_path):
    # A failing pipeline would tell that some unit held a key outside the public list, so such
    # keys are dropped before sketching: the release equals the one without them. With more
    # counters than keys the sequential sketch is exact, so its order cannot differ; one
    # selection key keeps the same contributions in both runs.
    def release(data: list[tuple[str, str]], name: str) -> list:
        dump = DumpToFile(tmp_path / f"{name}.pickle")
        t = DPHeavyHitters(
            budget=PrivacyBudget.pure(1.0),
            mechanism=UserPurePP(64, universe=UNIVERSE),
            privacy_unit=UNIT,
            key_fn=lambda r: r[1],
            top=5,
            noise_source=NoiseSource.insecure_for_tests(29),
            selection_key=b"s" * 32,
        )
        with beam.Pipeline(runner=FnApiRunner()) as p:
            assert_that(p | beam.Create(data) | t, dump)
        return [tuple(r[:2]) for r in dump.load()]

    outside = [("intruder", "secret-key"), ("intruder", "other-secret")]
    with_outside = release(rows() + outside, "with")
    assert with_outside == release(rows(), "without")
    assert all(key in UNIVERSE for key, _ in with_outside)
