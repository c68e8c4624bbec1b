"""``heavy-hitters`` names, when fewer keys than ``--top`` come out, the option that releases more.

For every release the advice printed on stderr must name the lever that lowers the bar for that
mechanism, and not one that does nothing for it (``--k`` for ``user-exact``, which builds no
sketch). Each end-to-end case runs the command (FnApiRunner, the command's default runner) on a
small CSV built so that the default run falls short, then again with the named lever, and checks
that more keys are released.
"""

from __future__ import annotations

import json

import pytest

from beam_dpsketch.pipelines.cli import main
from beam_dpsketch.pipelines.heavy_hitters import shortfall_message


def _run(args, capsys):
    code = main([*args, "--format", "json", "--insecure-test-seed", "5"])
    out, err = capsys.readouterr()
    assert code == 0, err
    return len(json.loads(out)["rows"]), err


# --------------------------------------------------------------------------------------------
# The message, per mechanism
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mechanism", "user_level", "named", "not_named"),
    [
        (None, False, ["raise --k", "--epsilon", "--selection-fraction"], ["user-exact"]),
        ("select-then-count", False, ["raise --k", "--selection-fraction"], ["user-exact"]),
        ("design-b", False, ["raise --k", "max-shards * k", "--epsilon"], ["--selection"]),
        ("sequential", False, ["raise --k", "--epsilon"], ["max-shards", "--selection"]),
        ("merged-gshm", False, ["raise --epsilon", "smaller k", "select-then-count"], []),
        ("merged-laplace", False, ["raise --epsilon", "smaller k", "design-b"], []),
        (None, True, ["raise --max-contributions", "--epsilon", "--k changes nothing"], []),
        ("user-exact", True, ["raise --max-contributions", "square root"], ["raise --k"]),
        (
            "pamg-gshm",
            True,
            ["raise --max-contributions", "square root", "user-exact"],
            ["smaller --k"],
        ),
        ("select-then-count", True, ["raise --epsilon", "raise --max-contributions"], []),
    ],
)
def test_advice_names_the_lever_of_each_mechanism(mechanism, user_level, named, not_named):
    text = shortfall_message(
        0, 100, 4096, 1.0, 21.08, mechanism, user_level=user_level, max_contributions=3
    )
    assert text.startswith("# heavy-hitters: 0 of the 100 requested keys were released.")
    assert "threshold 21.08" in text
    for phrase in named:
        assert phrase in text, phrase
    for phrase in not_named:
        assert phrase not in text, phrase
    if mechanism == "user-exact" or (mechanism is None and user_level):
        assert "--max-contributions=3" in text
        assert "users * m/(k+1)" not in text and "rows/(k+1)" not in text


# --------------------------------------------------------------------------------------------
# The named lever releases more (end to end)
# --------------------------------------------------------------------------------------------


@pytest.fixture
def element_csv(tmp_path):
    # 40 keys of 300 rows among 3,000 single rows: k = 16 undercounts each by up to
    # 15,000/17 > 300, so none clears the bar; k = 4096 counts them exactly.
    path = tmp_path / "names.csv"
    rows = [f"n{i % 40}" for i in range(12_000)] + [f"s{i}" for i in range(3_000)]
    path.write_text("name\n" + "\n".join(rows) + "\n")
    return path


@pytest.mark.parametrize(
    "mechanism", [[], ["--mechanism", "design-b"], ["--mechanism", "sequential"]]
)
def test_raising_k_releases_more_where_the_advice_says_so(element_csv, capsys, mechanism):
    base = ["heavy-hitters", "--input", str(element_csv), "--column", "name", "--top", "100"]
    base += ["--epsilon", "1", *mechanism]
    short, err = _run([*base, "--k", "16"], capsys)
    assert short < 100 and "raise --k" in err
    more, _ = _run([*base, "--k", "4096"], capsys)
    assert short == 0 and more >= 30


def test_merged_releases_more_with_the_epsilon_the_advice_names(tmp_path, capsys):
    # 10 keys of 150 rows, k = 16 (exact): the merged Laplace threshold is k/epsilon-sized.
    path = tmp_path / "few.csv"
    path.write_text("name\n" + "\n".join(f"n{i % 10}" for i in range(1_500)) + "\n")
    base = ["heavy-hitters", "--input", str(path), "--column", "name", "--top", "10"]
    base += ["--mechanism", "merged-laplace", "--k", "16"]
    short, err = _run([*base, "--epsilon", "1"], capsys)
    assert short == 0 and "raise --epsilon" in err
    more, _ = _run([*base, "--epsilon", "8"], capsys)
    assert more >= 8


def _users_csv(tmp_path, users: int, keys: int):
    """Every user holds the same ``keys`` distinct keys (one row each)."""
    path = tmp_path / f"users_{users}_{keys}.csv"
    lines = [f"u{u},k{j}" for u in range(users) for j in range(keys)]
    path.write_text("user,key\n" + "\n".join(lines) + "\n")
    return path


def test_user_exact_releases_more_with_max_contributions_not_k(tmp_path, capsys):
    # 200 users of the same 40 keys: with m = 1 each user counts for one key (about 5 users per
    # key, far below the threshold of about 21); with m = 40 every key has 200 users, above the
    # threshold of about 147 that m = 40 needs.
    base = ["heavy-hitters", "--input", str(_users_csv(tmp_path, 200, 40)), "--column", "key"]
    base += ["--privacy-id", "user", "--epsilon", "1", "--top", "40"]
    short, err = _run(base, capsys)
    assert short == 0
    assert "raise --max-contributions" in err and "raise --k" not in err
    same, _ = _run([*base, "--k", "65536"], capsys)
    assert same == 0  # raising --k does nothing for user-exact
    more, _ = _run([*base, "--max-contributions", "40"], capsys)
    assert more >= 30


def test_pamg_gshm_releases_more_with_max_contributions(tmp_path, capsys):
    # 150 users of the same 20 keys: with m = 1 about 7.5 users per key, below the threshold of
    # about 21 at epsilon 1; with m = 20 every key has 150 users, above the threshold of about
    # 100 that m = 20 needs (it grows with sqrt(m), not with k).
    base = ["heavy-hitters", "--input", str(_users_csv(tmp_path, 150, 20)), "--column", "key"]
    base += ["--privacy-id", "user", "--mechanism", "pamg-gshm", "--k", "64", "--epsilon", "1"]
    base += ["--top", "20"]
    short, err = _run(base, capsys)
    assert short == 0 and "raise --max-contributions" in err
    more, _ = _run([*base, "--max-contributions", "20"], capsys)
    assert more >= 15


def test_user_level_select_then_count_releases_more_with_epsilon(tmp_path, capsys):
    # 60 users of the same 5 keys, m = 1: about 12 users per key, below the selection
    # threshold at epsilon 1 (the selection runs at epsilon/m), above it at epsilon 8.
    base = ["heavy-hitters", "--input", str(_users_csv(tmp_path, 60, 5)), "--column", "key"]
    base += ["--privacy-id", "user", "--top", "5", "--mechanism", "select-then-count"]
    short, err = _run([*base, "--epsilon", "1"], capsys)
    assert short == 0 and "raise --epsilon" in err and "--mechanism user-exact" in err
    more, _ = _run([*base, "--epsilon", "8"], capsys)
    assert more >= 4
