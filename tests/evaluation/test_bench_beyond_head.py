"""The "Beyond the head" benchmark: its names data, its scoring and the section's structure."""

from __future__ import annotations

import hashlib
import io
import os
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest

from reproduction import datasets as ds


@pytest.fixture(scope="module")
def bench():
    root = str(Path(__file__).resolve().parents[2])
    if root not in sys.path:
        sys.path.insert(0, root)
    from benchmarks import bench_beyond_head

    return bench_beyond_head


# ------------------------------------------------------------------ names data


def _census_table(path: Path) -> Path:
    # Two printed names, then three that print 0.000 and share the cumulative residual 0.001.
    path.write_text(
        "SMITH          1.000  1.000      1\n"
        "JONES          0.001  1.001      2\n"
        "AAA            0.000  1.001      3\n"
        "AAB            0.000  1.002      4\n"
        "AAC            0.000  1.002      5\n"
    )
    return path


def test_name_frequencies_keep_the_printed_head_and_the_tail_mass(tmp_path):
    freqs = ds.load_name_frequencies(_census_table(tmp_path / "dist.all.last"))
    assert freqs.words.tolist() == ["SMITH", "JONES", "AAA", "AAB", "AAC"]
    p = freqs.probabilities
    assert p.sum() == pytest.approx(1.0)
    total = 1.001 + 0.001  # printed head + the tail's cumulative share
    assert p[0] == pytest.approx(1.000 / total, rel=1e-6)
    assert p[1] == pytest.approx(0.001 / total, rel=1e-6)
    assert p[2:].sum() == pytest.approx(0.001 / total, rel=1e-6)
    assert np.all(np.diff(p) <= 0)  # rank order: the tail decreases from the head on


def test_name_table_format_is_checked(tmp_path):
    bad = tmp_path / "bad"
    bad.write_text("SMITH 1.0\n")
    with pytest.raises(ValueError, match="census name table"):
        ds.load_name_frequencies(bad)
    # A tail holding more than half a printed unit per name cannot follow the printed head.
    bad.write_text("SMITH 1.000 1.000 1\nAAA 0.000 1.500 2\n")
    with pytest.raises(ValueError, match="tail"):
        ds.load_name_frequencies(bad)


def _sdist(tmp_path: Path, member_bytes: bytes) -> tuple[Path, str]:
    archive = tmp_path / "src" / "names-0.3.0.tar.gz"
    archive.parent.mkdir()
    with tarfile.open(archive, "w:gz") as tar:
        info = tarfile.TarInfo("names-0.3.0/names/dist.all.last")
        info.size = len(member_bytes)
        tar.addfile(info, io.BytesIO(member_bytes))
    return archive, hashlib.sha256(archive.read_bytes()).hexdigest()


def _client(tmp_path: Path, archive: Path) -> list[str]:
    # Logs its arguments and copies the archive into -d DIR, as pip download does.
    client = tmp_path / "pip.py"
    client.write_text(
        "import shutil, sys, pathlib\n"
        f"pathlib.Path({str(tmp_path / 'args.log')!r}).write_text(' '.join(sys.argv[1:]))\n"
        "args = sys.argv[1:]\n"
        f"shutil.copy({str(archive)!r}, args[args.index('-d') + 1])\n"
    )
    return [sys.executable, str(client)]


def test_fetch_names_asks_for_the_source_distribution_and_checks_it(tmp_path):
    archive, _ = _sdist(tmp_path, b"not the census table\n")
    client = _client(tmp_path, archive)
    with pytest.raises(ds.DatasetUnavailableError, match="sha256"):
        ds.fetch_names(cache=tmp_path / "cache", pip_command=client)
    args = (tmp_path / "args.log").read_text().split()
    assert "--only-binary=:none:" in args and "names==0.3.0" in args


