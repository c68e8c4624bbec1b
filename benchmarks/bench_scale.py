"""Cost against input size, distinct keys and query batches, through the command line.

``python -m benchmarks.run --only Scale``: every subcommand of ``beam-dpsketch`` (heavy hitters
with its default release and with ``--mechanism sequential``, frequencies, quantiles,
continual, sliding-window with the windows ``W`` of :data:`SLIDING_WINDOWS`, intermittent,
and the exact ``sketch``) on Parquet files of int64 keys, each in a fresh process timed by
``/usr/bin/time`` (wall seconds and peak resident memory):

* 1 M, 10 M and 100 M rows of Zipf(1.1) keys folded onto 10^4 distinct values;
* 10 M rows with 10^4 and with 10^7 distinct keys (each key about once: a permutation);
* ``intermittent`` on 10 M rows with 100, 10^4 and 10^5 query batches (two keys each).

Memory should stay flat in the distinct keys, the query batches and the rows (the reader
streams batches), and time grow linearly in the rows; for sliding-window also in ``W`` (about
20 queries per run, so the aggregator holds the tables of the blocks they read). ``--quick``
drops the 100 M-row file; ``python -m benchmarks.bench_scale --sliding 1e6`` runs the
sliding-window rows alone at the sizes given.
"""

from __future__ import annotations

import csv
import functools
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

#: Sliding-window lengths W: ten-row blocks to the window of the other subcommands' rows.
SLIDING_WINDOWS = (100, 1_000, 100_000)


