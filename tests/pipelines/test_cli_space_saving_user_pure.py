"""``beam-dpsketch heavy-hitters --mechanism space-saving | user-pure-pp`` (FnApiRunner
in-process).

SpaceSaving runs on a key column; user-level PURE_PP reads ``--privacy-id`` and a declared
``--universe`` file and states pure epsilon-DP. Options that would have no effect, and
user-pure-pp without a universe, are refused naming the option.
"""

from __future__ import annotations

import json

import pytest

from beam_dpsketch.pipelines.cli import main

RUNNER = "--runner=FnApiRunner"


def run_cli(args: list[str], capsys) -> tuple[int, str, str]:
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def events_csv(tmp_path):
    path = tmp_path / "events.csv"
    rows = ["user,browser"]
    for u in range(400):
        rows.append(f"u{u},firefox")
        if u % 2 == 0:
            rows.append(f"u{u},chrome")
        if u % 50 == 0:
            rows.append(f"u{u},lynx")
    path.write_text("\n".join(rows) + "\n")
    return str(path)


@pytest.fixture
def universe_file(tmp_path):
    path = tmp_path / "universe.txt"
    path.write_text("\n".join(["firefox", "chrome", "lynx", "safari", "edge", "opera"]) + "\n")
    return str(path)


def base(path: str) -> list[str]:
    return ["heavy-hitters", "--input", path, "--column", "browser", "--epsilon", "1"]


def test_space_saving_releases_the_heavy_keys_with_error_bounds(events_csv, capsys):
    args = [*base(events_csv), "--mechanism", "space-saving", "--k", "4", "--format", "json"]
    code, out, err = run_cli([*args, "--insecure-test-seed", "5", "--explain", RUNNER], capsys)
    assert code == 0, err
    envelope = json.loads(out)
    rows = {r["key"]: r for r in envelope["rows"]}
    assert set(rows) == {"firefox", "chrome"}  # "lynx" (9 rows) stays under the cut
    # Four counters hold every key: exact counts, only noise.
    assert abs(rows["firefox"]["estimate"] - 400) < 20
    assert all(r["error_bound"] is not None for r in rows.values())
    assert envelope["mechanism"].endswith("space-saving")
    assert "space-saving" in err


def test_user_pure_pp_states_pure_dp_over_the_universe(events_csv, universe_file, capsys):
    args = [
        *base(events_csv),
        "--privacy-id",
        "user",
        "--max-contributions",
        "2",
        "--mechanism",
        "user-pure-pp",
        "--universe",
        universe_file,
        "--k",
        "4",
        "--top",
        "2",
        "--format",
        "json",
    ]
    code, out, err = run_cli([*args, "--insecure-test-seed", "6", RUNNER], capsys)
    assert code == 0, err
    envelope = json.loads(out)
    keys = [r["key"] for r in envelope["rows"]]
    assert keys == ["firefox", "chrome"]
    assert "(pure DP)" in envelope["guarantee"]
    assert envelope["parameters"]["max_contributions"] == 2


@pytest.mark.parametrize(
    ("extra", "match"),
    [
        (["--mechanism", "space-saving", "--universe", "u.txt"], "--universe"),
        (["--privacy-id", "user", "--mechanism", "user-pure-pp"], "--universe"),
    ],
)
def test_options_without_effect_or_missing_are_refused(events_csv, capsys, extra, match):
    code, _, err = run_cli([*base(events_csv), *extra, RUNNER], capsys)
    assert code != 0 and match in err


def test_space_saving_shortfall_advice_names_the_lever_that_works(tmp_path, capsys):
    # 40 keys of 300 rows and 3,000 singletons: with 16 counters the minimum count is far
    # above 300, so nothing clears the cut; 4,096 counters hold every key.
    path = tmp_path / "names.csv"
    rows = [f"n{i % 40}" for i in range(12_000)] + [f"s{i}" for i in range(3_000)]
    path.write_text("name\n" + "\n".join(rows) + "\n")
    base = ["heavy-hitters", "--input", str(path), "--column", "name", "--top", "100"]
    base += ["--epsilon", "1", "--mechanism", "space-saving", "--format", "json", RUNNER]
    code, out, err = run_cli([*base, "--k", "16"], capsys)
    assert code == 0 and len(json.loads(out)["rows"]) < 40
    assert "raise --k" in err and "minimum count" in err
    code, out, _ = run_cli([*base, "--k", "4096"], capsys)
    assert code == 0 and len(json.loads(out)["rows"]) == 40


@pytest.mark.parametrize("mechanism", ["space-saving", "user-pure-pp"])
def test_refused_on_dask_before_any_cluster_starts(events_csv, capsys, mechanism):
    # Both keep one sketch per window in keyed state, which the DaskRunner does not implement.
    code, _, err = run_cli(
        [*base(events_csv), "--mechanism", mechanism, "--runner", "dask"], capsys
    )
    assert code != 0
    assert f"heavy-hitters --mechanism {mechanism}" in err and "state and timers" in err