def test_a_pypi_source_distribution_is_extracted_and_cached(tmp_path):
    data = b"SMITH 1.000 1.000 1\n"
    archive, sha = _sdist(tmp_path, data)
    pkg = ds.NAMES_PACKAGE.__class__(
        **{
            **ds.NAMES_PACKAGE.__dict__,
            "archive_sha256": sha,
            "member_sha256": hashlib.sha256(data).hexdigest(),
        }
    )
    path = ds._fetch(
        pkg,
        cache=tmp_path / "cache",
        command=_client(tmp_path, archive),
        registry=None,
        download=True,
        timeout=60,
    )
    assert path.read_bytes() == data and path.name == "dist.all.last"


@pytest.mark.skipif(
    os.environ.get("BEAM_DPSKETCH_NETWORK_TESTS") != "1",
    reason="set BEAM_DPSKETCH_NETWORK_TESTS=1 to download the real datasets",
)
def test_real_names_table_has_a_long_tail():
    freqs = ds.load_name_frequencies(timeout=300)
    assert len(freqs) == 88_799 and freqs.words[0] == "SMITH"
    stream = ds.name_stream(3_800_000, 0, freqs)
    assert len(np.unique(stream)) >= 20_000


# ------------------------------------------------------------------ scoring


def test_coverage_and_width_of_stated_bounds(bench):
    cell = bench.Cell("d", "m", 1.0)
    cell.abs_err = [np.array([0.0, 1.0, 2.0, 3.0]), np.array([4.0, 5.0, 6.0, 10.0])]
    cell.bounds = [np.full(4, 5.0), np.full(4, 5.0)]
    assert cell.coverage() == pytest.approx(6 / 8)  # errors 0..5 are within 5
    p95 = np.quantile([0, 1, 2, 3, 4, 5, 6, 10], 0.95)
    assert cell.width() == pytest.approx(5.0 / p95)
    assert np.isnan(bench.Cell("d", "m", 1.0).coverage())


def _hh_cells(bench, ours_keys: float, pdp_keys: float) -> list:
    ours, pdp = bench.Cell("d", bench.DEFAULT_HH, 1.0), bench.Cell("d", bench.PDP, 1.0)
    for cell, keys in ((ours, ours_keys), (pdp, pdp_keys)):
        cell.keys, cell.recall, cell.mae = [keys], [0.99], [1.0]
        cell.abs_err = [np.zeros(3)]
    ours.bounds = [np.ones(3)]
    return [ours, pdp]


def test_goal_verdicts_follow_the_measurements(bench):
    def verdicts(ours_keys: float) -> dict[str, bool]:
        rows = bench.goal_rows(_hh_cells(bench, ours_keys, 100.0), [], [], [], [])
        return {measure: ok for measure, _, _, ok in rows}

    assert verdicts(100.0)["keys released, heavy hitters"]
    assert not verdicts(99.0)["keys released, heavy hitters"]
    # Every error is 0 <= bound: coverage 100 % is above the 93-97 % goal.
    assert not verdicts(100.0)[f"error bars, {bench.DEFAULT_HH}"]
    # Nothing measured is not a goal met.
    empty = {measure: ok for measure, _, _, ok in bench.goal_rows([], [], [], [], [])}
    assert not any(empty.values())


def test_a_mechanism_that_released_nothing_is_named_as_such(bench):
    cells = _hh_cells(bench, 100.0, 100.0)
    silent = bench.Cell("d", "beam-dpsketch merged-laplace (k=8)", 1.0)
    silent.keys, silent.recall, silent.mae = [0.0, 0.0], [0.0, 0.0], [float("nan")] * 2
    silent.abs_err = [np.zeros(0), np.zeros(0)]
    rows = {m: (v, ok) for m, _, v, ok in bench.goal_rows([*cells, silent], [], [], [], [])}
    assert rows[f"error bars, {silent.impl}"] == ("no key released", False)


# ------------------------------------------------------------------ the quick run