def _sliding_args(window: int, n: int) -> list[str]:
    """``sliding-window`` arguments: window ``W``, about 20 queries whatever ``n``."""
    every = max(100_000, n // 20)
    return [
        "--window", str(window), "--release-every", str(every),
        "--query", "1", "2", "--epsilon", "1", "--delta", "1e-6",
    ]  # fmt: skip


#: Subcommand label -> (subcommand, its arguments given the number of rows).
COMMANDS: dict[str, tuple[str, Callable[[int], list[str]]]] = {
    "heavy-hitters": (
        "heavy-hitters",
        lambda n: ["--key-type", "int", "--epsilon", "1", "--top", "10"],
    ),
    "heavy-hitters sequential": (
        "heavy-hitters",
        lambda n: ["--key-type", "int", "--epsilon", "1", "--top", "10", "--mechanism", "sequential"],
    ),
    "frequencies": (
        "frequencies",
        lambda n: ["--key-type", "int", "--epsilon", "1", "--query", "1"],
    ),
    "quantiles": (
        "quantiles",
        lambda n: ["--epsilon", "1", "--lower", "0", "--upper", "10000000", "--q", "0.5"],
    ),
    "continual": (
        "continual",
        lambda n: ["--horizon", str(n), "--query", "1", "2", "--epsilon", "0.5", "--delta", "1e-6"],
    ),
    **{
        f"sliding-window W={w:,}": ("sliding-window", functools.partial(_sliding_args, w))
        for w in SLIDING_WINDOWS
    },
    "sketch": ("sketch", lambda n: ["--sketch", "count-min", "--query", "1", "2"]),
}  # fmt: skip

#: Query batches of the intermittent runs (10 M rows).
QUERY_BATCHES = (100, 10_000, 100_000)


def _write(path: Path, rows: int, distinct: int, seed: int) -> None:
    """``rows`` int64 keys in chunks (bounded memory while writing); benchmark data only."""
    rng = np.random.default_rng(seed)
    chunk = 5_000_000
    schema = pa.schema([("key", pa.int64())])
    with pq.ParquetWriter(path, schema) as writer:
        for start in range(0, rows, chunk):
            n = min(chunk, rows - start)
            if distinct >= rows:
                keys = np.arange(start, start + n, dtype=np.int64)
                rng.shuffle(keys)
            else:
                keys = rng.zipf(1.1, n).astype(np.int64) % distinct
            writer.write_table(pa.table({"key": keys}, schema=schema))


def _queries(path: Path, rows: int, batches: int) -> None:
    """``batches`` query batches of keys 1 and 2 at evenly spaced positions (public)."""
    with open(path, "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["time", "key"])
        for b in range(1, batches + 1):
            t = b * rows // batches
            out.writerows([[t, 1], [t, 2]])


def _run(command: str, args: list[str], path: Path) -> tuple[float, float]:
    """Wall seconds and peak RSS (MiB) of one CLI run in a fresh process."""
    cli = [sys.executable, "-m", "beam_dpsketch.pipelines.cli", command, "--input", str(path)]
    argv = ["/usr/bin/time", "-f", "%M", *cli, "--column", "key", *args, "--format", "json"]
    start = time.perf_counter()
    proc = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"{command} failed: {proc.stderr.strip().splitlines()[-2:]}")
    peak_kib = int(proc.stderr.strip().splitlines()[-1])
    return seconds, peak_kib / 1024


def write_keys(path: Path, rows: int, distinct: int, seed: int) -> None:
    """Write the Scale section's input: ``rows`` Zipf(1.1) int64 keys folded onto ``distinct``
    values (a shuffled permutation when ``distinct >= rows``), column ``key``."""
    _write(path, rows, distinct, seed)


def run_cli(command: str, args: list[str], path: Path) -> tuple[float, float]:
    """Wall seconds and peak RSS (MiB) of ``beam-dpsketch command`` on ``path`` in a fresh
    process, as each row of the Scale section is measured."""
    return _run(command, args, path)


def _row(label: str, n: int, distinct: int, batches: str, seconds: float, peak: float) -> dict:
    print(
        f"  {label:<25} {n:>11,} rows {distinct:>11,} keys {batches:>8} batches "
        f"{seconds:7.1f} s {peak:7.0f} MiB",
        file=sys.stderr,
    )
    return {
        "command": label,
        "rows": f"{n:,}",
        "distinct_keys": f"{distinct:,}",
        "query_batches": batches,
        "seconds": round(seconds, 1),
        "rows_per_s": f"{n / seconds / 1e6:.2f} M",
        "peak_rss_mib": round(peak),
    }


def run(quick: bool = False) -> list[dict]:
    cases = [(1_000_000, 10_000), (10_000_000, 10_000), (10_000_000, 10_000_000)]
    if not quick:
        cases.append((100_000_000, 10_000))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, (n, distinct) in enumerate(cases):
            path = Path(tmp) / f"keys_{n}_{distinct}.parquet"
            _write(path, n, distinct, seed=i)
            for label, (command, args) in COMMANDS.items():
                seconds, peak = _run(command, args(n), path)
                rows.append(_row(label, n, distinct, "", seconds, peak))
            if (n, distinct) == (10_000_000, 10_000):
                for batches in QUERY_BATCHES:
                    queries = Path(tmp) / f"queries_{batches}.csv"
                    _queries(queries, n, batches)
                    args = ["--key-type", "int", "--queries", str(queries), "--epsilon", "1"]
                    seconds, peak = _run("intermittent", args, path)
                    rows.append(_row("intermittent", n, distinct, f"{batches:,}", seconds, peak))
            path.unlink()
    return rows


def run_sliding(rows: tuple[int, ...] = (1_000_000, 10_000_000)) -> list[dict]:
    """The ``sliding-window`` rows alone, at the given input sizes (a reduced-size run)."""
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, n in enumerate(rows):
            path = Path(tmp) / f"keys_{n}.parquet"
            _write(path, n, 10_000, seed=i)
            for w in SLIDING_WINDOWS:
                label = f"sliding-window W={w:,}"
                command, args = COMMANDS[label]
                seconds, peak = _run(command, args(n), path)
                out.append(_row(label, n, 10_000, "", seconds, peak))
            path.unlink()
    return out


if __name__ == "__main__":
    # ``--sliding [ROWS ...]``: the sliding-window rows only, e.g. ``--sliding 1000000``.
    if "--sliding" in sys.argv:
        sizes = [int(float(a)) for a in sys.argv[sys.argv.index("--sliding") + 1 :]]
        result = run_sliding(tuple(sizes) or (1_000_000, 10_000_000))
    else:
        result = run(quick="--quick" in sys.argv)
    for row in result:
        print(row)
