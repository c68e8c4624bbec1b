"""``beam-dpsketch heavy-hitters`` defaults past the head: every key a user would expect, on request.

The default (select-then-count, ``k = SELECT_COUNT_K``) holds every distinct key of a modest
column exactly, so its selection uses the exact counts and keeps keys from a count near
``ln(eps/(2 delta))/eps``; ``--top all`` prints every released key without a shortfall notice.
"""

from __future__ import annotations

import json

import pytest

from beam_dpsketch.pipelines.cli import main
from beam_dpsketch.sketches.misra_gries.sizing import SELECT_COUNT_K


def _names_csv(tmp_path):
    # 50 names of 80 rows each, one of 500, and 30 names seen once.
    rows = ["ann"] * 500 + [f"n{i:02d}" for i in range(50) for _ in range(80)]
    rows += [f"rare{i}" for i in range(30)]
    path = tmp_path / "names.csv"
    path.write_text("name\n" + "".join(f"{r}\n" for r in rows))
    return str(path)


def _run(args, capsys):
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("seed", ["2", "5"])
def test_default_run_with_top_all_releases_every_key_above_the_selection(tmp_path, capsys, seed):
    args = ["heavy-hitters", "--input", _names_csv(tmp_path), "--column", "name"]
    args += ["--epsilon", "1", "--top", "all", "--format", "json"]
    args += ["--insecure-test-seed", seed, "--runner=FnApiRunner"]
    code, out, err = _run(args, capsys)
    assert code == 0, err
    envelope = json.loads(out)
    params = envelope["parameters"]
    assert params["k"] == SELECT_COUNT_K and params["top"] is None
    keys = {r["key"] for r in envelope["rows"]}
    # Every key of count 80 is above the count kept with certainty at the selection's share of
    # the budget (about 52 at eps_sel = 0.5, delta = 1e-6); no key seen once passes.
    assert keys == {"ann", *(f"n{i:02d}" for i in range(50))}
    assert params["selection_exact_threshold"] < 80
    assert "requested keys were released" not in err


def test_top_refuses_other_words(tmp_path, capsys):
    args = ["heavy-hitters", "--input", _names_csv(tmp_path), "--column", "name"]
    with pytest.raises(SystemExit) as exc:
        main([*args, "--epsilon", "1", "--top", "some", "--runner=FnApiRunner"])
    assert exc.value.code == 2
    assert "--top must be a positive int or 'all'" in capsys.readouterr().err