@pytest.fixture(scope="module")
def quick_section(bench, tmp_path_factory):
    if os.environ.get("BEAM_DPSKETCH_NETWORK_TESTS") != "1":
        try:
            ds.fetch_names(download=False)
            ds.fetch_wordfreq(download=False)
        except ds.DatasetUnavailableError as exc:
            pytest.skip(f"data not cached ({exc}); BEAM_DPSKETCH_NETWORK_TESTS=1 fetches it")
    plot = tmp_path_factory.mktemp("plots") / "beyond_the_head.png"
    return bench.run(quick=True, plot_path=plot), plot


def test_quick_run_has_the_goal_table_and_every_measure(quick_section):
    text, plot = quick_section
    lines = text.splitlines()
    start = lines.index("| measure | goal | measured | verdict |")
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip("|").split("|")])
    assert all(r[-1] in ("MET", "NOT MET") for r in rows)
    measures = " / ".join(r[0] for r in rows)
    for measure in (
        "keys released",
        "recall@1000",
        "MAE on released keys",
        "point-query MAE",
        "error bars",
        "quantile rank error",
        "user level",
        "peak memory",
        "CLI speed",
    ):
        assert measure in measures
    for heading in ("### Heavy hitters", "### Point queries", "### Quantiles", "### User level"):
        assert heading in text
    assert "(plots/beyond_the_head.png)" in text
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_make_bench_runs_the_section(bench):
    from benchmarks.run import SECTIONS

    targets = {title: target for title, target, _ in SECTIONS if "Beyond the head" in title}
    assert list(targets.values()) == ["benchmarks.bench_beyond_head:run"]
    assert bench.TITLE in targets


# ------------------------------------------------------------------ parts and progress


def _stub_parts(bench, monkeypatch) -> list[str]:
    """Replace every part by a stub that records its name (no data, no measurement)."""
    ran: list[str] = []

    def stub(name: str, out: list):
        def part(*args, **kwargs):
            ran.append(name)
            return out

        return part

    monkeypatch.setattr(bench, "load_streams", stub("data", []))
    monkeypatch.setattr(bench, "heavy_hitter_cells", stub("heavy", _hh_cells(bench, 1.0, 1.0)))
    monkeypatch.setattr(bench, "point_query_cells", stub("points", []))
    monkeypatch.setattr(bench, "quantile_rows", stub("quantiles", []))
    monkeypatch.setattr(bench, "user_level_rows", stub("user", []))
    monkeypatch.setattr(bench, "scale_rows", stub("scale", []))
    monkeypatch.setattr(bench, "plot", stub("plot", None))
    return ran


def test_only_runs_the_named_parts(bench, monkeypatch, capsys):
    ran = _stub_parts(bench, monkeypatch)
    text = bench.run(trials=1, only=["quantiles", "scale"])
    assert ran == ["quantiles", "scale"]  # no data loaded, no plot drawn
    assert "Parts measured: quantiles, scale (`--only`)." in text
    assert "### Goals" in text
    err = capsys.readouterr().err
    assert "] quantiles" in err and "] memory and speed" in err

    ran.clear()
    text = bench.run(trials=1, only=["heavy"])
    assert ran == ["data", "heavy"]  # the plot shows point queries too: not drawn half empty
    assert "keys released, heavy hitters" in text

    ran.clear()
    bench.run(trials=1)
    assert ran == ["data", "heavy", "points", "quantiles", "user", "scale", "plot"]


def test_only_rejects_a_part_it_does_not_know(bench, monkeypatch, capsys):
    _stub_parts(bench, monkeypatch)
    with pytest.raises(ValueError, match="only must name parts among heavy"):
        bench.run(trials=1, only=["heavy", "bogus"])
    with pytest.raises(SystemExit):
        bench.main(["--only", "heavy,bogus"])
    assert "parts are among heavy, points, quantiles, user, scale" in capsys.readouterr().err
    assert bench.parse_parts("heavy, points") == ("heavy", "points")


def test_progress_names_the_cell_and_the_elapsed_time(bench, capsys):
    import time

    bench.progress("heavy hitters words, design-b, eps 1", time.perf_counter() - 75.25)
    line = capsys.readouterr().err.strip()
    assert line.startswith("[1:15.") and line.endswith("] heavy hitters words, design-b, eps 1")
