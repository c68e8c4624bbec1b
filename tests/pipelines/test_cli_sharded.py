"""``beam-dpsketch heavy-hitters --mechanism design-d | untrusted-shards`` (FnApiRunner in-process).

The command runs the sharded sequential releases on a CSV file: Design D with ``--shards``,
the untrusted-aggregator baseline with ``--holder`` naming each row's data holder. Options that
would have no effect, and the untrusted baseline without ``--holder``, are refused naming the
option.
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
    rows = ["site,browser"]
    for site in ("north", "south", "east"):
        rows += [f"{site},firefox"] * 300 + [f"{site},chrome"] * 150 + [f"{site},lynx"]
    path.write_text("\n".join(rows) + "\n")
    return str(path)


def base(path: str) -> list[str]:
    return ["heavy-hitters", "--input", path, "--column", "browser", "--k", "16", "--epsilon", "1"]


def test_design_d_releases_the_heavy_keys_with_error_bounds(events_csv, capsys):
    args = [*base(events_csv), "--mechanism", "design-d", "--shards", "4", "--format", "json"]
    code, out, err = run_cli([*args, "--insecure-test-seed", "5", "--explain", RUNNER], capsys)
    assert code == 0, err
    envelope = json.loads(out)
    rows = {r["key"]: r for r in envelope["rows"]}
    assert set(rows) == {"firefox", "chrome"}  # "lynx" (3 rows) stays under the threshold
    # k = 16 above the distinct keys: exact sketches, only noise (well within 20 counts).
    assert abs(rows["firefox"]["estimate"] - 900) < 20
    assert all(r["error_bound"] is not None for r in rows.values())
    params = envelope["parameters"]
    assert params["shards"] == 4 and params["error_confidence"] == 0.95
    assert envelope["mechanism"].endswith("design-d")
    assert "design-d" in err  # --explain states the mechanism before the run


def test_untrusted_shards_sums_the_holders_releases(events_csv, capsys):
    args = [*base(events_csv), "--mechanism", "untrusted-shards", "--holder", "site"]
    code, out, err = run_cli(
        [*args, "--shards", "3", "--format", "json", "--insecure-test-seed", "6", RUNNER], capsys
    )
    assert code == 0, err
    envelope = json.loads(out)
    rows = {r["key"]: r for r in envelope["rows"]}
    assert set(rows) == {"firefox", "chrome"}
    # Up to three noise terms per key (each within a few counts at eps = 1).
    assert abs(rows["firefox"]["estimate"] - 900) < 60
    assert envelope["parameters"]["holder"] == "site"
    assert envelope["parameters"]["shards"] == 3


@pytest.mark.parametrize(
    "extra,named",
    [
        (["--mechanism", "sequential", "--shards", "4"], "--shards"),
        (["--mechanism", "design-d", "--holder", "site"], "--holder"),
        (["--mechanism", "untrusted-shards"], "--holder"),
        (["--mechanism", "untrusted-shards", "--holder", "site", "--shards", "30"], "shards"),
    ],
)
def test_options_that_do_not_apply_are_refused_naming_them(events_csv, capsys, extra, named):
    code, out, err = run_cli([*base(events_csv), *extra, RUNNER], capsys)
    assert code == 2, err
    assert out == ""
    assert named in err and "Traceback" not in err
